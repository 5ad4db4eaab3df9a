"""Retrieval as each user gets it: recall@k of the production search path against exact search within
the user, by the user's size, and the underfill rate.

The production path is :class:`memwork.backends.pgvector.PgvectorBackend` itself (its strategy,
``exact_max`` and ``ef_search``), called with the query vector. Exact search is the same user's rows
ordered by cosine distance with index scans off. A production hit counts when its distance is within
the exact k-th distance (ties between equal vectors are not misses). An *underfilled* answer has fewer
than k rows although the user has at least k.

Queries: from ``queries`` (user, vector) when given -- e.g. captured from production -- otherwise the
stored content of a few sampled rows of each sampled user, embedded with the model. A query given as
(user, vector, expected ids) also counts how many of its expected ids the production path returns in
its top k (``expected``: a measurement, not a gate -- the ids were right for the old store).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from memwork.certify.vectors import as_array
from memwork.embed import Embedder
from memwork.identifiers import quote_identifier

if TYPE_CHECKING:
    import psycopg

BUCKETS = ((1, 10), (11, 100), (101, 1000), (1001, None))
TIE_EPSILON = 1e-6


def bucket_name(n: int) -> str:
    for low, high in BUCKETS:
        if n >= low and (high is None or n <= high):
            return f"{low:,}+" if high is None else f"{low:,}-{high:,}"
    return "0"


#: the size buckets by name (``1-10``, ``11-100``, ``101-1,000``, ``1,001+``)
BUCKET_NAMES = tuple(bucket_name(low) for low, _ in BUCKETS)


def parse_bucket(name: str) -> str | None:
    """A bucket's name as written by a person (``101-1000`` or ``101-1,000``), None when no bucket
    has it -- so a threshold is never set on a bucket that does not exist."""
    wanted = name.strip().replace(",", "").replace(" ", "")
    return next((b for b in BUCKET_NAMES if b.replace(",", "") == wanted), None)


@dataclass
class BucketResult:
    users: int = 0
    sampled_users: int = 0
    queries: int = 0
    recall_hits: int = 0
    recall_total: int = 0
    underfilled: int = 0
    fillable: int = 0
    worst_users: list[tuple[str, float]] = field(default_factory=list)

    @property
    def recall(self) -> float | None:
        return self.recall_hits / self.recall_total if self.recall_total else None

    @property
    def underfill_rate(self) -> float | None:
        return self.underfilled / self.fillable if self.fillable else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "recall": self.recall, "underfill_rate": self.underfill_rate}


@dataclass
class RetrievalReport:
    k: int = 10
    buckets: dict[str, BucketResult] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    #: queries with expected ids: {"queries", "expected", "found", "share", "missed": [[user, id], ...]}
    expected: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "buckets": {k: v.to_dict() for k, v in self.buckets.items()},
            "problems": self.problems,
            "expected": self.expected,
        }


def user_sizes(conn: psycopg.Connection[Any], table: str) -> dict[str, int]:
    t = quote_identifier(table)
    return {str(u): int(n) for u, n in conn.execute(f"SELECT user_id, count(*) FROM {t} GROUP BY 1")}


def _exact(conn: psycopg.Connection[Any], t: str, user: str, vector: np.ndarray, k: int) -> list[float]:
    with conn.transaction():
        conn.execute("SET LOCAL enable_indexscan = off")
        conn.execute("SET LOCAL enable_bitmapscan = off")
        rows = conn.execute(
            f"SELECT embedding <=> %s FROM {t} WHERE user_id = %s ORDER BY 1 LIMIT %s", (vector, user, k)
        ).fetchall()
    return [float(r[0]) for r in rows]


def measure_retrieval(
    conn: psycopg.Connection[Any],
    dest_url: str,
    table: str,
    *,
    embedder: Embedder | None,
    k: int = 10,
    users_per_bucket: int = 20,
    queries_per_user: int = 3,
    seed: int = 0,
    search: str = "auto",
    exact_max: int | None = None,
    ef_search: int | None = None,
    min_recall: float = 0.95,
    max_underfill: float = 0.0,
    min_recall_by_bucket: Mapping[str, float] | None = None,
    queries: Sequence[tuple[str, np.ndarray] | tuple[str, np.ndarray, Sequence[str]]] | None = None,
) -> RetrievalReport:
    """Per size bucket: recall@k of the production path vs exact, and underfill.

    Each bucket fails below its own threshold: ``min_recall_by_bucket[name]`` when given (big users
    go through another search path than small ones, so one bar may not fit all), else ``min_recall``."""
    from memwork.backends.pgvector import DEFAULT_EF_SEARCH, DEFAULT_EXACT_MAX, PgvectorBackend

    t = quote_identifier(table)
    report = RetrievalReport(k=k)
    sizes = user_sizes(conn, table)
    by_bucket: dict[str, list[str]] = {}
    for user, n in sorted(sizes.items()):
        by_bucket.setdefault(bucket_name(n), []).append(user)
    rng = random.Random(seed)
    plan: list[Any] = list(queries or [])
    if not plan:
        for users in by_bucket.values():
            chosen = rng.sample(users, min(users_per_bucket, len(users)))
            largest = max(users, key=lambda u: sizes[u])
            chosen = sorted(set(chosen) | {largest})
            for user in chosen:
                rows = conn.execute(
                    f"SELECT content, embedding FROM {t} WHERE user_id = %s "
                    "ORDER BY md5(id::text || %s) LIMIT %s",
                    (user, str(seed), queries_per_user),
                ).fetchall()
                if embedder is not None:
                    vectors = embedder.embed([str(r[0]) for r in rows])
                else:
                    vectors = np.asarray([as_array(r[1]) for r in rows])
                plan.extend((user, v) for v in vectors)
    for name, users in by_bucket.items():
        report.buckets[name] = BucketResult(users=len(users))
    backend = PgvectorBackend(
        dest_url,
        table=table,
        search=search,
        exact_max=exact_max or DEFAULT_EXACT_MAX,
        ef_search=ef_search or DEFAULT_EF_SEARCH,
    )
    per_user: dict[str, list[int]] = {}
    expected: dict[str, Any] = {"queries": 0, "expected": 0, "found": 0, "missed": []}
    try:
        for user, vector, *wanted in plan:
            result = report.buckets.setdefault(bucket_name(sizes.get(user, 0)), BucketResult())
            answer = backend.resolve({"userId": user, "embedding": vector.tolist(), "limit": k})[
                "semanticMemories"
            ]
            if wanted and wanted[0]:
                _expected(expected, user, list(wanted[0]), [str(m["id"]) for m in answer])
            exact = _exact(conn, t, user, vector, k)
            kth = exact[-1] if exact else 0.0
            hits = sum(1 for m in answer if m["distance"] is not None and m["distance"] <= kth + TIE_EPSILON)
            hits = min(hits, len(exact))
            result.queries += 1
            result.recall_hits += hits
            result.recall_total += len(exact)
            if sizes.get(user, 0) >= k:
                result.fillable += 1
                result.underfilled += len(answer) < k
            tally = per_user.setdefault(user, [0, 0])
            tally[0] += hits
            tally[1] += len(exact)
    finally:
        backend.close()
    if expected["queries"]:
        expected["share"] = round(expected["found"] / expected["expected"], 4)
        report.expected = expected
    for user, (hits, total) in per_user.items():
        result = report.buckets[bucket_name(sizes.get(user, 0))]
        result.sampled_users += 1
        if total:
            result.worst_users.append((user, round(hits / total, 4)))
    for name, result in report.buckets.items():
        result.worst_users = sorted(result.worst_users, key=lambda x: (x[1], x[0]))[:5]
        bar = (min_recall_by_bucket or {}).get(name, min_recall)
        if result.recall is not None and result.recall < bar:
            report.problems.append(f"recall: bucket {name} recall@{k} {result.recall:.3f} below {bar}")
        if result.underfill_rate is not None and result.underfill_rate > max_underfill:
            report.problems.append(
                f"underfill: bucket {name} {result.underfilled} of {result.fillable} answers "
                f"had fewer than {k} rows"
            )
    return report


def _expected(tally: dict[str, Any], user: str, wanted: list[str], answer: list[str]) -> None:
    """Count one query's expected ids found in the production answer (the first 20 misses named)."""
    found = set(answer) & set(wanted)
    tally["queries"] += 1
    tally["expected"] += len(wanted)
    tally["found"] += len(found)
    room = 20 - len(tally["missed"])
    tally["missed"] += [[user, key] for key in wanted if key not in found][: max(room, 0)]
