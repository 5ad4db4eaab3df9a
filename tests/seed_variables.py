"""The variable names the Memory V2 seed gives each external backend (`memory-v2-facade.md`, "Qdrant
Read-Only Adapter" ... "Remaining External Adapters"): every adapter must read them under exactly these names
(it may add its own). ``required``: what the seed says must be set before the backend may be used."""

from __future__ import annotations

SEED_VARIABLES: dict[str, list[str]] = {
    "qdrant": [
        "MEMORY_QDRANT_ENABLED",
        "MEMORY_QDRANT_URL",
        "MEMORY_QDRANT_EMBEDDING_MODULE",
        "MEMORY_QDRANT_COLLECTION",
    ],
    "weaviate": [
        "MEMORY_WEAVIATE_ENABLED",
        "MEMORY_WEAVIATE_URL",
        "MEMORY_WEAVIATE_EMBEDDING_MODULE",
        "MEMORY_WEAVIATE_COLLECTION",
    ],
    "mem0": [
        "MEMORY_MEM0_ENABLED",
        "MEMORY_MEM0_API_KEY",
        "MEMORY_MEM0_PROJECT_ID",
        "MEMORY_MEM0_BASE_URL",
        "MEMORY_MEM0_WRITE_PATH",
        "MEMORY_MEM0_COMPACT_PATH",
    ],
    "letta": [
        "MEMORY_LETTA_ENABLED",
        "MEMORY_LETTA_API_KEY",
        "MEMORY_LETTA_AGENT_ID",
        "MEMORY_LETTA_PROJECT_ID",
        "MEMORY_LETTA_BASE_URL",
        "MEMORY_LETTA_RESOLVE_PATH",
        "MEMORY_LETTA_WRITE_PATH",
        "MEMORY_LETTA_COMPACT_PATH",
    ],
    "neo4j": [
        "MEMORY_NEO4J_ENABLED",
        "MEMORY_NEO4J_HTTP_URL",
        "MEMORY_NEO4J_USER",
        "MEMORY_NEO4J_PASSWORD",
        "MEMORY_NEO4J_DATABASE",
    ],
    "redis-streams": [
        "MEMORY_REDIS_STREAMS_ENABLED",
        "MEMORY_REDIS_STREAMS_URL",
        "MEMORY_REDIS_STREAMS_STREAM",
    ],
    "langgraph": [
        "MEMORY_LANGGRAPH_ENABLED",
        "MEMORY_LANGGRAPH_URL",
        "MEMORY_LANGGRAPH_POLICY_ID",
    ],
}

SEED_REQUIRED: dict[str, list[str]] = {
    "qdrant": ["MEMORY_QDRANT_ENABLED", "MEMORY_QDRANT_URL", "MEMORY_QDRANT_EMBEDDING_MODULE"],
    "weaviate": ["MEMORY_WEAVIATE_ENABLED", "MEMORY_WEAVIATE_URL", "MEMORY_WEAVIATE_EMBEDDING_MODULE"],
    "mem0": ["MEMORY_MEM0_ENABLED", "MEMORY_MEM0_API_KEY"],
    "letta": ["MEMORY_LETTA_ENABLED", "MEMORY_LETTA_API_KEY", "MEMORY_LETTA_AGENT_ID"],
    "neo4j": ["MEMORY_NEO4J_ENABLED", "MEMORY_NEO4J_HTTP_URL", "MEMORY_NEO4J_USER", "MEMORY_NEO4J_PASSWORD"],
    "redis-streams": ["MEMORY_REDIS_STREAMS_ENABLED", "MEMORY_REDIS_STREAMS_URL"],
    "langgraph": ["MEMORY_LANGGRAPH_ENABLED", "MEMORY_LANGGRAPH_URL"],
}
