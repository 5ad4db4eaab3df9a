"""The migration certificate: one call that checks rows, vectors, the index and retrieval, keeps every
failure, and states its verdict with each gate.

Gates (each PASS or FAIL, with its reasons):

* ``rows`` -- bad rows per kind against the tolerances (``max_<kind>``, default 0); a ``user-changed``
  row is critical whatever the tolerance;
* ``vectors`` -- wrong-dimension / other-model / swapped / stale vectors, users with two model ids;
* ``index`` -- pgvector version, ANN index operator class vs the resolve query's distance, HNSW settings;
* ``retrieval`` -- per size bucket recall@k and underfill (skipped when ``retrieval=False``);
* ``preserved`` -- for a source that can search (``source`` with a ``search`` method): the same
  queries on both sides per sampled user, overlap@k and RBO, and the claim
  (:mod:`memwork.certify.preserved`).

The source is the legacy SQL table at ``source_url`` (checksums in SQL), or any migration source
(``source``: a registry name with ``source_env``, or a Source), checksummed through its listing.
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
from memwork.certify.preserved import PreservationReport, Query, read_queries
from memwork.certify.retrieval import RetrievalReport, measure_retrieval
from memwork.certify.rows import CRITICAL_KINDS, RowsReport, compare_rows
from memwork.certify.sides import SOURCE_TABLE, DestSide, SourceSide
from memwork.certify.vectors import VectorReport, check_embeddings, check_index, check_labels
from memwork.embed import Embedder, HashEmbedder, load_embedder
from memwork.errors import UsageError
from memwork.identifiers import check_identifier, quote_identifier
from memwork.migrate.checkpoint import CHECKPOINT_TABLE, LEGACY_CHECKPOINT_TABLE, decode_cursor
from memwork.migrate.legacy_mysql import SOURCE_NAME as LEGACY_SOURCE
from memwork.migrate.ownership import LEGACY_OWNER as BACKFILL_OWNER
from memwork.pgvector.schema import EMBEDDINGS_TABLE

MAX_LISTED = 50


@dataclass
class CertifyOptions:
    """What to certify and how strictly (defaults: zero tolerance, vectors on a sample of 200)."""

    source_url: str
    dest_url: str
    table: str = EMBEDDINGS_TABLE
    source_table: str = SOURCE_TABLE
    owner: str = BACKFILL_OWNER
    embedder: Embedder | str | None = None  #: default: derived from the table's single ``hash-N`` model id
    vector_sample: int | None = 200  #: None: every row
    k: int = 10
    retrieval: bool = True
    users_per_bucket: int = 20
    queries_per_user: int = 3
    search: str = "auto"
    ef_search: int | None = None
    min_recall: float = 0.95
    max_underfill: float = 0.0
    tolerances: dict[str, int] = field(default_factory=dict)  #: kind -> rows allowed (default 0)
    leaf: int = 256
    seed: int = 0
    run_id: str | None = None
    record_failures: bool = True
    output_dir: Path | None = None
    source: Any = None  #: a source name or Source (None: the legacy table at ``source_url``)
    source_env: Mapping[str, str] = field(default_factory=dict)  #: the source's variables
    queries: Path | str | None = None  #: ``queries.jsonl`` (else queries sampled from content)
    preserved: bool = True  #: compare with the source's own search when it has one
    preserved_users: int = 30
    source_embedder: Embedder | str | None = None  #: the source's model, for text queries
    min_overlap: float = 0.95
    min_user_share: float | None = None  #: None: every sampled user must pass

    def check(self) -> None:
        check_identifier(self.table)
        check_identifier(self.source_table)
        if isinstance(self.k, bool) or not isinstance(self.k, int) or not 1 <= self.k <= 1000:
            raise UsageError("k", self.k, "must be an integer from 1 to 1000")
        if self.vector_sample is not None and (
            not isinstance(self.vector_sample, int) or self.vector_sample < 0
        ):
            raise UsageError(
                "vector_sample", self.vector_sample, "must be a non-negative integer or None (all)"
            )
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
        if not isinstance(self.leaf, int) or self.leaf < 1:
            raise UsageError("leaf", self.leaf, "must be a positive integer")
        for kind, allowed in self.tolerances.items():
            if kind in CRITICAL_KINDS and allowed:
                raise UsageError(f"max_{kind}", allowed, "a row served to another user is never tolerated")
            if not isinstance(allowed, int) or allowed < 0:
                raise UsageError(f"max_{kind}", allowed, "must be a non-negative integer")


@dataclass
class Certificate:
    """The verdict, each gate's reasons, and everything measured."""

    run_id: str
    table: str
    rows: RowsReport
    vectors: VectorReport
    retrieval: RetrievalReport | None
    gates: dict[str, list[str]] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    preserved: PreservationReport | None = None

    @property
    def verdict(self) -> str:
        return "FAIL" if any(self.gates.values()) else "PASS"

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
        if self.verdict == "PASS":
            return (
                f"All {r.source_rows:,} active source rows of {len(r.users):,} users are in {self.table} "
                f"field for field up to the high-water mark {r.high_water_mark}, with their model's vectors"
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

    def reasons(self) -> list[str]:
        """Every failed gate's reasons, each prefixed by its gate (what a rollout's judge names)."""
        return [f"{gate}: {reason}" for gate, found in self.gates.items() for reason in found]

    def summary(self) -> dict[str, Any]:
        """``summary.json``: the verdict, its reasons and everything measured, with a ``digest`` (the
        SHA-256 of the rest, timings left out) a sign-off can reference."""
        body = self._summary_body()
        measured = {k: v for k, v in body.items() if k != "timings"}
        canonical = json.dumps(measured, sort_keys=True, default=str, separators=(",", ":"))
        return body | {"digest": "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()}

    def _summary_body(self) -> dict[str, Any]:
        r = self.rows
        return {
            "run_id": self.run_id,
            "table": self.table,
            "verdict": self.verdict,
            "reasons": self.reasons(),
            "claim": self.claim(),
            "gates": {g: {"verdict": "FAIL" if v else "PASS", "reasons": v} for g, v in self.gates.items()},
            "rows": {
                "source": r.source_rows,
                "dest": r.dest_rows,
                "dest_unkeyed": r.dest_unkeyed,
                "by_kind": r.by_kind(),
                "bad_users": r.bad_users[:MAX_LISTED],
                "first_bad": [b.to_dict() for b in r.bad[:MAX_LISTED]],
                "high_water_mark": r.high_water_mark,
                "after_boundary": [b.to_dict() for b in r.after_boundary[:MAX_LISTED]],
                "changed_after_mark": r.changed_after_mark,
                "resume_picks_up": r.resume_picks_up,
                "round_trips": r.round_trips,
                "buckets_compared": r.buckets_compared,
                "notes": r.notes[:MAX_LISTED],
            },
            "users": {
                u: {
                    "source": t.source,
                    "dest": t.dest,
                    "missing": t.missing,
                    "extra": t.extra,
                    "changed": t.changed,
                }
                for u, t in list(r.users.items())
                if not t.ok
            },
            "vectors": {
                "checked": self.vectors.checked,
                "models": self.vectors.models,
                "dimensions": self.vectors.dimensions,
                "mixed_model_users": self.vectors.mixed_model_users,
                "findings": [f.to_dict() for f in self.vectors.findings[:MAX_LISTED]],
                "index": self.vectors.index,
                "notes": self.vectors.notes,
            },
            "retrieval": self.retrieval.to_dict() if self.retrieval else None,
            "preserved": self.preserved.to_dict() if self.preserved else None,
            "timings": self.timings,
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


def _rejected_keys(conn: Any, table: str) -> set[str]:
    from memwork.migrate.quarantine import read_rejects

    try:
        return {str(r["id"]) for r in read_rejects(conn, table)}
    except Exception:  # no rejects table: nothing was quarantined
        conn.rollback()
        return set()


def certify(options: CertifyOptions) -> Certificate:
    """Run every gate, record the failures (table + ``summary.json``), return the certificate."""
    options.check()
    queries = read_queries(options.queries) if options.queries is not None else None
    if options.source is None:
        return _certify(options, None, queries)
    from memwork.migrate.run import resolve_source

    opened = resolve_source(options.source, options.source_env)
    try:
        return _certify(options, opened, queries)
    finally:
        if isinstance(options.source, str):  # opened here: closed here (a Source given stays open)
            opened.close()


def _certify(options: CertifyOptions, opened: Any, queries: list[Query] | None) -> Certificate:
    from pgvector.psycopg import register_vector

    from memwork.certify.listing import ListingSide, source_listing
    from memwork.db import pg_connect
    from memwork.migrate.ownership import owner_of
    from memwork.migrate.run import stored_key

    run_id = options.run_id or f"cert-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:6]}"
    timings: dict[str, float] = {}
    source: SourceSide | ListingSide
    if opened is None:
        source, owner = SourceSide(options.source_url, options.source_table), options.owner
    else:  # a migration source: checksummed through its listing, its rows owned by its key
        key = stored_key(opened)
        source, owner = ListingSide(source_listing(opened, key)), owner_of(opened.name, key)
    started = time.perf_counter()
    mark = source.high_water_mark()
    with pg_connect(options.dest_url, autocommit=True) as conn:
        register_vector(conn)
        dest = DestSide(conn, options.table, owner)
        rows = compare_rows(
            source,
            dest,
            leaf=options.leaf,
            high_water_mark=mark,
            rejects=_rejected_keys(conn, options.table),
            checkpoint_cursor=_checkpoint_cursor(conn, options.table) if opened is None else None,
        )
        timings["rows"] = round(time.perf_counter() - started, 3)
        started = time.perf_counter()
        vectors = VectorReport()
        declared = conn.execute(
            "SELECT atttypmod FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attname = 'embedding'",
            (quote_identifier(options.table),),
        ).fetchone()
        models = {
            str(m): int(n)
            for m, n in conn.execute(
                "SELECT coalesce(embedding_model, '(none)'), count(*) "
                f"FROM {quote_identifier(options.table)} GROUP BY 1"
            )
        }
        embedder = _embedder(options.embedder, models)
        if embedder is None:
            vectors.notes.append("vectors: no embedder given and none derivable from the model ids")
        else:
            dims = int(declared[0]) if declared and declared[0] and declared[0] > 0 else embedder.dimension
            check_labels(conn, options.table, embedder.model_id, dims, vectors)
            keys = None
            if options.vector_sample is not None:
                keys = _sample_keys(conn, options.table, options.vector_sample, options.seed)
                keys += [b.key for b in rows.bad if b.kind in ("changed", "user-changed")]
            check_embeddings(conn, options.table, embedder, keys, vectors)
        from memwork.backends.pgvector import DEFAULT_EF_SEARCH

        check_index(conn, options.table, options.k, options.ef_search or DEFAULT_EF_SEARCH, vectors)
        timings["vectors"] = round(time.perf_counter() - started, 3)
        retrieval = None
        if options.retrieval:
            started = time.perf_counter()
            retrieval = measure_retrieval(
                conn,
                options.dest_url,
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
                queries=_recall_queries(queries, embedder),
            )
            timings["retrieval"] = round(time.perf_counter() - started, 3)
        preserved = None
        if options.preserved and callable(getattr(opened, "search", None)):
            started = time.perf_counter()
            preserved = _preserved(conn, options, opened, embedder, queries, owner)
            timings["preserved"] = round(time.perf_counter() - started, 3)
        cert = Certificate(
            run_id, options.table, rows, vectors, retrieval, timings=timings, preserved=preserved
        )
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
        options.dest_url,
        table=options.table,
        search=options.search,
        ef_search=options.ef_search or DEFAULT_EF_SEARCH,
    )
    try:
        return measure_preservation(
            conn,
            options.table,
            Side(opened.search, source_model, _source_model(opened)),
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


def _sample_keys(conn: Any, table: str, n: int, seed: int) -> list[str]:
    """A reproducible sample of keys chosen in the database (hash order), never a full read."""
    if n <= 0:
        return []
    t = quote_identifier(table)
    return [
        str(r[0])
        for r in conn.execute(
            f"SELECT source_memory_id FROM {t} WHERE source_memory_id IS NOT NULL "
            "ORDER BY md5(source_memory_id || %s) LIMIT %s",
            (str(seed), n),
        )
    ]


def _gates(cert: Certificate, options: CertifyOptions) -> dict[str, list[str]]:
    rows_reasons: list[str] = []
    for kind, n in sorted(cert.rows.by_kind().items(), key=lambda kv: (kv[0] not in CRITICAL_KINDS, kv[0])):
        allowed = 0 if kind in CRITICAL_KINDS else options.tolerances.get(kind, 0)
        if n > allowed:
            ids = ", ".join(b.key for b in cert.rows.bad if b.kind == kind)[:200]
            critical = "CRITICAL " if kind in CRITICAL_KINDS else ""
            rows_reasons.append(f"{critical}{kind}: {n} row(s) (allowed {allowed}), e.g. {ids}")
    if cert.rows.dest_unkeyed:
        rows_reasons.append(f"extra: {cert.rows.dest_unkeyed} destination row(s) without a source id")
    vector_reasons: list[str] = []
    kinds: dict[str, list[str]] = {}
    for f in cert.vectors.findings:
        kinds.setdefault(f.kind, []).append(f.key)
    for kind, keys in sorted(kinds.items()):
        vector_reasons.append(f"{kind}: {len(keys)} vector(s), e.g. {', '.join(keys[:5])}")
    if cert.vectors.mixed_model_users:
        vector_reasons.append(
            f"mixed-models: {len(cert.vectors.mixed_model_users)} user(s) with two model ids, "
            f"e.g. {', '.join(cert.vectors.mixed_model_users[:5])}"
        )
    gates = {"rows": rows_reasons, "vectors": vector_reasons, "index": list(cert.vectors.index_problems)}
    if cert.retrieval is not None:
        gates["retrieval"] = list(cert.retrieval.problems)
    if cert.preserved is not None:
        gates["preserved"] = list(cert.preserved.problems)
    return gates
