"""The in-process canary: may ``MEMORY_BACKEND`` be flipped to the target backend? GO or NO-GO, by gates.

Gates: the facade's status (enabled, configured and selected backend as expected, no config errors),
a fallback check (target made unavailable -> legacy still answers), resolve latency of target vs
legacy on a sample of real users and queries, error counts, and the latest health and backfill
verification reports. The verdict is signed by :func:`memwork.rollout.signoff.signoff_block`.

A target (or legacy database) that cannot be reached is a NO-GO with that reason, not a broken
report: the reachability gates come first and, when one fails, nothing is timed.

Without database URLs the ``canary_signoff`` report gates a sample migration its notebook builds
(:func:`canary_env_for`); the rollout itself never calls the samples.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from memwork.backends.base import declaration_of
from memwork.backends.legacy import legacy_url_from_env
from memwork.db import get_engine, is_database_url, parse_url, pg_connect
from memwork.errors import ServiceUnavailable, UsageError
from memwork.facade import facade_from_env
from memwork.facade.policy import DEFAULT_BACKEND
from memwork.legacy.schema import memory_items
from memwork.percentiles import percentiles
from memwork.pgvector import local_hash
from memwork.pgvector.schema import EMBEDDINGS_TABLE, table_dimensions
from memwork.plugins import Registry
from memwork.redaction import describe_error, first_line, redact_text, redact_url
from memwork.rollout import isolation
from memwork.rollout.signoff import (
    InputReport,
    SignoffParameters,
    read_input_reports,
    signoff_block,
)

#: resolve requests sampled from the legacy database: how many memories each asks for, and the
#: random seed of the sample
REQUEST_LIMIT = 10
SAMPLE_SEED = 0


@dataclass
class Gate:
    """One row of the gate table. A numeric gate also carries its observed value, threshold,
    comparison, unit and whether the threshold is the default or was ``set`` (the report's gate
    strip shows them); ``OFF`` is a gate switched off by its threshold (never a reason)."""

    name: str
    status: str  # PASS, FAIL, SKIP or OFF
    detail: str
    observed: float | None = None
    threshold: float | None = None
    comparison: str = ""
    origin: str = ""
    unit: str = ""

    def to_dict(self) -> dict[str, Any]:
        row: dict[str, Any] = {"gate": self.name, "status": self.status, "detail": self.detail}
        if self.comparison:
            row |= {
                "observed": self.observed,
                "threshold": self.threshold,
                "comparison": self.comparison,
                "origin": self.origin,
                "unit": self.unit,
            }
        return row


@dataclass
class GateResult:
    """Gates, latencies, status payloads and the sign-off block."""

    gates: list[Gate] = field(default_factory=list)
    latency_ms: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)
    fallback_status: dict[str, Any] = field(default_factory=dict)
    signoff: dict[str, Any] = field(default_factory=dict)
    #: which way the verdict was reached (the judge's says ``judge``)
    mode: ClassVar[str] = "gates"

    @property
    def verdict(self) -> str:
        return "NO-GO" if any(g.status == "FAIL" for g in self.gates) else "GO"

    @property
    def reasons(self) -> list[str]:
        return [f"{g.name}: {g.detail}" for g in self.gates if g.status == "FAIL"]

    def latency_table(self) -> dict[str, dict[str, float]]:
        return {name: percentiles(values) for name, values in self.latency_ms.items()}

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "verdict": self.verdict,
            "reasons": self.reasons,
            "gates": [g.to_dict() for g in self.gates],
            "latency_ms": self.latency_table(),
            "errors": self.errors,
            "status": self.status,
            "fallback_status": {k: self.fallback_status.get(k) for k in ("backend", "selectedBackend")},
            "signoff": self.signoff,
        }


def run_gates(env: Mapping[str, str], options: SignoffParameters) -> GateResult:
    """Every gate, in order, against the facade ``env`` configures; a failing gate never stops the
    others. ``options`` are checked first (:class:`UsageError` before anything is measured) and signed
    as given."""
    options.check_gates()
    inputs = read_input_reports(options)
    result = GateResult()
    env = dict(env)
    if not _reachability_gates(result, env, options):
        return _unmeasured(result, env, options, inputs)
    facade = facade_from_env(env)
    try:
        result.status = facade.status()
        _status_gates(result, options)
        requests = sample_requests(legacy_url_from_env(env), int(options.sample_size))
        facade.resolve(requests[0]) if requests else None  # warm the pool and the embedder
        result.latency_ms["target"], result.errors["target"], target_sources = time_resolves(facade, requests)
    finally:
        facade.close()
    legacy = facade_from_env({**env, "MEMORY_BACKEND": "legacy"})
    try:
        result.latency_ms["legacy"], result.errors["legacy"], _ = time_resolves(legacy, requests)
    finally:
        legacy.close()
    _fallback_gate(result, env, options, requests)
    _latency_gates(result, env, options, target_sources)
    _input_gates(result, options, inputs)
    probes = isolation_gate(result, options)
    _sign(result, options, inputs)
    result.signoff["isolation"] = isolation.evidence(options.leak_probes, probes)
    return result


def isolation_gate(result: GateResult, options: SignoffParameters) -> tuple[Any, str] | None:
    """The cross-user probes' bound as a gate (:mod:`memwork.rollout.isolation`); the probes read.
    The report's sign-off needs them: none given is FAIL unless ``waive`` names ``leak_probes``."""
    probes = isolation.read_leak_probes(options.leak_probes)
    waiver = options.waivers().get(isolation.FIELD, "")
    row = isolation.gate_row(probes, True, waiver)
    status = {"pass": "PASS", "fail": "FAIL", "off": "OFF"}.get(row["state"], "SKIP")
    detail = isolation.reason(probes, True, waiver) or row["why"]
    detail = detail.removeprefix(f"{isolation.GATE}: ")
    observed, threshold = row["observed"], row["threshold"]
    result.gates.append(
        Gate(isolation.GATE, status, detail, observed, threshold, "<=", row["origin"], isolation.UNIT)
        if observed is not None
        else Gate(isolation.GATE, status, detail)
    )
    return probes


