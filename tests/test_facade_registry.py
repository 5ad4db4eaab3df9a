"""The backend registry: built-ins as entry points, plugins, duplicates, broken plugins."""

from importlib.metadata import EntryPoint

import pytest

from memwork.backends.base import declaration_of, supports_of
from memwork.contracts import BaseBackend
from memwork.errors import DuplicateBackend, UnknownBackend
from memwork.plugins import BACKENDS, BUILTIN_BACKENDS, Registry

#: every backend memwork ships after legacy, and what each implements (issue 10's capabilities)
SHIPPED = {
    "pgvector": ["resolve"],
    "qdrant": ["resolve"],
    "weaviate": ["resolve"],
    "mem0": ["write", "compact"],
    "letta": ["resolve", "write", "compact"],
    "neo4j": ["write"],
    "redis-streams": ["write"],
    "langgraph": ["resolve"],
}
SLOT_NAMES = list(SHIPPED)


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
    return EntryPoint(name, f"{__name__}:{target}", BACKENDS)


def test_builtins_are_entry_points_legacy_first():
    assert all(isinstance(e, EntryPoint) and e.group == BACKENDS for e in BUILTIN_BACKENDS)
    registry = Registry({}, plugins=[])
    assert registry.names() == ["legacy-conversation-memory", *SLOT_NAMES]
    assert registry.find("legacy") is registry.find("legacy-conversation-memory")


def test_every_shipped_adapter_is_dormant_with_a_reason_and_implements_what_it_declares():
    registry = Registry({}, plugins=[])
    for name, capabilities in SHIPPED.items():
        backend = registry.get(name)
        decl = declaration_of(backend)
        assert backend.category == decl.category and decl.role and decl.mapping
        assert backend.availability().available is False and backend.availability().reason
        assert [op for op, yes in supports_of(backend).items() if yes] == capabilities
        assert list(decl.capabilities) == capabilities
        assert decl.flag == (
            "MEMORY_VECTOR_ENABLED"
            if name == "pgvector"
            else f"MEMORY_{name.replace('-', '_').upper()}_ENABLED"
        )


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
    with pytest.raises(DuplicateBackend):
        registry.register(make_legacy_twin({}))


class RealLetta(EchoBackend):
    name = "letta"
    category = "lifecycle"


def make_real_letta(env):
    return RealLetta()


def test_a_plugin_cannot_take_the_name_of_a_shipped_adapter():
    registry = Registry({}, plugins=[ep("letta", "make_real_letta")])
    assert [p.name for p in registry.problems()] == ["letta"]
    assert "already registered" in registry.problems()[0].problem
    assert not isinstance(registry.get("letta"), RealLetta)
    assert registry.names().index("letta") == SLOT_NAMES.index("letta") + 1
    with pytest.raises(DuplicateBackend, match="letta"):
        Registry({}, plugins=[]).register(RealLetta())


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
def test_configured_adapters_never_connect_to_build_or_report_status(slot, tmp_path, monkeypatch):
    """Fully configured (every flag on, every variable set), building the facade and ``status()`` open no
    connection; an operation is the first thing that may. An adapter whose embedding module cannot be
    loaded (qdrant, weaviate: ``x.y``) is unavailable and never selected."""
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
    facade = facade_from_env(env)
    status = facade.status()
    row = next(b for b in status["backends"] if b["name"] == slot)
    if slot in ("qdrant", "weaviate"):
        assert row["available"] is False and "embedding_module" in row["reason"]
        assert status["selectedBackends"]["resolve"] == "legacy-conversation-memory"
    else:
        assert row["available"] is True, row
        for operation in SHIPPED[slot]:
            assert status["selectedBackends"][operation] == slot
    assert attempts == []
