"""Canary sign-off: may ``MEMORY_BACKEND`` be flipped to the target backend? GO or NO-GO, signed.

Gates: the facade's status (enabled, configured and selected backend as expected, no config errors),
a fallback check (target made unavailable -> legacy still answers), resolve latency of target vs
legacy on a sample of real users and queries, error counts, and the latest health and backfill
verification summaries. The sign-off block binds the verdict to who, when, which code and which
inputs (SHA-256 of the parameters, passwords hidden, and of each input summary file).

A target (or legacy database) that cannot be reached is a NO-GO with that reason, not a broken
report: the reachability gates come first and, when one fails, nothing is timed.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from memwork.checks import both_or_neither
from memwork.db import is_database_url, parse_url
from memwork.errors import ServiceUnavailable, UsageError
from memwork.redaction import first_line, redact_text, redact_url, redact_value

if TYPE_CHECKING:
    import pandas as pd

    from memwork.canary.judge import Judgement


@dataclass
class CanaryOptions:
    """What to check and the thresholds that gate it."""

    env: dict[str, str]
    expected_backend: str = "pgvector"
    expected_selected: str = "pgvector"
    sample_size: int = 30
    limit: int = 10
    max_p95_ms: float = 250.0
    max_p95_ratio: float = 0.0  # target p95 / legacy p95; 0 = not gated
    max_errors: int = 0
    health_summary: str = ""
    verification_summary: str = ""
    min_health_score: int = 0
    require_inputs: bool = False
    approver: str = ""
    seed: int = 0

    def check(self) -> None:
        """Reject impossible settings before anything is measured (the notebook relies on this)."""
        if not 1 <= int(self.sample_size) <= 10_000:
            raise UsageError("sample_size", self.sample_size, "must be from 1 to 10000")
        if float(self.max_p95_ms) <= 0:
            raise UsageError("max_p95_ms", self.max_p95_ms, "must be positive")
        if float(self.max_p95_ratio) < 0:
            raise UsageError("max_p95_ratio", self.max_p95_ratio, "must be 0 (off) or positive")
        if int(self.max_errors) < 0:
            raise UsageError("max_errors", self.max_errors, "must be 0 or more")
        if not 0 <= int(self.min_health_score) <= 100:
            raise UsageError("min_health_score", self.min_health_score, "must be from 0 to 100")
        for name in ("health_summary", "verification_summary"):
            value = getattr(self, name)
            if value and not _summary_path(value).is_file():
                raise UsageError(name, value, "no such summary.json")


@dataclass
class Gate:
    """One row of the gate table."""

    name: str
    status: str  # PASS, FAIL or SKIP
    detail: str

    def to_dict(self) -> dict[str, str]:
        return {"gate": self.name, "status": self.status, "detail": self.detail}


@dataclass
class CanaryResult:
    """Gates, latencies, status payloads and the sign-off block."""

    gates: list[Gate] = field(default_factory=list)
    latency_ms: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)
    fallback_status: dict[str, Any] = field(default_factory=dict)
    signoff: dict[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        return "NO-GO" if any(g.status == "FAIL" for g in self.gates) else "GO"

    @property
    def reasons(self) -> list[str]:
        return [f"{g.name}: {g.detail}" for g in self.gates if g.status == "FAIL"]

    def latency_table(self) -> dict[str, dict[str, float]]:
        return {name: percentiles(values) for name, values in self.latency_ms.items()}

    def signoff_fields(self) -> dict[str, Any]:
        """The sign-off block flat, every digest whole: one row per input file."""
        block = {k: v for k, v in self.signoff.items() if k != "inputs_sha256"}
        for name, value in (self.signoff.get("inputs_sha256") or {}).items():
            block[f"{name}_sha256"] = value or "(not given)"
        return block

    def status_fields(self) -> dict[str, Any]:
        """The facade's status as the canary saw it (the backends table is shown apart)."""
        keys = ("enabled", "backend", "selectedBackend", "selectedBackends", "fallbacks", "vectorEnabled",
                "failOpen", "configErrors", "pluginErrors")  # fmt: skip
        out = {k: self.status.get(k) for k in keys if k in self.status}
        for key in ("configErrors", "pluginErrors", "fallbacks"):
            if key in out and not out[key]:
                out[key] = "none"
        return out

    def latency_rows(self) -> list[dict[str, Any]]:
        """Per backend: sample size, p50, p95, max (ms) and failed resolves."""
        return [
            {"backend": name, **stats, "errors": self.errors.get(name, 0)}
            for name, stats in self.latency_table().items()
        ]

    def gate_frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame([g.to_dict() for g in self.gates])

    def latency_figure(self, limit_ms: float | None = None) -> Any:
        """Box plots of resolve latency per backend, the p95 limit marked."""
        from memwork.reports.display import latency_figure

        return latency_figure(self.latency_ms, limit_ms)

    def backends_frame(self) -> pd.DataFrame:
        """Every backend of the status: name, availability, reason, supported operations."""
        import pandas as pd

        return pd.DataFrame(
            self.status.get("backends") or [], columns=["name", "available", "reason", "supports"]
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "reasons": self.reasons,
            "gates": [g.to_dict() for g in self.gates],
            "latency_ms": self.latency_table(),
            "errors": self.errors,
            "status": self.status,
            "fallback_status": {k: self.fallback_status.get(k) for k in ("backend", "selectedBackend")},
            "signoff": self.signoff,
        }