def _sign(result: GateResult, options: SignoffParameters, inputs: Mapping[str, InputReport | None]) -> None:
    result.signoff = signoff_block(
        result.verdict, approver=options.approver, parameters=options.as_given(), inputs=inputs
    )


# ---- the gates ----------------------------------------------------------------------------------


def sample_requests(
    legacy_url: str, n: int, seed: int = SAMPLE_SEED, limit: int = REQUEST_LIMIT
) -> list[dict[str, Any]]:
    """Resolve requests built from real active items: (user, a query taken from one of their memories)."""
    from sqlalchemy import select

    with get_engine(legacy_url).connect() as conn:
        rows = conn.execute(
            select(memory_items.c.user_id, memory_items.c.content)
            .where(memory_items.c.status == "active")
            .order_by(memory_items.c.id)
            .limit(20_000)
        ).fetchall()
    chosen = random.Random(seed).sample(rows, min(n, len(rows)))
    return [{"userId": u, "query": " ".join(str(c).split()[:6]), "limit": limit} for u, c in chosen]


def time_resolves(facade: Any, requests: list[dict[str, Any]]) -> tuple[list[float], int, list[str]]:
    """Latency (ms) of each resolve, the count of failed ones and which backends answered."""
    latencies: list[float] = []
    errors = 0
    sources: list[str] = []
    for request in requests:
        start = time.perf_counter()
        result = facade.resolve(request)
        latencies.append((time.perf_counter() - start) * 1000)
        errors += not result.get("ok", False)
        sources.append(str(result.get("source")))
    return latencies, errors, sources


def target_url(env: dict[str, str], backend: str) -> str:
    """The target backend's database URL in the canary environment (empty when it declares none)."""
    registry = Registry(env)
    try:
        found = registry.find(backend)
        var = None if found is None else declaration_of(found).database_url_var
    finally:
        registry.close()
    return env.get(var, "") if var else ""


