"""The smokes: one synthetic exchange with a backend, straight to it, that says exactly what happened.

``memwork smoke pgvector`` (:func:`run_smoke`): the post-migration round trip of the pgvector
destination. Inserts three ``memory-v2-smoke-<run>-*`` rows with deterministic vectors for a synthetic
user, asks the real adapter (:class:`~memwork.backends.pgvector.PgvectorBackend`) for that user's
nearest memories, checks the order, and deletes exactly its own rows unless ``keep``. Never reads
``DATABASE_URL``; with no URL it runs against the embedded PostgreSQL. Its rows are owned by
:data:`~memwork.migrate.ownership.SMOKE_OWNER` like any source's: an id already held by
another source is neither overwritten nor deleted (the insert check fails).

``memwork smoke external`` (:func:`run_external_smoke`): one synthetic call of one operation on one
backend. Unlike the facade (which fails open and would hide a broken backend behind legacy), it calls
the backend itself, within the facade's deadline:

* ``not_configured`` -- the backend's flag or a required variable is missing (exit 0: a dormant backend
  is the default, not a failure); the reason names what to set;
* ``failed`` -- configured, but unavailable (an invalid value, an unloadable embedding module) or the
  call raised, timed out, returned something that is not an object, or returned a memory of another
  user (exit 1, with the redacted reason);
* ``ok`` -- the call answered; for resolve, how many memories came back.

Its synthetic user is ``memory-v2-smoke-<hex>``; a backend that offers ``purge_user`` is asked to
remove it afterwards. An operation the backend does not implement is bad input (exit 2).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from memwork.backends.base import (
    OPERATIONS,
    availability_of,
    configuration_problems,
    declaration_of,
    operation_of,
    reason_of,
    supports_of,
)
from memwork.backends.pgvector import PgvectorBackend
from memwork.errors import UsageError
from memwork.facade.policy import policy_from_env
from memwork.facade.safety import call_with_timeout
from memwork.identifiers import check_identifier
from memwork.migrate.ownership import SMOKE_OWNER, delete_owned, stamped_metadata_sql, upsert_sql
from memwork.pgvector.schema import EMBEDDINGS_TABLE, SMOKE_PREFIX, ensure_schema, table_dimensions
from memwork.plugins import Registry
from memwork.redaction import describe_error, redact_text
from memwork.rollout.roundtrip import answer_items, synthetic_request

if TYPE_CHECKING:
    import psycopg

# ---- smoke pgvector: the destination's round trip ---------------------------------------------

SMOKE_MODEL = "memory-v2-smoke"
EMBEDDED_URL = "pg://embedded"
#: the synthetic users and rows of every smoke
SMOKE_USER_PREFIX = SMOKE_PREFIX


@dataclass
class SmokeReport:
    """``ok`` is the verdict; ``checks`` says which step passed or failed."""

    ok: bool
    table: str
    dimensions: int
    run_id: str
    expected_order: list[str] = field(default_factory=list)
    returned_order: list[str] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=list)
    kept: bool = False
    cleaned: int = 0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        return {
            "ok": data["ok"],
            "table": data["table"],
            "dimensions": data["dimensions"],
            "runId": data["run_id"],
            "expectedOrder": data["expected_order"],
            "returnedOrder": data["returned_order"],
            "scores": data["scores"],
            "checks": data["checks"],
            "kept": data["kept"],
            "cleaned": data["cleaned"],
        }


def smoke_vectors(dimensions: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """The query and three stored vectors, nearest first: e0, (e0+e1)/sqrt2, e1."""
    if dimensions < 2:
        raise UsageError("dimensions", dimensions, "the smoke test needs at least 2 dimensions")
    e0 = np.zeros(dimensions, dtype=np.float32)
    e0[0] = 1.0
    e1 = np.zeros(dimensions, dtype=np.float32)
    e1[1] = 1.0
    diagonal = (e0 + e1) / np.float32(np.sqrt(2.0))
    query = np.zeros(dimensions, dtype=np.float32)
    query[0], query[1] = 1.0, 0.2
    return query, [e0, diagonal, e1]


def run_smoke(
    database_url: str | None = None,
    *,
    table: str = EMBEDDINGS_TABLE,
    dimensions: int = 3,
    create_schema: bool = False,
    create_extension: bool = False,
    keep: bool = False,
) -> SmokeReport:
    """Insert, resolve through the adapter, verify nearest-first, clean up. Never raises on a failed
    check -- the report's ``ok`` says it -- but does raise usage errors before touching anything."""
    from pgvector.psycopg import register_vector

    from memwork.db import pg_connect
    from memwork.db.embedded import ensure

    check_identifier(table)
    run_id = uuid.uuid4().hex[:10]
    report = SmokeReport(ok=False, table=table, dimensions=dimensions, run_id=run_id, kept=keep)
    query, vectors = smoke_vectors(dimensions)
    url = ensure(database_url or EMBEDDED_URL, create=True).text  # pg://embedded starts once, here
    if create_schema:
        ensure_schema(url, table, dimensions, create_extension=create_extension)
        report.checks.append({"check": "schema", "ok": True})
    ids = [f"{SMOKE_PREFIX}{run_id}-{i}" for i in range(len(vectors))]
    report.expected_order = ids
    user_id = f"{SMOKE_PREFIX}user-{run_id}"
    with pg_connect(url, autocommit=True) as conn:
        existing = table_dimensions(conn, table)
        if existing is None:
            report.checks.append({"check": "table", "ok": False, "error": f"{table} does not exist"})
            return report
        if existing != dimensions:
            report.checks.append(
                {"check": "table", "ok": False, "error": f"{table} has vector({existing}), not {dimensions}"}
            )
            return report
        register_vector(conn)
        try:
            inserted = _insert(conn, table, user_id, ids, vectors)
            report.checks.append({"check": "insert", "ok": inserted == len(ids), "rows": inserted})
            _resolve_check(url, table, user_id, query, report)
        finally:
            if not keep:
                report.cleaned = _cleanup(conn, table, ids)
    report.ok = all(check["ok"] for check in report.checks)
    return report


