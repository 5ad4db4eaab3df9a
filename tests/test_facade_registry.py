"""The backend registry: built-ins as entry points, plugins, duplicates, broken plugins."""

from importlib.metadata import EntryPoint

import pytest

from memwork.backends.base import BaseBackend, supports_of
from memwork.backends.placeholders import SLOTS
from memwork.errors import DuplicateBackend, UnknownBackend
from memwork.facade.registry import BUILTIN_ENTRY_POINTS, GROUP, Registry

SLOT_NAMES = ["pgvector", "qdrant", "weaviate", "mem0", "letta", "neo4j", "redis-streams", "langgraph"]


class EchoBackend(BaseBackend):
    name = "echo"
    category = "policy"

    def resolve(self, request):
        return {"memories": [{"content": request.get("query")}]}


def make_echo(env):
    return EchoBackend()


def make_legacy_twin(env):
    twin = EchoBackend()
    twin.name = "legacy-conversation-memory"
    return twin


def explode(env):
    raise RuntimeError("plugin cannot start")


def ep(name, target):
    return EntryPoint(name, f"{__name__}:{target}", GROUP)


def test_builtins_are_entry_points_legacy_first():
    assert all(isinstance(e, EntryPoint) and e.group == GROUP for e in BUILTIN_ENTRY_POINTS)
    assert [s.name for s in SLOTS] == SLOT_NAMES[1:]  # pgvector is a shipped adapter, not a slot
    registry = Registry({}, plugins=[])
    assert registry.names() == ["legacy-conversation-memory", *SLOT_NAMES]
    assert registry.find("legacy") is registry.find("legacy-conversation-memory")


def test_placeholders_declare_capabilities_and_stay_unavailable():
    registry = Registry({}, plugins=[])
    for slot in SLOTS:
        backend = registry.get(slot.name)
        assert backend.category == slot.category and backend.role
        assert backend.availability().available is False and backend.availability().reason
        assert [op for op, yes in supports_of(backend).items() if yes] == list(slot.capabilities)
        assert backend.declaration is slot and backend.flag == slot.flag


def test_plugins_are_discovered_lazily_and_broken_ones_reported():
    registry = Registry(
        {}, plugins=[ep("echo", "make_echo"), ep("bad", "explode"), ep("gone", "no_such_attr")]
    )
    assert registry._loaded is False
    assert registry.names()[-1] == "echo" and registry.origin("echo").startswith("entry point")
    problems = {p.name: p.problem for p in registry.problems()}
    assert "RuntimeError: plugin cannot start" in problems["bad"]
    assert "failed to load" in problems["gone"]


def test_installed_entry_points_are_read_with_importlib_metadata():
    registry = Registry({})  # the real environment: no plugin installs into memwork.backends here
    assert "legacy-conversation-memory" in registry.names()


def test_duplicate_names_are_refused():
    registry = Registry({}, plugins=[ep("legacy-conversation-memory", "make_legacy_twin")])
    assert registry.get("legacy").__class__.__name__ == "LegacyConversationMemoryBackend"
    assert "already registered" in registry.problems()[0].problem
    registry.register(EchoBackend())
    with pytest.raises(DuplicateBackend, match="echo"):
        registry.register(EchoBackend())
    with pytest.raises(DuplicateBackend):  # not a placeholder: cannot be replaced
        registry.register(make_legacy_twin({}), replace_placeholder=True)


class RealLetta(EchoBackend):
    name = "letta"
    category = "lifecycle"


def make_real_letta(env):
    return RealLetta()


def test_plugin_may_replace_a_placeholder_in_place():
    registry = Registry({}, plugins=[ep("letta", "make_real_letta")])
    assert registry.problems() == []
    assert registry.names().index("letta") == SLOT_NAMES.index("letta") + 1
    assert isinstance(registry.get("letta"), RealLetta)
    in_code = Registry({}, plugins=[])
    in_code.register(RealLetta(), replace_placeholder=True)
    assert isinstance(in_code.get("letta"), RealLetta)


def test_unknown_backend_names_what_exists():
    with pytest.raises(UnknownBackend, match=r"known: .*qdrant"):
        Registry({}, plugins=[]).get("nope")


FULL_SLOT_ENV = {
    "MEMORY_VECTOR_ENABLED": "1",
    "MEMORY_PGVECTOR_DATABASE_URL": "postgresql://pg:pw@127.0.0.1:5/db",
    "MEMORY_QDRANT_ENABLED": "1",
    "MEMORY_QDRANT_URL": "http://127.0.0.1:6333",
    "MEMORY_QDRANT_EMBEDDING_MODULE": "x.y",
    "MEMORY_WEAVIATE_ENABLED": "1",
    "MEMORY_WEAVIATE_URL": "http://127.0.0.1:8080",
    "MEMORY_WEAVIATE_EMBEDDING_MODULE": "x.y",
    "MEMORY_MEM0_ENABLED": "1",
    "MEMORY_MEM0_API_KEY": "k",
    "MEMORY_LETTA_ENABLED": "1",
    "MEMORY_LETTA_API_KEY": "k",
    "MEMORY_LETTA_AGENT_ID": "a",
    "MEMORY_NEO4J_ENABLED": "1",
    "MEMORY_NEO4J_HTTP_URL": "http://127.0.0.1:7474",
    "MEMORY_NEO4J_USER": "neo4j",
    "MEMORY_NEO4J_PASSWORD": "pw",
    "MEMORY_REDIS_STREAMS_ENABLED": "1",
    "MEMORY_REDIS_STREAMS_URL": "redis://127.0.0.1:6379",
    "MEMORY_LANGGRAPH_ENABLED": "1",
    "MEMORY_LANGGRAPH_URL": "http://127.0.0.1:9",
}


@pytest.mark.parametrize("slot", [s for s in SLOT_NAMES if s != "pgvector"])
def test_placeholder_never_connects_and_is_never_selected_even_when_configured(slot, tmp_path, monkeypatch):
    import socket

    from memwork.facade.facade import facade_from_env

    attempts = []

    def no_connect(self, address, *args):
        attempts.append(address)
        raise OSError("test: network is off")

    monkeypatch.setattr(socket.socket, "connect", no_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", no_connect)
    env = {
        **FULL_SLOT_ENV,
        "MEMORY_BACKEND": slot,
        "MEMORY_LEGACY_DATABASE_URL": f"sqlite:///{tmp_path / 'legacy.db'}",
    }
    from memwork.legacy.schema import init_schema

    init_schema(env["MEMORY_LEGACY_DATABASE_URL"], apply=True)
    facade = facade_from_env(env)
    status = facade.status()
    assert set(status["selectedBackends"].values()) == {"legacy-conversation-memory"}
    row = next(b for b in status["backends"] if b["name"] == slot)
    assert row["available"] is False and row["reason"]
    request = {"userId": "u", "sessionId": "s", "messages": [{"role": "user", "content": "I like tea"}]}
    for operation in ("write", "compact", "resolve"):
        result = getattr(facade, operation)(request)
        assert result["ok"] and result["source"] == "legacy-conversation-memory", result
    assert attempts == []