def registered_name(env: dict[str, str], name: str) -> str:
    """The name a backend reports for ``name`` or its alias (``legacy`` -> ``legacy-conversation-memory``)."""
    registry = Registry(env)
    try:
        found = registry.find(name)
        return name if found is None else found.name
    finally:
        registry.close()


def _reachability_gates(result: GateResult, env: dict[str, str], options: SignoffParameters) -> bool:
    """A gate per database the canary talks to; False when one of them cannot be reached."""
    legacy = legacy_url_from_env(env)
    # a SQLite file is not probed: opening it would create it
    probes = [] if legacy.startswith("sqlite") else [("legacy reachable", legacy, probe_sql)]
    url = target_url(env, options.expected_backend)
    if is_database_url(url) and parse_url(url).dialect == "postgresql":
        probes.insert(0, ("target reachable", url, probe_postgresql))
    reachable = True
    for name, url, probe in probes:
        problem = probe(url)
        reachable = reachable and problem is None
        result.gates.append(Gate(name, "FAIL" if problem else "PASS", problem or "connected"))
    return reachable


def probe_postgresql(url: str) -> str | None:
    """None when PostgreSQL at ``url`` answers, else why not (one line, password hidden)."""
    try:
        with pg_connect(url) as conn:
            conn.execute("SELECT 1")
    except ServiceUnavailable as exc:
        return redact_text(str(exc))
    return None


def probe_sql(url: str) -> str | None:
    """None when the SQLAlchemy database at ``url`` answers, else why not (one line, password hidden)."""
    from sqlalchemy import text
    from sqlalchemy.exc import SQLAlchemyError

    try:
        with get_engine(url).connect() as conn:
            conn.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        detail = first_line(getattr(exc, "orig", None) or exc) or type(exc).__name__
        return f"{redact_url(url)} unreachable: {detail}"
    return None


def _unmeasured(
    result: GateResult,
    env: dict[str, str],
    options: SignoffParameters,
    inputs: Mapping[str, InputReport | None],
) -> GateResult:
    """NO-GO without timing anything: status as the facade sees it, the input gates, the sign-off."""
    facade = facade_from_env(env)
    try:
        result.status = facade.status()
    except Exception as exc:  # the status is shown, never the verdict's reason
        problem = {"name": "(status)", "available": False, "reason": describe_error(exc), "supports": []}
        result.status = {"backends": [problem]}
    finally:
        facade.close()
    result.gates.append(Gate("latency and fallback", "SKIP", "not measured: a database is unreachable"))
    _input_gates(result, options, inputs)
    _sign(result, options, inputs)
    return result


def _status_gates(result: GateResult, options: SignoffParameters) -> None:
    status = result.status
    result.gates.append(
        Gate("enabled", "PASS" if status.get("enabled") else "FAIL", f"enabled={status.get('enabled')}")
    )
    configured = status.get("backend")
    result.gates.append(
        Gate("configured backend", "PASS" if configured == options.expected_backend else "FAIL",
             f"MEMORY_BACKEND={configured}, expected {options.expected_backend}")
    )  # fmt: skip
    selected = status.get("selectedBackend")
    detail = f"selected {selected}, expected {options.expected_selected}"
    if (status.get("fallbacks") or {}).get("resolve"):
        detail += f" ({status['fallbacks']['resolve']})"
    result.gates.append(
        Gate("selected backend", "PASS" if selected == options.expected_selected else "FAIL", detail)
    )
    problems = status.get("configErrors") or []
    result.gates.append(
        Gate("configuration", "FAIL" if problems else "PASS",
             "; ".join(f"{p['field']}: {p['problem']}" for p in problems) or "no configuration errors")
    )  # fmt: skip