def _insert(
    conn: psycopg.Connection[Any], table: str, user_id: str, ids: list[str], vectors: list[np.ndarray]
) -> int:
    """Insert (or refresh its own) smoke rows; returns how many -- fewer when another source owns an id."""
    metadata, params = stamped_metadata_sql("'{\"smoke\": true}'::jsonb", SMOKE_OWNER)
    columns = ("user_id", "content", "embedding", "embedding_model", "type", "source_memory_id", "metadata")
    select_sql = f"SELECT %s, %s, %s::vector, %s, 'fact', %s, {metadata}"
    written = 0
    # the far row is inserted first so an unordered read would come back in the wrong order
    with conn.transaction():
        for source_id, vector in reversed(list(zip(ids, vectors, strict=True))):
            written += conn.execute(
                upsert_sql(table, columns, select_sql),
                (user_id, f"smoke memory {source_id}", vector, SMOKE_MODEL, source_id, *params),
            ).rowcount
    return written


def _resolve_check(url: str, table: str, user_id: str, query: np.ndarray, report: SmokeReport) -> None:
    backend = PgvectorBackend(url, table=table, pool_max=1)
    try:
        result = backend.resolve({"userId": user_id, "embedding": query.tolist(), "limit": 10})
    except Exception as exc:
        report.checks.append({"check": "resolve", "ok": False, "error": f"{type(exc).__name__}: {exc}"})
        return
    finally:
        backend.close()
    memories = result.get("semanticMemories", [])
    report.returned_order = [m["sourceMemoryId"] for m in memories]
    report.scores = [round(float(m["score"]), 6) for m in memories]
    report.checks.append({"check": "nearest-first", "ok": report.returned_order == report.expected_order})
    report.checks.append({"check": "only-this-user", "ok": all(m["userId"] == user_id for m in memories)})


def _cleanup(conn: psycopg.Connection[Any], table: str, ids: list[str]) -> int:
    """Delete the smoke's own rows among ``ids`` (another source's row with such an id stays)."""
    with conn.transaction(), conn.cursor() as cur:
        deleted, _kept = delete_owned(cur, table, SMOKE_OWNER, ids)
    return len(deleted)


