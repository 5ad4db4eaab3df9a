"""Per-backend configuration check: which variables a backend still needs, and whether it is ready.

Values of secrets (``*_API_KEY``, ``*_PASSWORD`` ...) are never printed, URLs lose their passwords.
Backends outside the built-in table are described by their ``flag`` and an optional
``required_env`` attribute (a sequence of variable names).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memwork.backends.legacy import LEGACY_URL_VAR
from memwork.facade.contract import availability_of
from memwork.facade.policy import TRUE_WORDS
from memwork.facade.registry import Registry
from memwork.redaction import REDACTED, is_secret_name, redact_text, redact_value


@dataclass(frozen=True)
class Var:
    """One environment variable of a backend. ``flag`` variables must be on for readiness."""

    name: str
    required: bool = False
    default: str | None = None
    flag: bool = False
    description: str = ""


def _flag(name: str) -> Var:
    return Var(name, required=True, flag=True, description="feature flag; must be 1")


BACKEND_VARIABLES: dict[str, tuple[Var, ...]] = {
    "legacy-conversation-memory": (
        Var(LEGACY_URL_VAR, default="sqlite:///<workspace>/legacy.db", description="legacy tables URL"),
        Var("MEMORY_LEGACY_EXTRACTOR", description="package.module:function extractor"),
    ),
    "pgvector": (
        _flag("MEMORY_VECTOR_ENABLED"),
        Var("MEMORY_PGVECTOR_DATABASE_URL", required=True, description="dedicated PostgreSQL URL"),
        Var("MEMORY_PGVECTOR_EMBEDDING_MODULE", required=True, description="embedding module"),
        Var("MEMORY_PGVECTOR_TABLE", default="memory_embeddings"),
        Var("MEMORY_PGVECTOR_POOL_MAX", default="5"),
    ),
    "qdrant": (
        _flag("MEMORY_QDRANT_ENABLED"),
        Var("MEMORY_QDRANT_URL", required=True, description="Qdrant HTTP URL"),
        Var("MEMORY_QDRANT_EMBEDDING_MODULE", required=True, description="embedding module"),
        Var("MEMORY_QDRANT_COLLECTION", default="memind_memory"),
    ),
    "weaviate": (
        _flag("MEMORY_WEAVIATE_ENABLED"),
        Var("MEMORY_WEAVIATE_URL", required=True, description="Weaviate URL"),
        Var("MEMORY_WEAVIATE_EMBEDDING_MODULE", required=True, description="embedding module"),
        Var("MEMORY_WEAVIATE_COLLECTION", default="MemindMemory"),
    ),
    "mem0": (
        _flag("MEMORY_MEM0_ENABLED"),
        Var("MEMORY_MEM0_API_KEY", required=True, description="Mem0 API key"),
        Var("MEMORY_MEM0_PROJECT_ID", description="Mem0 project"),
        Var("MEMORY_MEM0_BASE_URL", default="https://api.mem0.ai"),
        Var("MEMORY_MEM0_WRITE_PATH", description="HTTP path for write"),
        Var("MEMORY_MEM0_COMPACT_PATH", description="HTTP path for compact"),
    ),
    "letta": (
        _flag("MEMORY_LETTA_ENABLED"),
        Var("MEMORY_LETTA_API_KEY", required=True, description="Letta API key"),
        Var("MEMORY_LETTA_AGENT_ID", required=True, description="Letta agent id"),
        Var("MEMORY_LETTA_PROJECT_ID", description="Letta project"),
        Var("MEMORY_LETTA_BASE_URL", default="https://api.letta.com"),
        Var("MEMORY_LETTA_RESOLVE_PATH", description="HTTP path for resolve"),
        Var("MEMORY_LETTA_WRITE_PATH", description="HTTP path for write"),
        Var("MEMORY_LETTA_COMPACT_PATH", description="HTTP path for compact"),
    ),
    "neo4j": (
        _flag("MEMORY_NEO4J_ENABLED"),
        Var("MEMORY_NEO4J_HTTP_URL", required=True, description="Neo4j HTTP endpoint"),
        Var("MEMORY_NEO4J_USER", required=True, description="Neo4j user"),
        Var("MEMORY_NEO4J_PASSWORD", required=True, description="Neo4j password"),
        Var("MEMORY_NEO4J_DATABASE", default="neo4j"),
    ),
    "redis-streams": (
        _flag("MEMORY_REDIS_STREAMS_ENABLED"),
        Var("MEMORY_REDIS_STREAMS_URL", required=True, description="Redis URL"),
        Var("MEMORY_REDIS_STREAMS_STREAM", default="memind:memory-events"),
    ),
    "langgraph": (
        _flag("MEMORY_LANGGRAPH_ENABLED"),
        Var("MEMORY_LANGGRAPH_URL", required=True, description="LangGraph URL"),
        Var("MEMORY_LANGGRAPH_POLICY_ID", default="memory_policy"),
    ),
}


def variables_for(backend: Any) -> tuple[Var, ...]:
    """The built-in table entry, else what the backend declares (``flag``, ``required_env``)."""
    name = getattr(backend, "name", "")
    if name in BACKEND_VARIABLES:
        return BACKEND_VARIABLES[name]
    found: list[Var] = []
    if getattr(backend, "flag", None):
        found.append(_flag(backend.flag))
    found += [Var(v, required=True) for v in getattr(backend, "required_env", ())]
    return tuple(found)


def _shown(var: Var, value: str | None) -> str | None:
    if value is None or value == "":
        return None
    return REDACTED if is_secret_name(var.name) else redact_value(var.name, value)


def check_config(registry: Registry, backend_name: str, env: Mapping[str, str]) -> dict[str, Any]:
    """``{backend, available, reason, configured, ready, missing, invalid, variables[]}``.

    ``configured``: every required variable is set and every flag on. ``ready``: configured *and* the
    backend reports itself available (a placeholder slot without an adapter never is). Raises
    UnknownBackend for a bad name.
    """
    backend = registry.get(backend_name)
    name = backend.name
    rows, missing, invalid = [], [], []
    for var in variables_for(backend):
        value = (env.get(var.name) or "").strip()
        if var.required and not value:
            missing.append(var.name)
        elif var.flag and value.lower() not in TRUE_WORDS:
            invalid.append(var.name)
        rows.append(
            {
                "name": var.name,
                "required": var.required,
                "secret": is_secret_name(var.name),
                "set": bool(value),
                "value": _shown(var, value),
                "default": var.default,
                "description": var.description,
            }
        )
    selector = "legacy" if name == "legacy-conversation-memory" else name
    avail = availability_of(backend)
    configured = not missing and not invalid
    return {
        "backend": name,
        "available": avail.available,
        "reason": None if avail.reason is None else redact_text(avail.reason),
        "select": f"MEMORY_BACKEND={selector}",
        "configured": configured,
        "ready": configured and avail.available,
        "missing": missing,
        "invalid": invalid,
        "variables": rows,
    }


def shell_template(result: Mapping[str, Any]) -> str:
    """A copy-paste ``export`` template; secrets are placeholders, never their values."""
    state = "ready" if result["ready"] else "not ready"
    lines = [f"# memwork check config --backend {result['backend']}: {state}"]
    if result["missing"]:
        lines.append(f"# missing: {', '.join(result['missing'])}")
    if result["invalid"]:
        lines.append(f"# must be 1: {', '.join(result['invalid'])}")
    if not result["available"]:
        lines.append(f"# unavailable: {result['reason']}")
    lines += ["export MEMORY_ENABLED=1", f"export {result['select']}"]
    for row in result["variables"]:
        lines.append(_export_line(row))
    return "\n".join(lines)


def _export_line(row: Mapping[str, Any]) -> str:
    name = row["name"]
    if row["secret"]:
        note = "set; value hidden" if row["set"] else "required secret" if row["required"] else "secret"
        return f"export {name}='<secret>'  # {note}"
    if row["description"].startswith("feature flag"):
        return f"export {name}=1"
    if row["set"]:
        return f"export {name}={shlex.quote(row['value'])}"
    if row["required"]:
        return f"export {name}=''  # required: {row['description']}"
    default = row["default"] or ""
    return f"# export {name}={shlex.quote(default)}  # optional"