def _fallback_gate(
    result: GateResult, env: dict[str, str], options: SignoffParameters, requests: list
) -> None:
    """Take the target away (its database URL unset) and check legacy still answers."""
    broken = {**env}
    facade = facade_from_env(env)
    try:  # unset what the target declares: its database URL, else its feature flag
        target = facade.registry.find(options.expected_backend)
        if target is not None and not facade.registry.same(options.expected_backend, DEFAULT_BACKEND):
            decl = declaration_of(target)
            for var in (decl.database_url_var or decl.flag,):
                if var:
                    broken[var] = ""
    finally:
        facade.close()
    facade = facade_from_env(broken)
    try:
        result.fallback_status = facade.status()
        answers = [facade.resolve(r) for r in requests[:5]]
        is_default = lambda name: facade.registry.same(name, DEFAULT_BACKEND)  # noqa: E731
        selected = result.fallback_status.get("selectedBackend")
        ok = bool(answers) and all(a.get("ok") and is_default(a.get("source")) for a in answers)
        ok = ok and is_default(selected)
    finally:
        facade.close()
    result.gates.append(
        Gate("fallback", "PASS" if ok else "FAIL",
             f"target unavailable -> selected {selected}; {sum(bool(a.get('ok')) for a in answers)}/"
             f"{len(answers)} resolves answered by legacy")
    )  # fmt: skip


def _latency_gates(
    result: GateResult, env: dict[str, str], options: SignoffParameters, sources: list[str]
) -> None:
    table = result.latency_table()
    target, legacy = table.get("target", {}), table.get("legacy", {})
    p95 = target.get("p95", float("nan"))
    changed = options.changed()
    result.gates.append(
        Gate("target p95 latency", "PASS" if p95 <= options.max_p95_ms else "FAIL",
             f"p50 {target.get('p50')} ms, p95 {p95} ms (limit {options.max_p95_ms} ms); "
             f"legacy p50 {legacy.get('p50')} ms, p95 {legacy.get('p95')} ms",
             p95 if math.isfinite(p95) else None, float(options.max_p95_ms), "<=",
             _origin("max_p95_ms", changed), "ms")
    )  # fmt: skip
    result.gates.append(p95_ratio_gate(p95, legacy.get("p95"), options))
    errors = result.errors.get("target", 0)
    result.gates.append(
        Gate("errors", "PASS" if errors <= options.max_errors else "FAIL",
             f"{errors} failed target resolves (limit {options.max_errors}); "
             f"legacy {result.errors.get('legacy', 0)}")
    )  # fmt: skip
    want = {options.expected_selected, registered_name(env, options.expected_selected)}
    answered = sum(s in want for s in sources)
    result.gates.append(
        Gate("answered by target", "PASS" if answered == len(sources) and sources else "FAIL",
             f"{answered}/{len(sources)} resolves answered by {options.expected_selected}")
    )  # fmt: skip


def _origin(name: str, changed: Mapping[str, Any]) -> str:
    return "set" if name in changed else "default"


def p95_ratio_gate(target_p95: float, legacy_p95: float | None, options: SignoffParameters) -> Gate:
    """Target p95 over legacy p95 against ``max_p95_ratio``: always a row, ``OFF`` at 0 (the
    default) with the ratio still shown, so a GO says it did not bound the slowdown."""
    ratio = round(target_p95 / legacy_p95, 3) if legacy_p95 and math.isfinite(target_p95) else None
    limit = float(options.max_p95_ratio)
    origin = _origin("max_p95_ratio", options.changed())
    shown = "no p95 to compare" if ratio is None else f"{ratio:.2f}x legacy"
    if limit <= 0:
        return Gate("p95 vs legacy", "OFF", f"{shown}; off (max_p95_ratio 0)",
                    ratio, None, "<=", origin, "x legacy p95")  # fmt: skip
    ok = ratio is not None and ratio <= limit
    return Gate("p95 vs legacy", "PASS" if ok else "FAIL", f"{shown} (limit {limit}x)",
                ratio, limit, "<=", origin, "x legacy p95")  # fmt: skip


