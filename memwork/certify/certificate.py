"""The migration certificate -- the one verification of a migration (``memwork verify``, alias
``certify`` and ``import-verify``): one call that checks rows, vectors, the index and retrieval for any
source of the one pipeline, keeps every failure, and states its verdict with each gate.

The source side: the legacy table (``legacy-mysql``) through SQL checksums in its own database
(:class:`~memwork.certify.sides.SourceSide`); every other source through its listing
(:class:`~memwork.certify.listing.ListingSide`) of its records mapped by the importer's own code
(:class:`~memwork.certify.listing.RecordListing`). The destination side is the rows that source owns
(:func:`memwork.migrate.ownership.owner_of`), so other sources sharing the table are never "extra".

Gates (each PASS or FAIL, with its reasons). A kind of bad row or vector within its tolerance
(``max_<kind>``, any of :data:`TOLERABLE_KINDS`) but above zero is a *warning*: the gate passes, and
the warning is in the certificate (``warnings``), ``summary.json`` and the CLI -- the verdict reads
"PASS with warnings", so a tolerated problem is never passed silently.

* ``rows`` -- bad rows per kind against the tolerances (``max_<kind>``, default 0; ``allow_quarantined``
  tolerates every quarantined row); a ``user-changed`` row is critical whatever the tolerance;
* ``vectors`` -- the declared dimension against ``expected_dimensions``; wrong-dimension / null / zero /
  NaN vectors; vectors not their model's embedding of their content (other-model / swapped / stale),
  or, when the migration kept the source's vectors, not the source's (source-vector / other-model);
  users with two model ids (tolerated with the other-model rows they come from, or ``max_mixed-models``);
* ``index`` -- pgvector version, ANN index operator class vs the resolve query's distance, HNSW settings;
* ``retrieval`` -- per size bucket recall@k of the production search path against exact search within
  the user (each bucket against ``min_recall``, or its own bar in ``min_recall_by_bucket``), and
  underfill (skipped when ``retrieval=False``);
* ``preserved`` -- for a source that can search (a Source with a ``search`` method: qdrant, weaviate,
  pgvector, letta -- Letta's search takes the query's text, ``search_input = "text"``, and the claim
  says so): the same queries on both sides per sampled user, overlap@k and RBO, and the claim
  (:mod:`memwork.certify.preserved`).

What the verification before the certificate measured is covered: ANN recall@k on a global sample is the
``retrieval`` gate, measured per user the way users query; self-retrieval (a memory's own text, embedded
again, finds it among its user's top k) follows from the ``vectors`` gate (each sampled vector *is* its
content's embedding, so exact search ranks it first) and the ``retrieval`` gate (the production path
returns the exact top k).
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memwork.certify.failures import store_failures, write_summary
from memwork.certify.listing import ListingSide, RecordListing
from memwork.certify.preserved import PreservationReport, Query, read_queries
from memwork.certify.retrieval import RetrievalReport, measure_retrieval
from memwork.certify.rows import CRITICAL_KINDS, ROW_KINDS, RowsReport, compare_rows
from memwork.certify.sides import CHECKSUM_MODES, SOURCE_TABLE, DestSide, RowSource, SourceSide
from memwork.certify.vectors import (
    VECTOR_KINDS,
    VectorReport,
    check_embeddings,
    check_index,
    check_labels,
    check_source_vectors,
)
from memwork.checks import dimension, unit
from memwork.contracts import Source
from memwork.embed import Embedder, HashEmbedder, load_embedder
from memwork.errors import UsageError
from memwork.identifiers import check_identifier, quote_identifier
from memwork.migrate.checkpoint import (
    CHECKPOINT_TABLE,
    LEGACY_CHECKPOINT_TABLE,
    decode_cursor,
    read_import_checkpoint,
)
from memwork.migrate.legacy_mysql import MYSQL_URL_ENV
from memwork.migrate.legacy_mysql import SOURCE_NAME as LEGACY_SOURCE
from memwork.migrate.ownership import owner_of, owner_sql
from memwork.migrate.quarantine import printable, read_rejects
from memwork.migrate.run import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    ImportOptions,
    destination_url,
    resolve_source,
    stored_key,
)
from memwork.pgvector.schema import EMBEDDINGS_TABLE, table_dimensions
from memwork.redaction import redact_url

MAX_LISTED = 50
#: the kinds a tolerance (``max_<kind>``, ``--max KIND=N``) may name: bad rows' and bad vectors'
TOLERABLE_KINDS = ROW_KINDS + VECTOR_KINDS
ALL_ROWS = 10**9  #: the tolerance ``allow_quarantined`` sets: every quarantined row


@dataclass
class CertifyOptions:
    """What to certify and how strictly (defaults: zero tolerance, vectors on a sample of 200).

    ``source`` is a registered source name, ``module:PATH`` or a Source; ``env`` its variables.
    ``source_url`` is the legacy table's database (default ``MEMORY_BACKFILL_MYSQL_URL`` of ``env``);
    ``dest_url`` the destination (default ``MEMORY_PGVECTOR_DATABASE_URL``, else ``pg://embedded``)."""

    source_url: str | None = None
    dest_url: str | None = None
    table: str = EMBEDDINGS_TABLE
    source_table: str = SOURCE_TABLE
    source: str | Source = LEGACY_SOURCE
    env: Mapping[str, str] = field(default_factory=dict)
    page_size: int = DEFAULT_PAGE_SIZE  #: records per page of a listed source
    owner: str | None = None  #: default: the owner the source writes its rows as
    embedder: Embedder | str | None = (
        None  #: default: from the rows' model id (``hash-N``, or a model memwork loads)
    )
    expected_dimensions: int | None = None  #: default: the column's declared dimension
    expected_model: str | None = None  #: default: the embedder's model id
    vector_sample: int | None = 200  #: None: every row
    k: int = 10
    retrieval: bool = True
    users_per_bucket: int = 20
    queries_per_user: int = 3
    search: str = "auto"
    ef_search: int | None = None
    min_recall: float = 0.95  #: every size bucket's recall@k bar, unless set in min_recall_by_bucket
    #: a bucket's own bar (``1-10``, ``11-100``, ``101-1,000``, ``1,001+``), e.g. {"1-10": 0.99}
    min_recall_by_bucket: dict[str, float] = field(default_factory=dict)
    max_underfill: float = 0.0
    tolerances: dict[str, int] = field(default_factory=dict)  #: kind -> rows allowed (default 0)
    allow_quarantined: bool = False  #: quarantined rows are listed either way; True: not a failure
    leaf: int = 256
    seed: int = 0
    run_id: str | None = None
    record_failures: bool = True
    output_dir: Path | None = None
    queries: Path | str | None = None  #: ``queries.jsonl`` (else queries sampled from content)
    preserved: bool = True  #: compare with the source's own search when it has one
    preserved_users: int = 30
    source_embedder: Embedder | str | None = None  #: the source's model, for text queries
    min_overlap: float = 0.95
    source_checksums: str = "auto"  #: legacy table: ``sql``, ``python`` (rows hashed here) or ``auto``
    min_user_share: float | None = None  #: None: every sampled user must pass
    #: legacy-mysql: the row pass over key ranges of users on ``local``, ``local:N`` or
    #: ``dask://HOST:PORT`` (:mod:`memwork.certify.partitioned`); None: in this process
    executor: str | None = None
    workers: int | None = None  #: key ranges (default: the executor's workers); > 1 alone: ``local:N``

    def check(self) -> None:
        """Every impossible setting as one usage error naming it, before any I/O."""
        check_identifier(self.table)
        check_identifier(self.source_table)
        if self.source_checksums not in CHECKSUM_MODES:
            raise UsageError(
                "source_checksums", self.source_checksums, f"must be one of {', '.join(CHECKSUM_MODES)}"
            )
        if isinstance(self.k, bool) or not isinstance(self.k, int) or not 1 <= self.k <= 1000:
            raise UsageError("k", self.k, "must be an integer from 1 to 1000")
        if self.vector_sample is not None and (
            isinstance(self.vector_sample, bool)
            or not isinstance(self.vector_sample, int)
            or self.vector_sample < 0
        ):
            raise UsageError(
                "vector_sample", self.vector_sample, "must be a non-negative integer or None (all)"
            )
        if isinstance(self.leaf, bool) or not isinstance(self.leaf, int) or self.leaf < 1:
            raise UsageError("leaf", self.leaf, "must be a positive integer")
        if not isinstance(self.min_overlap, int | float) or not 0 <= self.min_overlap <= 1:
            raise UsageError("min_overlap", self.min_overlap, "must be a number from 0 to 1")
        if self.min_user_share is not None and (
            not isinstance(self.min_user_share, int | float) or not 0 < self.min_user_share < 1
        ):
            raise UsageError("min_user_share", self.min_user_share, "must be a number above 0, below 1")
        if isinstance(self.preserved_users, bool) or not isinstance(self.preserved_users, int):
            raise UsageError("preserved_users", self.preserved_users, "must be a positive integer")
        if self.preserved_users < 1:
            raise UsageError("preserved_users", self.preserved_users, "must be a positive integer")
        if isinstance(self.page_size, bool) or not isinstance(self.page_size, int):
            raise UsageError("page_size", self.page_size, "must be an integer")
        if not 1 <= self.page_size <= MAX_PAGE_SIZE:
            raise UsageError("page_size", self.page_size, f"must be from 1 to {MAX_PAGE_SIZE}")
        if self.expected_dimensions is not None:
            dimension("expected_dimensions", self.expected_dimensions)
        self._check_partitions()
        unit("min_recall", self.min_recall)
        self._check_buckets()
        unit("max_underfill", self.max_underfill)
        for name in ("users_per_bucket", "queries_per_user"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise UsageError(name, value, "must be a non-negative integer")
        self._check_tolerances()

    def _check_buckets(self) -> None:
        """Each per-bucket bar names a size bucket (written ``101-1000`` or ``101-1,000``) and is a
        share; the names are normalised to the report's."""
        from memwork.certify.retrieval import BUCKET_NAMES, parse_bucket

        normalised: dict[str, float] = {}
        for name, bar in self.min_recall_by_bucket.items():
            bucket = parse_bucket(str(name))
            if bucket is None:
                raise UsageError(
                    "min_recall", name, f"is not a size bucket; one of {', '.join(BUCKET_NAMES)}"
                )
            unit(f"min_recall[{bucket}]", bar)
            normalised[bucket] = bar
        self.min_recall_by_bucket = normalised

    def _check_tolerances(self) -> None:
        """A tolerance must name a kind the gates count (a misspelt kind would silently tolerate
        nothing), be a count, and never cover a critical kind."""
        if not isinstance(self.tolerances, Mapping):
            raise UsageError("tolerances", self.tolerances, "must be a mapping of kind to rows allowed")
        for kind, allowed in self.tolerances.items():
            if kind not in TOLERABLE_KINDS:
                raise UsageError("max", kind, f"is not a kind; one of {', '.join(TOLERABLE_KINDS)}")
            if kind in CRITICAL_KINDS and allowed:
                raise UsageError(f"max_{kind}", allowed, "a row served to another user is never tolerated")
            if isinstance(allowed, bool) or not isinstance(allowed, int) or allowed < 0:
                raise UsageError(f"max_{kind}", allowed, "must be a non-negative integer")

    def _check_partitions(self) -> None:
        if self.workers is not None and (
            isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1
        ):
            raise UsageError("workers", self.workers, "must be a positive integer")
        if self.executor is not None:
            from memwork.executor import parse_executor

            parse_executor(self.executor)  # a bad value is bad input before anything connects
        if self.partitioned and not self.legacy:
            shown = self.executor if self.executor is not None else self.workers
            raise UsageError(
                "executor", shown, f"only {LEGACY_SOURCE} splits into key ranges (other sources: one listing)"
            )

    @property
    def partitioned(self) -> bool:
        """The row pass runs as key ranges on an executor (an executor given, or more than one worker)."""
        return self.executor is not None or (self.workers or 1) > 1

    @property
    def legacy(self) -> bool:
        """The legacy table: checksummed by SQL in its own database."""
        return self.source == LEGACY_SOURCE

    def resolved_source_url(self) -> str:
        url = self.source_url or self.env.get(MYSQL_URL_ENV, "")
        if not url:
            raise UsageError(
                "source_url", url, f"is required for {LEGACY_SOURCE} (--source-url or {MYSQL_URL_ENV})"
            )
        return url

    def resolved_dest_url(self) -> str:
        return destination_url(ImportOptions(source="-", env=self.env, database_url=self.dest_url))


@dataclass
class Certificate:
    """The verdict, each gate's reasons, and everything measured."""

    run_id: str
    table: str
    rows: RowsReport
    vectors: VectorReport
    retrieval: RetrievalReport | None
    gates: dict[str, list[str]] = field(default_factory=dict)
    #: per gate, the problems within their tolerance: shown, but the gate passes
    warnings: dict[str, list[str]] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    source: str = LEGACY_SOURCE
    source_key: str = LEGACY_SOURCE
    source_spec: str = LEGACY_SOURCE  #: what ``--from`` names (a registered name or ``module:PATH``)
    vectors_mode: str = "reembed"  #: keep (the source's vectors) or reembed, as the migration did
    declared_dimensions: int | None = None
    quarantined: list[dict[str, Any]] = field(default_factory=list)  #: this source's rejects still missing
    notes: list[str] = field(default_factory=list)
    thresholds: dict[str, Any] = field(default_factory=dict)
    preserved: PreservationReport | None = None
    #: how the row pass ran: the executor (None: in this process) and each key range's counts
    execution: dict[str, Any] = field(default_factory=lambda: {"executor": None, "ranges": []})

    @property
    def verdict(self) -> str:
        return "FAIL" if any(self.gates.values()) else "PASS"

    @property
    def verdict_text(self) -> str:
        """The verdict as shown: a PASS with tolerated problems says so (they are not silent)."""
        return "PASS with warnings" if self.verdict == "PASS" and self.warned() else self.verdict

    def warned(self) -> list[str]:
        """Every warning (a problem within its tolerance), prefixed by its gate."""
        return [f"{gate}: {w}" for gate, found in self.warnings.items() for w in found]

    def failures(self) -> list[dict[str, Any]]:
        """Every named failure: rows, vectors, index (key = the index name)."""
        out: list[dict[str, Any]] = [
            {"key": r.key, "kind": r.kind, "user": r.user or r.dest_user, "fields": r.fields}
            for r in self.rows.bad
        ]
        out += [
            {"key": f.key, "kind": f.kind, "user": f.user, "fields": f.fields} for f in self.vectors.findings
        ]
        for problem in self.vectors.index_problems:
            kind = problem.split(":", 1)[0]
            name = next(
                (i["name"] for i in self.vectors.index.get("indexes", []) if i["name"] in problem), self.table
            )
            out.append({"key": name, "kind": kind, "user": None, "fields": {"problem": problem}})
        return out

    def claim(self) -> str:
        r = self.rows
        if self.verdict == "PASS" and self.warned():
            return (
                f"Certified with warnings: {len(self.warned())} problem(s) within their tolerances "
                f"({'; '.join(self.warned())[:300]}); every other check of the {r.source_rows:,} active "
                f"{self.source} rows of {len(r.users):,} users passed."
            )
        if self.verdict == "PASS":
            return (
                f"All {r.source_rows:,} active {self.source} rows of {len(r.users):,} users are in "
                f"{self.table} field for field up to the high-water mark {r.high_water_mark}, with "
                + ("the source's own vectors" if self.vectors_mode == "keep" else "their model's vectors")
                + (
                    ", and every size bucket meets its recall and underfill targets."
                    if self.retrieval
                    else "."
                )
                + (f" Against the source's own search: {self.preserved.claim()}." if self.preserved else "")
            )
        kinds = ", ".join(f"{n} {k}" for k, n in r.by_kind().items())
        failed = ", ".join(g for g, v in self.gates.items() if v)
        return f"Not certified: {kinds or 'no bad rows'}; failed gates: {failed}."

    def repair_command(self) -> str | None:
        """The command that re-copies exactly the failed keys (a dry run; ``--apply`` writes)."""
        if not self.failures():
            return None
        if self.source == LEGACY_SOURCE:
            return f"memwork backfill --repair {self.run_id}"
        return f"memwork import --from {self.source_spec} --repair {self.run_id}"

    def gate_strip(self) -> list[dict[str, Any]]:
        """Each gate in the shape the reports draw (:class:`memwork.reports.gates.Gate`: name, state,
        observed, threshold, comparison, origin, unit, why), ``off`` for a gate not run."""
        t = self.thresholds
        out = []
        for name, why in GATE_WHY.items():
            if name not in self.gates:
                off = (
                    "not run (the source cannot search)"
                    if name == "preserved"
                    else "not run (retrieval=False)"
                )
                out.append(_gate(name, "off", None, None, "<=", "default", "", off))
                continue
            state = "fail" if self.gates[name] else "pass"
            if name == "rows":
                observed = sum(self.rows.by_kind().values()) + self.rows.dest_unkeyed
                allowed = sum(t.get("tolerances", {}).values())
                gate = _gate(name, state, observed, allowed, "<=", _origin(t, "tolerances"), "bad rows", why)
            elif name == "vectors":
                observed = len(self.vectors.findings) + len(self.vectors.mixed_model_users)
                gate = _gate(name, state, observed, 0, "<=", "default", "bad vectors", why)
            elif name == "index":
                observed = len(self.vectors.index_problems)
                gate = _gate(name, state, observed, 0, "<=", "default", "problems", why)
            elif name == "preserved" and self.preserved is not None:
                gate = _preserved_gate(self.preserved, state, why)
            else:
                recalls = [b.recall for b in (self.retrieval.buckets.values() if self.retrieval else [])]
                known = [x for x in recalls if x is not None]
                worst = round(min(known), 4) if known else None
                own = t.get("min_recall_by_bucket", {})
                bars = "".join(f"; bucket {b} recall >= {v}" for b, v in own.items())
                given = set(t.get("set", ())) & {"min_recall", "min_recall_by_bucket", "max_underfill"}
                gate = _gate(
                    name, state, worst, t.get("min_recall"), ">=", "set" if given else "default",
                    "worst bucket recall@k", f"{why}; underfill <= {t.get('max_underfill', 0)}{bars}",
                )  # fmt: skip
            out.append(gate)
        return out

    def reasons(self) -> list[str]:
        """Every failed gate's reasons, each prefixed by its gate (what a rollout's judge names)."""
        return [f"{gate}: {reason}" for gate, found in self.gates.items() for reason in found]

    def user_table(self) -> dict[str, dict[str, Any]]:
        """Every user with a problem -- bad rows, or only a bad vector (its rows all match, so the
        row pass alone would not list it) -- with both sides' row counts and checksums, so a reader
        can see which side differs without running anything."""
        bad_vectors: dict[str, list[dict[str, str]]] = {}
        for f in self.vectors.findings:
            if f.user is not None:
                bad_vectors.setdefault(str(f.user), []).append({"key": f.key, "kind": f.kind})
        users = {u for u, t in self.rows.users.items() if not t.ok} | set(bad_vectors)
        return {u: self._user_row(u, bad_vectors.get(u, [])) for u in sorted(users)}

    def _user_row(self, user: str, vectors: list[dict[str, str]]) -> dict[str, Any]:
        from memwork.certify.rows import UserTally

        t = self.rows.users.get(user) or UserTally()
        return {
            "source": t.source,
            "dest": t.dest,
            "source_checksum": None if t.source_checksum is None else list(t.source_checksum),
            "dest_checksum": None if t.dest_checksum is None else list(t.dest_checksum),
            "checksums_match": t.checksum_ok,
            "missing": t.missing,
            "extra": t.extra,
            "changed": t.changed,
            "vectors": vectors[:MAX_LISTED],
        }

    def input_fingerprint(self) -> dict[str, Any]:
        """What this verification read, for comparing it with a later one: the source, the table,
        each side's row count and table checksum (a run on other rows is not comparable)."""
        r = self.rows
        return {
            "source": self.source,
            "table": self.table,
            "source_rows": r.source_rows,
            "dest_rows": r.dest_rows,
            "source_checksum": r.source_checksum,
            "dest_checksum": r.dest_checksum,
        }

    def summary(self) -> dict[str, Any]:
        """``summary.json``: the verdict, its reasons and everything measured, with a ``digest`` (the
        SHA-256 of the rest, timings left out) a sign-off can reference."""
        body = self._summary_body()
        measured = {k: v for k, v in body.items() if k not in ("timings", "execution")}
        canonical = json.dumps(measured, sort_keys=True, default=str, separators=(",", ":"))
        return body | {"digest": "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()}

    def _summary_body(self) -> dict[str, Any]:
        r = self.rows
        return {
            "run_id": self.run_id,
            "table": self.table,
            "source": self.source,
            "source_key": self.source_key,
            "verdict": self.verdict,
            "verdict_text": self.verdict_text,
            "reasons": self.reasons(),
            "warnings": self.warned(),
            "claim": self.claim(),
            "repair": self.repair_command(),
            "gates": [
                g | {"reasons": self.gates.get(g["name"], []), "warnings": self.warnings.get(g["name"], [])}
                for g in self.gate_strip()
            ],
            "notes": self.notes,
            "rows": {
                "source": r.source_rows,
                "dest": r.dest_rows,
                "dest_unkeyed": r.dest_unkeyed,
                "by_kind": r.by_kind(),
                "bad": len(r.bad),
                "bad_users": r.bad_users[:MAX_LISTED],
                "first_bad": [b.to_dict() for b in r.bad[:MAX_LISTED]],
                "high_water_mark": r.high_water_mark,
                "after_boundary": [b.to_dict() for b in r.after_boundary[:MAX_LISTED]],
                "changed_after_mark": r.changed_after_mark,
                "resume_picks_up": r.resume_picks_up,
                "round_trips": r.round_trips,
                "source_checksums": r.source_checksums,
                "buckets_compared": r.buckets_compared,
                "notes": r.notes[:MAX_LISTED],
                "quarantined": self.quarantined[:MAX_LISTED],
            },
            "users": self.user_table(),
            "vectors": {
                "mode": self.vectors_mode,
                "declared_dimensions": self.declared_dimensions,
                "checked": self.vectors.checked,
                "bad": len(self.vectors.findings),
                "models": self.vectors.models,
                "dimensions": self.vectors.dimensions,
                "mixed_model_users": self.vectors.mixed_model_users,
                "findings": [f.to_dict() for f in self.vectors.findings[:MAX_LISTED]],
                "index": self.vectors.index,
                "notes": self.vectors.notes,
            },
            "retrieval": self.retrieval.to_dict() if self.retrieval else None,
            "preserved": self.preserved.to_dict() if self.preserved else None,
            "input_fingerprint": self.input_fingerprint(),
            "recall_per_bucket": {
                name: round(b.recall, 4)
                for name, b in (self.retrieval.buckets.items() if self.retrieval else [])
                if b.recall is not None
            },
            "timings": self.timings,
            "execution": self.execution,
        }


#: each gate, and what it stands for (the report's gate strip)
GATE_WHY = {
    "rows": "every active source row in the destination field for field, per user (bad rows by kind)",
    "vectors": "each vector its model's embedding of its content (or the source's own), one model a user",
    "index": "the ANN index serves the resolve query's distance; pgvector and HNSW settings",
    "retrieval": "recall@k of the production search path vs exact search, per user size bucket",
    "preserved": "the source's own search and the destination's agree (overlap@k) for the sampled users",
}


def _preserved_gate(p: PreservationReport, state: str, why: str) -> dict[str, Any]:
    """By default every sampled user must pass (observed: the share that did); with ``min_share`` the
    95 % lower bound on the share of passing users must reach it."""
    if p.min_share is None:
        share = round(p.passed_users / len(p.users), 4) if p.users else None
        unit = f"share of sampled users with overlap@{p.k} >= {p.min_overlap:g}"
        return _gate("preserved", state, share, 1.0, ">=", "default", unit, why)
    bound = round(p.share_lower_bound, 4) if p.share_lower_bound is not None else None
    unit = f"95 % lower bound on the share of users with overlap@{p.k} >= {p.min_overlap:g}"
    return _gate("preserved", state, bound, p.min_share, ">=", "set", unit, why)


def _origin(thresholds: Mapping[str, Any], name: str) -> str:
    return "set" if name in thresholds.get("set", ()) else "default"


def _gate(
    name: str, state: str, observed: Any, threshold: Any, comparison: str, origin: str, unit: str, why: str
) -> dict[str, Any]:
    """A gate as :class:`memwork.reports.gates.Gate` records it (built here: certify imports no report)."""
    return {
        "name": name,
        "state": state,
        "observed": observed,
        "threshold": threshold,
        "comparison": comparison,
        "origin": origin,
        "unit": unit,
        "why": why,
    }


def _embedder(spec: Embedder | str | None, models: dict[str, int]) -> Embedder | None:
    if spec is not None and not isinstance(spec, str):
        return spec
    if isinstance(spec, str) and spec.strip():
        return load_embedder(spec)
    real = [m for m in models if m != "(none)"]
    top = max(real, key=lambda m: models[m]) if real else None
    if top and top.startswith("hash-") and top[5:].isdigit():
        return HashEmbedder(int(top[5:]))
    try:  # a model id that names a model memwork can load (all-MiniLM-L6-v2): that model
        return load_embedder(top) if top else None
    except UsageError:
        return None


def _checkpoint_cursor(conn: Any, table: str) -> str | None:
    """The legacy migration's last committed ``updated_at`` (its keyset cursor), canonical; the
    checkpoint an earlier version kept is read when the one migration has none."""
    from memwork.certify.canonical import canonical_timestamp
    from memwork.migrate.legacy_mysql import Cursor

    if _exists(conn, CHECKPOINT_TABLE):
        row = conn.execute(
            f"SELECT coalesce(next_cursor, last_cursor) FROM {quote_identifier(CHECKPOINT_TABLE)} "
            "WHERE target_table = %s AND source_name = %s",
            (table, LEGACY_SOURCE),
        ).fetchone()
        if row is not None and row[0] is not None:
            cursor = Cursor.decode(decode_cursor(str(row[0])))
            return None if cursor is None else canonical_timestamp(str(cursor.bound()))
    if _exists(conn, LEGACY_CHECKPOINT_TABLE):
        row = conn.execute(
            f"SELECT cursor_updated_at FROM {quote_identifier(LEGACY_CHECKPOINT_TABLE)} "
            "WHERE target_table = %s",
            (table,),
        ).fetchone()
        if row is not None and row[0] is not None:
            return canonical_timestamp(str(row[0]))
    return None


def _exists(conn: Any, table: str) -> bool:
    found = conn.execute("SELECT to_regclass(%s)", (quote_identifier(table),)).fetchone()
    return bool(found and found[0] is not None)


class _Printable(set[str]):
    """Reject ids as the rejects table stores them (:func:`~memwork.migrate.quarantine.printable`:
    a NUL in an id is written ``\\x00``), asked with the source's raw keys."""

    def __contains__(self, key: object) -> bool:
        return super().__contains__(printable(key))


def _rejected_keys(conn: Any, table: str, source_key: str | None) -> dict[str, dict[str, Any]]:
    """The rejects recorded for ``table`` (of ``source_key`` only, when given), by id."""
    return {str(r["id"]): r for r in read_rejects(conn, table, source_key)}


def certify(options: CertifyOptions) -> Certificate:
    """Run every gate, record the failures (table + ``summary.json``), return the certificate."""
    options.check()
    run_id = options.run_id or f"cert-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:6]}"
    dest_url = options.resolved_dest_url()
    queries = read_queries(options.queries) if options.queries is not None else None
    if options.legacy:
        source_url = options.resolved_source_url()
        side = SourceSide(source_url, options.source_table, options.source_checksums)
        return _certify(options, run_id, dest_url, None, side, queries)
    source = resolve_source(options.source, options.env)
    try:
        return _certify(options, run_id, dest_url, source, None, queries)
    finally:
        if isinstance(options.source, str):  # opened here, closed here (a Source given stays open)
            source.close()


def _certify(
    options: CertifyOptions,
    run_id: str,
    dest_url: str,
    source: Source | None,
    sql_side: SourceSide | None,
    queries: list[Query] | None = None,
) -> Certificate:
    """The gates of one source: ``sql_side`` (the legacy table) or ``source`` read through its listing."""
    from pgvector.psycopg import register_vector

    from memwork.db import pg_connect

    name = LEGACY_SOURCE if source is None else source.name
    key = LEGACY_SOURCE if source is None else stored_key(source)
    owner = options.owner or owner_of(name, key)
    timings: dict[str, float] = {}
    with pg_connect(dest_url, autocommit=True) as conn:
        declared = table_dimensions(conn, options.table)
        if declared is None:
            raise UsageError("table", options.table, f"does not exist in {redact_url(dest_url)}")
        register_vector(conn)
        dest = DestSide(conn, options.table, owner)
        checkpoint = read_import_checkpoint(conn, options.table, key)
        cert = Certificate(
            run_id, options.table, RowsReport(), VectorReport(), None, source=name, source_key=key
        )
        cert.source_spec = options.source if isinstance(options.source, str) else name
        cert.declared_dimensions = declared or None
        cert.thresholds = _thresholds(options)
        listing: RecordListing | None = None
        side: RowSource
        if source is None:
            assert sql_side is not None
            side = sql_side
            cursor = _checkpoint_cursor(conn, options.table)
        else:
            listing = RecordListing(source, key, options.page_size, stamps=dest.stamps)
            side, cursor = ListingSide(listing), None
            if checkpoint is None:
                cert.notes.append(f"no migration checkpoint for {key} in {options.table}")
        started = time.perf_counter()
        mark = side.high_water_mark()
        rejects = _rejected_keys(conn, options.table, None if source is None else key)
        scanned = None
        if options.partitioned:  # the per-user pass as key ranges; everything else once, here
            from memwork.certify.partitioned import scan_partitioned

            assert sql_side is not None  # options.check(): legacy-mysql only
            scanned, cert.execution = scan_partitioned(
                sql_side, dest_url, table=options.table, owner=owner, leaf=options.leaf,
                high_water_mark=mark, executor=options.executor, workers=options.workers,
            )  # fmt: skip
        cert.rows = compare_rows(
            side,
            dest,
            leaf=options.leaf,
            high_water_mark=mark,
            rejects=_Printable(rejects),
            checkpoint_cursor=cursor,
            scanned=scanned,
        )
        cert.quarantined = [rejects[printable(b.key)] for b in cert.rows.bad if b.kind == "quarantined"]
        timings["rows"] = round(time.perf_counter() - started, 3)
        started = time.perf_counter()
        cert.vectors_mode = (
            checkpoint.vectors
            if checkpoint is not None and checkpoint.vectors
            else ("reembed" if source is None else "keep")
        )
        embedder = _check_vectors(conn, options, cert, owner, declared, listing, source)
        from memwork.backends.pgvector import DEFAULT_EF_SEARCH

        check_index(conn, options.table, options.k, options.ef_search or DEFAULT_EF_SEARCH, cert.vectors)
        timings["vectors"] = round(time.perf_counter() - started, 3)
        odd = [f.key for f in cert.vectors.findings if f.kind == "wrong-dimension"]
        if options.retrieval and odd:
            cert.retrieval = RetrievalReport(k=options.k)
            cert.retrieval.problems.append(
                f"not measured: {len(odd)} vector(s) of another dimension (e.g. {odd[0]}) make every "
                "search of their users fail"
            )
        elif options.retrieval:
            started = time.perf_counter()
            cert.retrieval = measure_retrieval(
                conn,
                dest_url,
                options.table,
                embedder=embedder,
                k=options.k,
                users_per_bucket=options.users_per_bucket,
                queries_per_user=options.queries_per_user,
                seed=options.seed,
                search=options.search,
                ef_search=options.ef_search,
                min_recall=options.min_recall,
                max_underfill=options.max_underfill,
                min_recall_by_bucket=options.min_recall_by_bucket,
                queries=_recall_queries(queries, embedder),
            )
            timings["retrieval"] = round(time.perf_counter() - started, 3)
        if options.preserved and source is not None and callable(getattr(source, "search", None)):
            started = time.perf_counter()
            cert.preserved = _preserved(conn, options, dest_url, source, embedder, queries, owner)
            timings["preserved"] = round(time.perf_counter() - started, 3)
        cert.timings = timings
        cert.gates = _gates(cert, options)
        if options.record_failures and cert.failures():
            store_failures(conn, run_id, options.table, cert.failures())
    if options.output_dir is not None:
        write_summary(Path(options.output_dir) / "summary.json", cert.summary())
    return cert


def _recall_queries(queries: list[Query] | None, embedder: Embedder | None) -> list[Any] | None:
    """The file's queries as (user, vector, expected ids) for recall@k: a text query needs the
    table's model (else its vector is taken as it is)."""
    import numpy as np

    if not queries:
        return None
    out = []
    for q in queries:
        if embedder is not None and q.text is not None:
            out.append((q.user, embedder.embed([q.text])[0], q.expected))
        elif q.vector is not None:
            out.append((q.user, np.asarray(q.vector, dtype=np.float32), q.expected))
    return out or None


def _preserved(
    conn: Any,
    options: CertifyOptions,
    dest_url: str,
    opened: Any,
    embedder: Embedder | None,
    queries: list[Query] | None,
    owner: str,
) -> PreservationReport:
    """The source's own search against the destination's production path, per sampled user."""
    from memwork.backends.pgvector import DEFAULT_EF_SEARCH, PgvectorBackend
    from memwork.certify.preserved import Side, measure_preservation, pgvector_search

    spec = options.source_embedder
    source_model = load_embedder(spec) if isinstance(spec, str) else spec
    backend = PgvectorBackend(
        dest_url,
        table=options.table,
        search=options.search,
        ef_search=options.ef_search or DEFAULT_EF_SEARCH,
    )
    try:
        return measure_preservation(
            conn,
            options.table,
            Side(
                opened.search, source_model, _source_model(opened), getattr(opened, "search_input", "vector")
            ),
            Side(pgvector_search(backend), embedder, _dest_model(conn, options.table, owner)),
            k=options.k,
            users=options.preserved_users,
            queries_per_user=options.queries_per_user,
            queries=queries,
            min_overlap=options.min_overlap,
            min_share=options.min_user_share,
            seed=options.seed,
            owner=owner,
        )
    finally:
        backend.close()


def _source_model(opened: Any) -> str | None:
    """The model id of the source's own vectors, from its first record (None: it names none -- then
    a stored vector is taken to be of the copy's model)."""
    from memwork.migrate.rows import model_of

    page = opened.read_page(None, 1)
    first = next((r for r in page.records if r.vector is not None and r.model), None)
    return None if first is None else model_of(first, opened.name)


def _dest_model(conn: Any, table: str, owner: str) -> str | None:
    """The model of the vectors this source's rows were written with."""
    from memwork.migrate.ownership import owner_sql

    found = conn.execute(
        f"SELECT embedding_model FROM {quote_identifier(table)} AS d WHERE {owner_sql('d')} = %s LIMIT 1",
        (owner,),
    ).fetchone()
    return None if found is None or found[0] is None else str(found[0])


def _thresholds(options: CertifyOptions) -> dict[str, Any]:
    tolerances = dict(options.tolerances)
    if options.allow_quarantined:
        tolerances["quarantined"] = max(tolerances.get("quarantined", 0), ALL_ROWS)
    defaults = CertifyOptions()
    names = ("min_recall", "min_recall_by_bucket", "max_underfill")
    changed = [n for n in names if getattr(options, n) != getattr(defaults, n)]
    return {
        "tolerances": options.tolerances,
        "allowed": tolerances,
        "min_recall": options.min_recall,
        "min_recall_by_bucket": dict(options.min_recall_by_bucket),
        "max_underfill": options.max_underfill,
        "set": changed + (["tolerances"] if options.tolerances or options.allow_quarantined else []),
    }


def _check_vectors(
    conn: Any,
    options: CertifyOptions,
    cert: Certificate,
    owner: str,
    declared: int,
    listing: RecordListing | None,
    source: Source | None,
) -> Embedder | None:
    """The vectors gate's measurements; returns the embedder retrieval queries with (None: stored vectors)."""
    vectors = cert.vectors
    t = quote_identifier(options.table)
    models = {
        str(m): int(n)
        for m, n in conn.execute(
            f"SELECT coalesce(embedding_model, '(none)'), count(*) FROM {t} "
            f"WHERE {owner_sql(t)} = %s GROUP BY 1",
            (owner,),
        )
    }
    keep = cert.vectors_mode == "keep"
    embedder = None if keep and options.embedder is None else _embedder(options.embedder, models)
    dims = options.expected_dimensions or declared or (embedder.dimension if embedder else 0)
    if options.expected_dimensions and declared and declared != options.expected_dimensions:
        vectors.notes.append(
            f"dimensions: column is vector({declared}), expected {options.expected_dimensions}"
        )
        cert.thresholds["declared_mismatch"] = (declared, options.expected_dimensions)
    model_id = options.expected_model or (None if keep or embedder is None else embedder.model_id)
    if dims:
        check_labels(conn, options.table, model_id, dims, vectors, owner=owner)
    keys = None
    if options.vector_sample is not None:
        keys = _sample_keys(conn, options.table, options.vector_sample, options.seed, owner)
        keys += [b.key for b in cert.rows.bad if b.kind in ("changed", "user-changed")]
    if keep and listing is not None and source is not None:
        check_source_vectors(
            conn, options.table, listing.records(), source.name, None if keys is None else set(keys), vectors,
            owner=owner,
        )  # fmt: skip
        cert.notes.append(f"vectors kept from {source.name}: each compared with the source record's")
    elif embedder is None:
        vectors.notes.append("vectors: no embedder given and none derivable from the model ids")
    else:
        check_embeddings(conn, options.table, embedder, keys, vectors, owner=owner)
    return embedder


def _sample_keys(conn: Any, table: str, n: int, seed: int, owner: str) -> list[str]:
    """A reproducible sample of ``owner``'s keys chosen in the database (hash order), never a full read."""
    if n <= 0:
        return []
    t = quote_identifier(table)
    return [
        str(r[0])
        for r in conn.execute(
            f"SELECT source_memory_id FROM {t} WHERE source_memory_id IS NOT NULL AND {owner_sql(t)} = %s "
            "ORDER BY md5(source_memory_id || %s) LIMIT %s",
            (owner, str(seed), n),
        )
    ]


def _gates(cert: Certificate, options: CertifyOptions) -> dict[str, list[str]]:
    """Each gate's failing reasons; a kind over zero but within its tolerance goes to
    ``cert.warnings`` instead, so a tolerated problem is shown, never passed silently."""
    allowed: dict[str, int] = cert.thresholds["allowed"]
    cert.warnings = {"rows": [], "vectors": []}
    rows_reasons = _rows_reasons(cert, allowed)
    vector_reasons = _vector_reasons(cert, allowed)
    gates = {"rows": rows_reasons, "vectors": vector_reasons, "index": list(cert.vectors.index_problems)}
    if cert.retrieval is not None:
        gates["retrieval"] = list(cert.retrieval.problems)
    if cert.preserved is not None:
        gates["preserved"] = list(cert.preserved.problems)
    cert.warnings = {g: w for g, w in cert.warnings.items() if w}
    return gates


def _judge(cert: Certificate, gate: str, reason: str, n: int, allowed: int, into: list[str]) -> None:
    """``reason`` fails the gate when ``n`` is above ``allowed``, else (``n`` > 0) is a warning."""
    if n > allowed:
        into.append(reason)
    elif n > 0:
        cert.warnings[gate].append(f"{reason} -- tolerated")


def _rows_reasons(cert: Certificate, allowed: Mapping[str, int]) -> list[str]:
    """The rows gate: bad rows per kind against ``max_<kind>`` (a critical kind allows none)."""
    out: list[str] = []
    for kind, n in sorted(cert.rows.by_kind().items(), key=lambda kv: (kv[0] not in CRITICAL_KINDS, kv[0])):
        limit = 0 if kind in CRITICAL_KINDS else allowed.get(kind, 0)
        ids = ", ".join(b.key for b in cert.rows.bad if b.kind == kind)[:200]
        critical = "CRITICAL " if kind in CRITICAL_KINDS else ""
        shown = "all" if limit >= ALL_ROWS else limit
        _judge(cert, "rows", f"{critical}{kind}: {n} row(s) (allowed {shown}), e.g. {ids}", n, limit, out)
        if kind == "quarantined" and n <= limit:  # why they are missing, beside the warning
            cert.notes.append(f"quarantined: {n} row(s) the migration could not write, tolerated")
    if cert.rows.dest_unkeyed:
        out.append(f"extra: {cert.rows.dest_unkeyed} destination row(s) without a source id")
    return out


def _vector_reasons(cert: Certificate, allowed: Mapping[str, int]) -> list[str]:
    """The vectors gate: bad vectors per kind against ``max_<kind>``. A re-embedded copy holding
    two model ids, and users with two, are the other-model rows seen per table and per user: they
    are tolerated with those rows (or, per user, by ``max_mixed-models``)."""
    out: list[str] = []
    if "declared_mismatch" in cert.thresholds:
        declared, expected = cert.thresholds.pop("declared_mismatch")
        out.append(f"dimensions: column is vector({declared}), expected {expected}")
    kinds: dict[str, list[str]] = {}
    for f in cert.vectors.findings:
        kinds.setdefault(f.kind, []).append(f.key)
    for kind, keys in sorted(kinds.items()):
        limit = allowed.get(kind, 0)
        reason = f"{kind}: {len(keys)} vector(s) (allowed {limit}), e.g. {', '.join(keys[:5])}"
        _judge(cert, "vectors", reason, len(keys), limit, out)
    others = len(kinds.get("other-model", []))
    tolerated = 0 < others <= allowed.get("other-model", 0)
    real = {m: n for m, n in cert.vectors.models.items() if m != "(none)"}
    if len(real) > 1 and cert.vectors_mode != "keep":  # re-embedded: one model for the whole copy
        counts = ", ".join(f"{m}: {n} row(s)" for m, n in sorted(real.items()))
        reason = f"models: {len(real)} model ids in one re-embedded copy ({counts})"
        _judge(cert, "vectors", reason, 1, 1 if tolerated else 0, out)
    mixed = cert.vectors.mixed_model_users
    if mixed:
        limit = max(allowed.get("mixed-models", 0), len(mixed) if tolerated else 0)
        reason = f"mixed-models: {len(mixed)} user(s) with two model ids, e.g. {', '.join(mixed[:5])}"
        _judge(cert, "vectors", reason, len(mixed), limit, out)
    return out