def percentiles(values: list[float]) -> dict[str, float]:
    """p50, p95, max and count of a latency sample (ms)."""
    if not values:
        return {"count": 0, "p50": float("nan"), "p95": float("nan"), "max": float("nan")}
    arr = np.asarray(values, dtype=float)
    return {
        "count": len(values),
        "p50": round(float(np.percentile(arr, 50)), 3),
        "p95": round(float(np.percentile(arr, 95)), 3),
        "max": round(float(arr.max()), 3),
    }


def _summary_path(value: str) -> Path:
    path = Path(value)
    return path / "summary.json" if path.is_dir() else path


def sample_requests(legacy_url: str, n: int, seed: int = 0, limit: int = 10) -> list[dict[str, Any]]:
    """Resolve requests built from real active items: (user, a query taken from one of their memories)."""
    from sqlalchemy import select

    from memwork.db import get_engine
    from memwork.legacy.schema import memory_items as t

    with get_engine(legacy_url).connect() as conn:
        rows = conn.execute(
            select(t.c.user_id, t.c.content).where(t.c.status == "active").order_by(t.c.id).limit(20_000)
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


def digest(data: Any) -> str:
    """SHA-256 of canonical JSON (sorted keys) -- the fingerprint of the parameters."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def shown_parameters(parameters: dict[str, Any]) -> dict[str, Any]:
    """The parameters as the sign-off may fingerprint them: passwords hidden (a digest of a password
    would let anyone holding the report test guesses against it)."""
    return {k: redact_value(k, v) if isinstance(v, str) else v for k, v in parameters.items()}


def file_digest(path: str) -> str | None:
    return hashlib.sha256(_summary_path(path).read_bytes()).hexdigest() if path else None


def run_canary(options: CanaryOptions, parameters: dict[str, Any] | None = None) -> CanaryResult:
    """Every gate, in order; a failing gate never stops the others."""
    from memwork.backends.legacy import legacy_url_from_env
    from memwork.facade import facade_from_env

    options.check()
    result = CanaryResult()
    env = dict(options.env)
    if not _reachability_gates(result, env, options):
        return _unmeasured(result, env, options, parameters or {})
    facade = facade_from_env(env)
    try:
        result.status = facade.status()
        _status_gates(result, options)
        requests = sample_requests(legacy_url_from_env(env), options.sample_size, options.seed, options.limit)
        facade.resolve(requests[0]) if requests else None  # warm the pool and the embedder
        result.latency_ms["target"], result.errors["target"], target_sources = time_resolves(facade, requests)
    finally:
        facade.close()
    legacy_env = {**env, "MEMORY_BACKEND": "legacy"}
    legacy = facade_from_env(legacy_env)
    try:
        result.latency_ms["legacy"], result.errors["legacy"], _ = time_resolves(legacy, requests)
    finally:
        legacy.close()
    _fallback_gate(result, env, options, requests)
    _latency_gates(result, options, target_sources)
    _input_gates(result, options)
    result.signoff = signoff_block(options, parameters or {}, result.verdict)
    return result


def target_url(env: dict[str, str], backend: str) -> str:
    """The target backend's database URL in the canary environment (empty when it declares none)."""
    from memwork.backends.base import declaration_of
    from memwork.plugins import Registry

    registry = Registry(env)
    try:
        found = registry.find(backend)
        var = None if found is None else declaration_of(found).database_url_var
    finally:
        registry.close()
    return env.get(var, "") if var else ""


def registered_name(env: dict[str, str], name: str) -> str:
    """The name a backend reports for ``name`` or its alias (``legacy`` -> ``legacy-conversation-memory``)."""
    from memwork.plugins import Registry

    registry = Registry(env)
    try:
        found = registry.find(name)
        return name if found is None else found.name
    finally:
        registry.close()


def _reachability_gates(result: CanaryResult, env: dict[str, str], options: CanaryOptions) -> bool:
    """A gate per database the canary talks to; False when one of them cannot be reached."""
    from memwork.backends.legacy import legacy_url_from_env

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
    from memwork.db import pg_connect

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

    from memwork.db import get_engine

    try:
        with get_engine(url).connect() as conn:
            conn.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        detail = first_line(getattr(exc, "orig", None) or exc) or type(exc).__name__
        return f"{redact_url(url)} unreachable: {detail}"
    return None


def _unmeasured(
    result: CanaryResult, env: dict[str, str], options: CanaryOptions, parameters: dict[str, Any]
) -> CanaryResult:
    """NO-GO without timing anything: status as the facade sees it, the input gates, the sign-off."""
    from memwork.facade import facade_from_env
    from memwork.redaction import describe_error

    facade = facade_from_env(env)
    try:
        result.status = facade.status()
    except Exception as exc:  # the status is shown, never the verdict's reason
        problem = {"name": "(status)", "available": False, "reason": describe_error(exc), "supports": []}
        result.status = {"backends": [problem]}
    finally:
        facade.close()
    result.gates.append(Gate("latency and fallback", "SKIP", "not measured: a database is unreachable"))
    _input_gates(result, options)
    result.signoff = signoff_block(options, parameters, result.verdict)
    return result


def _status_gates(result: CanaryResult, options: CanaryOptions) -> None:
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


def _fallback_gate(result: CanaryResult, env: dict[str, str], options: CanaryOptions, requests: list) -> None:
    """Take the target away (its database URL unset) and check legacy still answers."""
    from memwork.backends.base import declaration_of
    from memwork.facade import facade_from_env
    from memwork.facade.policy import DEFAULT_BACKEND

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


def _latency_gates(result: CanaryResult, options: CanaryOptions, sources: list[str]) -> None:
    table = result.latency_table()
    target, legacy = table.get("target", {}), table.get("legacy", {})
    p95 = target.get("p95", float("nan"))
    result.gates.append(
        Gate("target p95 latency", "PASS" if p95 <= options.max_p95_ms else "FAIL",
             f"p50 {target.get('p50')} ms, p95 {p95} ms (limit {options.max_p95_ms} ms); "
             f"legacy p50 {legacy.get('p50')} ms, p95 {legacy.get('p95')} ms")
    )  # fmt: skip
    if options.max_p95_ratio > 0:
        ratio = p95 / legacy["p95"] if legacy.get("p95") else float("inf")
        result.gates.append(
            Gate("p95 vs legacy", "PASS" if ratio <= options.max_p95_ratio else "FAIL",
                 f"{ratio:.2f}x legacy (limit {options.max_p95_ratio}x)")
        )  # fmt: skip
    errors = result.errors.get("target", 0)
    result.gates.append(
        Gate("errors", "PASS" if errors <= options.max_errors else "FAIL",
             f"{errors} failed target resolves (limit {options.max_errors}); "
             f"legacy {result.errors.get('legacy', 0)}")
    )  # fmt: skip
    want = {options.expected_selected, registered_name(options.env, options.expected_selected)}
    answered = sum(s in want for s in sources)
    result.gates.append(
        Gate("answered by target", "PASS" if answered == len(sources) and sources else "FAIL",
             f"{answered}/{len(sources)} resolves answered by {options.expected_selected}")
    )  # fmt: skip


def _input_gates(result: CanaryResult, options: CanaryOptions) -> None:
    from memwork.reports.summary import load_summary

    missing = "SKIP" if not options.require_inputs else "FAIL"
    if options.verification_summary:
        verdict = load_summary(_summary_path(options.verification_summary)).get("verdict")
        result.gates.append(
            Gate("backfill verification", "PASS" if verdict == "PASS" else "FAIL", f"verdict {verdict}")
        )
    else:
        result.gates.append(Gate("backfill verification", missing, "no verification summary given"))
    if options.health_summary:
        summary = load_summary(_summary_path(options.health_summary))
        score = (summary.get("health") or {}).get("score", 0)
        ok = summary.get("verdict") in ("PASS", "INFO") and score >= options.min_health_score
        result.gates.append(
            Gate("health", "PASS" if ok else "FAIL",
                 f"verdict {summary.get('verdict')}, score {score} (minimum {options.min_health_score})")
        )  # fmt: skip
    else:
        result.gates.append(Gate("health", missing, "no health summary given"))


def signoff_block(options: CanaryOptions, parameters: dict[str, Any], verdict: str) -> dict[str, Any]:
    """Who signs, when, on which code and which inputs."""
    from memwork import __version__
    from memwork.reports.runner import git_commit

    return {
        "verdict": verdict,
        "approver": options.approver or "(unsigned)",
        "time_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "memwork_version": __version__,
        "git_commit": git_commit(),
        "parameters_sha256": digest(shown_parameters(parameters)),
        "inputs_sha256": {
            "health_summary": file_digest(options.health_summary),
            "verification_summary": file_digest(options.verification_summary),
        },
    }


def run_from_parameters(
    *,
    legacy_url: str = "",
    pgvector_url: str = "",
    table: str = "memory_embeddings",
    embedding_module: str = "",
    expected_backend: str = "pgvector",
    expected_selected: str = "pgvector",
    sample_size: int = 30,
    max_p95_ms: float = 250.0,
    max_p95_ratio: float = 0.0,
    max_errors: int = 0,
    health_summary: str = "",
    verification_summary: str = "",
    min_health_score: int = 0,
    require_inputs: bool = False,
    approver: str = "",
    comparison_log: str = "",
    base_url: str = "",
    token: str = "",
    band: float = 0.25,
    confidence: float = 0.95,
    min_samples: int = 20,
    max_error_rate: float = 0.01,
    max_damaged_share: float = 0.01,
    primary_backend: str = "",
    shadow_backend: str = "",
) -> CanaryResult | Judgement:
    """The canary_signoff notebook's one call: its parameters as declared, checked by
    :meth:`CanaryOptions.check` (:class:`UsageError` before anything is built or measured), then
    :func:`run_canary`; the sign-off fingerprints these parameters as given (passwords hidden).

    With a ``comparison_log`` or a ``base_url`` it is the shadow-read judge instead
    (:func:`memwork.canary.judge.run_from_parameters`: ``band``, ``confidence``, ``min_samples``,
    ``max_error_rate``, ``max_damaged_share``, ``primary_backend`` / ``shadow_backend``, ``token``,
    the approver and the two input summaries); giving those together
    with the in-process canary's URLs is a usage error (which canary was meant?).

    Defaults: with neither URL a small sample migration is built (and a hash query module of its
    dimension written); with URLs but no ``embedding_module``, a hash module of the target table's
    dimension. Giving only one of the two URLs is a usage error.
    """
    given = dict(locals())  # as given, before the defaults below
    if comparison_log or base_url:
        from memwork.canary.judge import run_from_parameters as judge

        if legacy_url or pgvector_url:
            name = "comparison_log" if comparison_log else "base_url"
            raise UsageError(name, comparison_log or redact_url(base_url),
                             "judges shadow reads: leave legacy_url and pgvector_url empty")  # fmt: skip
        return judge(
            comparison_log=comparison_log,
            base_url=base_url,
            token=token,
            band=band,
            confidence=confidence,
            min_samples=min_samples,
            max_error_rate=max_error_rate,
            max_damaged_share=max_damaged_share,
            primary_backend=primary_backend,
            shadow_backend=shadow_backend,
            approver=approver,
            health_summary=health_summary,
            verification_summary=verification_summary,
        )
    both_or_neither("legacy_url", legacy_url, "pgvector_url", pgvector_url)
    options = CanaryOptions(
        {},
        expected_backend=expected_backend,
        expected_selected=expected_selected,
        sample_size=sample_size,
        max_p95_ms=max_p95_ms,
        max_p95_ratio=max_p95_ratio,
        max_errors=max_errors,
        health_summary=health_summary,
        verification_summary=verification_summary,
        min_health_score=min_health_score,
        require_inputs=require_inputs,
        approver=approver,
    )
    options.check()
    if not legacy_url:
        from memwork.pgvector import local_hash
        from memwork.samples.migration import build_migration  # the standalone default only

        built = build_migration()
        legacy_url, pgvector_url, table = built.source_url, built.dest_url, built.table
        embedding_module = embedding_module or local_hash.write_module(built.dimensions)
    elif not embedding_module:
        embedding_module = default_embedding_module(pgvector_url, table)
    options.env = canary_env(legacy_url, pgvector_url, embedding_module, table)
    return run_canary(options, given)


def default_embedding_module(pgvector_url: str, table: str = "memory_embeddings") -> str:
    """A hash query module of the target table's dimension; empty when the target cannot be
    reached (the ``target reachable`` gate of :func:`run_canary` then says why: NO-GO)."""
    from memwork.db import pg_connect
    from memwork.pgvector import local_hash
    from memwork.pgvector.schema import table_dimensions

    try:
        with pg_connect(pgvector_url) as conn:
            dims = table_dimensions(conn, table)
    except ServiceUnavailable:
        return ""
    if not dims:
        raise UsageError("table", table, "has no vector column with a declared dimension")
    return local_hash.write_module(dims)


def canary_env(
    legacy_url: str, pgvector_url: str, embedding_module: str, table: str = "memory_embeddings"
) -> dict[str, str]:
    """The facade environment of a pgvector canary (the seed's local canary env)."""
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