def _input_gates(
    result: GateResult, options: SignoffParameters, inputs: Mapping[str, InputReport | None]
) -> None:
    """A gate per input report: the verification must PASS; the health report must PASS (or be INFO)
    at ``min_health_score`` or more. One not given is FAIL -- unless ``waive`` names it with a
    reason, then OFF with that reason (the defaults decide: a sign-off never passes on a report it
    did not read)."""
    waived = options.waivers()

    def missing(gate: str, name: str) -> Gate:
        if name in waived:
            return Gate(gate, "OFF", f"waived: {waived[name]}")
        return Gate(gate, "FAIL", f"no {name} given (waive it on purpose: waive '{name}: <reason>')")

    verification = inputs.get("verification_summary")
    if verification is not None:
        result.gates.append(
            Gate("backfill verification", "PASS" if verification.passed else "FAIL",
                 f"verdict {verification.verdict}")
        )  # fmt: skip
    else:
        result.gates.append(missing("backfill verification", "verification_summary"))
    health = inputs.get("health_summary")
    if health is not None:
        score = (health.summary.get("health") or {}).get("score", 0)
        ok = health.passed and score >= int(options.min_health_score)
        result.gates.append(
            Gate("health", "PASS" if ok else "FAIL",
                 f"verdict {health.verdict}, score {score} (minimum {options.min_health_score})",
                 score, int(options.min_health_score), ">=", _origin("min_health_score", options.changed()))
        )  # fmt: skip
    else:
        result.gates.append(missing("health", "health_summary"))


# ---- the canary's environment ------------------------------------------------------------------


class SampleMigration(Protocol):
    """A small migration built for a standalone run (:func:`memwork.samples.migration.build_migration`)."""

    source_url: str
    dest_url: str
    table: str
    dimensions: int


def canary_env_for(
    options: SignoffParameters, sample_migration: Callable[[], SampleMigration] | None = None
) -> dict[str, str]:
    """The facade environment the gates measure, from the parameters: their URLs, or with neither
    the migration ``sample_migration`` builds (and a hash query module of its dimension); with URLs
    but no ``embedding_module``, a hash module of the target table's dimension."""
    legacy_url, pgvector_url = options.legacy_url, options.pgvector_url
    table, embedding_module = options.table, options.embedding_module
    if not legacy_url:
        if sample_migration is None:
            raise UsageError("legacy_url", "", "give legacy_url and pgvector_url (no sample migration here)")
        built = sample_migration()
        legacy_url, pgvector_url, table = built.source_url, built.dest_url, built.table
        embedding_module = embedding_module or local_hash.write_module(built.dimensions)
    elif not embedding_module:
        embedding_module = default_embedding_module(pgvector_url, table)
    return canary_env(legacy_url, pgvector_url, embedding_module, table)


def default_embedding_module(pgvector_url: str, table: str = EMBEDDINGS_TABLE) -> str:
    """A hash query module of the target table's dimension; empty when the target cannot be
    reached (the ``target reachable`` gate of :func:`run_gates` then says why: NO-GO)."""
    try:
        with pg_connect(pgvector_url) as conn:
            dims = table_dimensions(conn, table)
    except ServiceUnavailable:
        return ""
    if not dims:
        raise UsageError("table", table, "has no vector column with a declared dimension")
    return local_hash.write_module(dims)


def canary_env(
    legacy_url: str, pgvector_url: str, embedding_module: str, table: str = EMBEDDINGS_TABLE
) -> dict[str, str]:
    """The facade environment of a pgvector canary: pgvector selected, legacy behind it, fail-open."""
    return {
        "MEMORY_ENABLED": "1",
        "MEMORY_BACKEND": "pgvector",
        "MEMORY_VECTOR_ENABLED": "1",
        "MEMORY_FAIL_OPEN": "1",
        "MEMORY_LEGACY_DATABASE_URL": legacy_url,
        "MEMORY_PGVECTOR_DATABASE_URL": pgvector_url,
        "MEMORY_PGVECTOR_EMBEDDING_MODULE": embedding_module,
        "MEMORY_PGVECTOR_TABLE": table,
    }
