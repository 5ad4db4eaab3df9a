import dataclasses

import pytest

from memwork.facade.policy import DEFAULT_TIMEOUT_MS, Policy, policy_from_env


def test_defaults():
    policy = policy_from_env({})
    assert (policy.enabled, policy.profile_enabled, policy.event_log_enabled) == (True, True, True)
    assert (policy.vector_enabled, policy.backend, policy.fail_open) == (False, "legacy", True)
    assert policy.timeout_ms == DEFAULT_TIMEOUT_MS and policy.errors == ()
    assert policy.legacy_database_url.endswith("legacy.db")


@pytest.mark.parametrize("word", ["1", "true", "YES", " on "])
def test_true_words(word):
    assert policy_from_env({"MEMORY_VECTOR_ENABLED": word}).vector_enabled is True


@pytest.mark.parametrize("word", ["0", "False", "no", "OFF"])
def test_false_words(word):
    assert policy_from_env({"MEMORY_FAIL_OPEN": word}).fail_open is False


def test_enabled_follows_user_conversation_memory_when_unset():
    assert policy_from_env({"USER_CONVERSATION_MEMORY_ENABLED": "0"}).enabled is False
    env = {"USER_CONVERSATION_MEMORY_ENABLED": "0", "MEMORY_ENABLED": "1"}
    assert policy_from_env(env).enabled is True


def test_bad_values_are_collected_not_raised():
    env = {
        "MEMORY_ENABLED": "maybe",
        "MEMORY_FAIL_OPEN": "sometimes",
        "MEMORY_BACKEND": "Not A Name!",
        "MEMORY_BACKEND_TIMEOUT_MS": "-5",
    }
    policy = policy_from_env(env)
    fields = [e.field for e in policy.errors]
    assert fields == ["MEMORY_ENABLED", "MEMORY_BACKEND", "MEMORY_FAIL_OPEN", "MEMORY_BACKEND_TIMEOUT_MS"]
    assert policy.enabled is True and policy.fail_open is True  # documented defaults kept
    assert policy.backend == "legacy" and policy.timeout_ms == DEFAULT_TIMEOUT_MS
    assert "config error: MEMORY_ENABLED='maybe'" in str(policy)


def test_backend_name_is_lowercased_and_timeout_configurable():
    policy = policy_from_env({"MEMORY_BACKEND": "QDRANT", "MEMORY_BACKEND_TIMEOUT_MS": "250"})
    assert policy.backend == "qdrant" and policy.timeout_s == 0.25


def test_policy_is_immutable_and_never_prints_a_password():
    policy = policy_from_env({"MEMORY_LEGACY_DATABASE_URL": "mysql://app:hunter2@db:3306/memind"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.enabled = False  # type: ignore[misc]
    assert isinstance(policy, Policy)
    for text in (str(policy), repr(policy), str(policy.to_dict())):
        assert "hunter2" not in text
    assert "mysql://app:***@db:3306/memind" in str(policy)


def test_each_backend_flag_is_a_boolean_too():
    env = {"MEMORY_NEO4J_ENABLED": "maybe", "MEMORY_QDRANT_ENABLED": "1", "MEMORY_MEM0_ENABLED": "off"}
    policy = policy_from_env(env)
    assert [(e.field, e.value) for e in policy.errors] == [("MEMORY_NEO4J_ENABLED", "maybe")]
    assert "config error: MEMORY_NEO4J_ENABLED='maybe'" in str(policy)