# ---- smoke external: one call on one backend ------------------------------------------------

STATUSES = ("ok", "not_configured", "failed")


@dataclass
class ExternalSmokeReport:
    """What one smoke call did; ``ok`` is False only for ``failed``."""

    backend: str
    operation: str
    status: str
    reason: str | None = None
    elapsed_ms: float = 0.0
    user_id: str = ""
    returned: dict[str, int] = field(default_factory=dict)
    cleanup: str | None = None

    @property
    def ok(self) -> bool:
        return self.status != "failed"

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "operation": self.operation,
            "status": self.status,
            "ok": self.ok,
            "reason": self.reason,
            "elapsedMs": self.elapsed_ms,
            "userId": self.user_id,
            "returned": self.returned,
            "cleanup": self.cleanup,
        }


def run_external_smoke(
    backend: str,
    operation: str,
    env: Mapping[str, str] | None = None,
    *,
    registry: Registry | None = None,
) -> ExternalSmokeReport:
    """Smoke ``operation`` on ``backend`` as the environment configures it (``os.environ`` by default).

    Raises UsageError for an unknown backend or an operation it does not implement.
    """
    env = dict(os.environ if env is None else env)
    if operation not in OPERATIONS:
        raise UsageError("operation", operation, f"must be one of {', '.join(OPERATIONS)}")
    registry = registry or Registry(env)
    target = registry.get(backend)
    decl = declaration_of(target)
    if not supports_of(target)[operation]:
        offered = ", ".join(op for op, yes in supports_of(target).items() if yes) or "nothing"
        raise UsageError("operation", operation, f"{decl.name} does not support it (it supports {offered})")
    report = ExternalSmokeReport(decl.name, operation, "ok")
    problems = configuration_problems(decl, env)
    if problems:
        report.status, report.reason = "not_configured", reason_of(problems)
        return report
    timeout_s = policy_from_env(env).timeout_s
    try:
        avail = call_with_timeout(lambda: availability_of(target), timeout_s, f"{decl.name}.availability")
    except Exception as exc:
        return _failed(report, f"availability check failed: {describe_error(exc)}")
    if not avail.available:
        return _failed(report, f"configured but unavailable: {avail.reason or 'no reason given'}")
    report.user_id = f"{SMOKE_USER_PREFIX}{uuid.uuid4().hex[:12]}"
    method = operation_of(target, operation)
    request = synthetic_request(report.user_id, operation)
    started = time.perf_counter()
    try:
        result = call_with_timeout(lambda: method(dict(request)), timeout_s, f"{decl.name}.{operation}")
    except Exception as exc:
        report.elapsed_ms = _ms(started)
        return _failed(report, describe_error(exc))
    report.elapsed_ms = _ms(started)
    if not isinstance(result, Mapping):
        return _failed(report, f"{operation} returned {type(result).__name__}, not an object")
    report.returned = _counts(result)
    foreign = _foreign_items(result, report.user_id)
    if foreign:
        return _failed(report, f"{operation} returned {foreign} memory item(s) of another user")
    report.cleanup = _purge(target, report.user_id, timeout_s)
    return report


def _failed(report: ExternalSmokeReport, reason: str) -> ExternalSmokeReport:
    report.status, report.reason = "failed", redact_text(reason)
    return report


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)


def _counts(result: Mapping[str, Any]) -> dict[str, int]:
    return {key: len(value) for key, value in result.items() if isinstance(value, list)}


def _foreign_items(result: Mapping[str, Any], user_id: str) -> int:
    return sum(1 for item in answer_items(result) if "userId" in item and item["userId"] != user_id)


def _purge(target: object, user_id: str, timeout_s: float) -> str | None:
    purge = getattr(target, "purge_user", None)
    if not callable(purge):
        return None
    try:
        call_with_timeout(lambda: purge(user_id), timeout_s, "purge_user")
    except Exception as exc:
        return f"cleanup failed: {describe_error(exc)}"
    return "purged"
