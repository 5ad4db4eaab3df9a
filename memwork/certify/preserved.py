"""Retrieval preserved across a migration: the same queries against the source's search and the
destination's, per sampled user, with a claim a person can sign.

For each sampled user (a random sample by size, plus the smallest, the median and the largest user
always) each query is run on both sides; the answers' ids are compared by overlap@k and rank-biased
overlap (:func:`memwork.service.shadow.overlap_at_k` and :func:`~memwork.service.shadow.rbo`, the
shadow traffic's own measures), two memories at the same distance from the query in the
destination counting as one answer (a tie either side may break either way; :func:`_twins`). Per
user: the mean of each over its queries with a bootstrap
interval (percentile, over the user's queries), and PASS when the mean overlap@k reaches
``min_overlap``. Over users: the share that passed and its one-sided Clopper-Pearson lower bound,
stated as one sentence -- "overlap@10 >= 0.95 for >= 86.1 % of users (20 of 20 sampled passed), at
95 % confidence". With ``min_share`` the gate fails when that bound is below it; without, when any
sampled user fails.

Queries come from a ``queries.jsonl`` file (:func:`read_queries`: one JSON object a line, ``user``,
``query`` text or ``vector``, optional ``expected`` ids -- captured from production), else from the
content of a few rows of each sampled user. A text query is embedded for each side by that side's
model; a vector is sent to both sides as it is (it must be of both models: a migration that kept
the vectors).

A side is any ``search(user, vector, k) -> ids nearest first``: a source with a ``search`` method
(:class:`~memwork.backends.qdrant_points.QdrantSource`,
:class:`~memwork.backends.weaviate.WeaviateSource`), or :func:`pgvector_search` (a pgvector table as
the source, or the destination). A side whose search takes the query's *text* (``takes="text"``:
:class:`~memwork.backends.letta.LettaSource`, whose service embeds it with its own model) is sent
each query's text as it is; the other side gets that text embedded by its model, or, for a query
sampled from the destination's content, that row's stored vector (its model's embedding of the same
text). The report says so (``source_input``), and so does its claim. A search may answer None for a
user it cannot scope a search to (Letta's own untagged passages): that user's queries are not run,
with a note.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from memwork.embed import Embedder
from memwork.errors import UsageError
from memwork.identifiers import quote_identifier

if TYPE_CHECKING:
    import psycopg

    from memwork.backends.pgvector import PgvectorBackend

#: ids of a user's nearest memories to a vector (or, for a text-searching side, to a text), nearest
#: first; None: this side cannot search this user on their own
Search = Callable[[str, Any, int], list[str] | None]
#: what a side's search takes: a vector (embedded here) or the query's text (embedded by the service)
INPUTS = ("vector", "text")
BOOTSTRAP_RESAMPLES = 1000
CONFIDENCE = 0.95
WORST_LISTED = 5


@dataclass(frozen=True)
class Query:
    """One baseline query: a user and its text or vector; ``expected``: ids a good answer holds."""

    user: str
    text: str | None = None
    vector: tuple[float, ...] | None = None
    expected: tuple[str, ...] = ()


def read_queries(path: Path | str) -> list[Query]:
    """``queries.jsonl``: one object a line (blank lines skipped). Any bad line is a usage error
    naming the line's field and value (``queries.jsonl:3 user``)."""
    where = Path(path)
    try:
        text = where.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError("queries", str(path), f"cannot be read ({type(exc).__name__})") from None
    queries = [
        _query(line, f"{where.name}:{n}") for n, line in enumerate(text.splitlines(), 1) if line.strip()
    ]
    if not queries:
        raise UsageError("queries", str(path), "holds no query")
    return queries


def _query(line: str, where: str) -> Query:
    try:
        item = json.loads(line)
    except ValueError:
        raise UsageError(where, line[:60], "is not a JSON object") from None
    if not isinstance(item, dict):
        raise UsageError(where, line[:60], "is not a JSON object")
    user = item.get("user", item.get("userId"))
    if not isinstance(user, str) or not user:
        raise UsageError(f"{where} user", user, "must be a non-empty string")
    text, vector = item.get("query"), item.get("vector")
    if text is None and vector is None:
        raise UsageError(f"{where} query", None, "each line needs a query text or a vector")
    if text is not None and (not isinstance(text, str) or not text.strip()):
        raise UsageError(f"{where} query", text, "must be a non-empty string")
    if vector is not None and not _numbers(vector):
        raise UsageError(f"{where} vector", _short(vector), "must be a non-empty list of finite numbers")
    expected = item.get("expected", [])
    if not isinstance(expected, list) or not all(isinstance(e, str | int) for e in expected):
        raise UsageError(f"{where} expected", _short(expected), "must be a list of ids")
    return Query(
        user,
        text,
        None if vector is None else tuple(float(x) for x in vector),
        tuple(str(e) for e in expected),
    )


def _numbers(value: object) -> bool:
    if not isinstance(value, list) or not value:
        return False
    return all(isinstance(x, int | float) and not isinstance(x, bool) and np.isfinite(x) for x in value)


def _short(value: object) -> str:
    shown = json.dumps(value, default=str)
    return shown if len(shown) <= 60 else shown[:57] + "..."


# ---- the measurement ------------------------------------------------------------------------------
@dataclass
class UserAgreement:
    """One user's queries on both sides: mean overlap@k and RBO, each with its bootstrap interval."""

    user: str
    size: int
    queries: int
    overlap: float
    overlap_ci: tuple[float, float]
    rbo: float
    rbo_ci: tuple[float, float]
    passed: bool
    expected_found: float | None = None  #: share of the file's expected ids in the destination's top k

    def to_dict(self) -> dict[str, Any]:
        return {
            "user": self.user,
            "size": self.size,
            "queries": self.queries,
            "overlap": round(self.overlap, 4),
            "overlap_ci": [round(x, 4) for x in self.overlap_ci],
            "rbo": round(self.rbo, 4),
            "rbo_ci": [round(x, 4) for x in self.rbo_ci],
            "passed": self.passed,
            "expected_found": self.expected_found,
        }


@dataclass
class PreservationReport:
    """Per sampled user, the share that passed with its lower bound, the claim, the gate's problems."""

    k: int
    min_overlap: float
    min_share: float | None
    query_source: str  #: "file" or "content"
    source_input: str = "vector"  #: what the source's search was sent: "vector" or the query "text"
    users: list[UserAgreement] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def passed_users(self) -> int:
        return sum(u.passed for u in self.users)

    @property
    def share_lower_bound(self) -> float | None:
        """One-sided Clopper-Pearson lower bound (at :data:`CONFIDENCE`) on the share of users who pass."""
        return lower_bound(self.passed_users, len(self.users)) if self.users else None

    def worst(self) -> list[UserAgreement]:
        return sorted(self.users, key=lambda u: (u.overlap, u.rbo, u.user))[:WORST_LISTED]

    def claim(self) -> str:
        n, bound = len(self.users), self.share_lower_bound
        if not n or bound is None:
            return "Retrieval preservation not measured: no sampled user had a query on both sides."
        sent = " (each query sent to the source's search as text)" if self.source_input == "text" else ""
        return (
            f"overlap@{self.k} >= {self.min_overlap:g} for >= {bound:.1%} of users "
            f"({self.passed_users} of {n} sampled passed), at {CONFIDENCE:.0%} confidence{sent}"
        )

    def to_dict(self) -> dict[str, Any]:
        overlaps = [u.overlap for u in self.users]
        return {
            "k": self.k,
            "min_overlap": self.min_overlap,
            "min_share": self.min_share,
            "query_source": self.query_source,
            "source_input": self.source_input,
            "sampled_users": len(self.users),
            "passed_users": self.passed_users,
            "share_lower_bound": self.share_lower_bound,
            "mean_overlap": round(float(np.mean(overlaps)), 4) if overlaps else None,
            "mean_overlap_ci": [round(x, 4) for x in bootstrap_ci(overlaps)] if overlaps else None,
            "claim": self.claim(),
            "worst_users": [u.to_dict() for u in self.worst()],
            "users": [u.to_dict() for u in self.users],
            "problems": self.problems,
            "notes": self.notes,
        }


def lower_bound(successes: int, trials: int, confidence: float = CONFIDENCE) -> float:
    """The exact (Clopper-Pearson) one-sided lower confidence bound of a proportion."""
    from scipy.stats import beta

    if successes <= 0:
        return 0.0
    return float(beta.ppf(1 - confidence, successes, trials - successes + 1))


def users_needed(share: float, confidence: float = CONFIDENCE) -> int:
    """The fewest sampled users, all passing, whose lower bound reaches ``share`` (299 for 99 %)."""
    if share >= 1:
        raise UsageError("min_user_share", share, "no sample bounds a share of 100 % from below")
    return math.ceil(math.log(1 - confidence) / math.log(share))


def bootstrap_ci(
    values: Sequence[float], *, seed: int = 0, confidence: float = CONFIDENCE
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean (a single value: that value twice)."""
    data = np.asarray(values, dtype=float)
    if data.size <= 1:
        value = float(data[0]) if data.size else float("nan")
        return value, value
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(BOOTSTRAP_RESAMPLES, data.size))].mean(axis=1)
    tail = (1 - confidence) / 2 * 100
    return float(np.percentile(means, tail)), float(np.percentile(means, 100 - tail))


def sample_users(sizes: dict[str, int], n: int, seed: int) -> list[str]:
    """``n`` users at random, plus the smallest, the median and the largest (by rows, then id)."""
    if not sizes:
        return []
    ordered = sorted(sizes, key=lambda u: (sizes[u], u))
    always = {ordered[0], ordered[len(ordered) // 2], ordered[-1]}
    rest = [u for u in ordered if u not in always]
    chosen = random.Random(seed).sample(rest, min(max(n - len(always), 0), len(rest)))
    return sorted(always | set(chosen), key=lambda u: (sizes[u], u))


@dataclass
class Side:
    """One side's search, the model its query text is embedded with (None: vectors only), and the
    model id of its stored vectors (None: unknown) -- a vector query of one model is never sent to a
    side of another. ``takes="text"``: the search is sent the query's text (the service embeds it)."""

    search: Search
    embedder: Embedder | None = None
    model: str | None = None
    takes: str = "vector"

    def __post_init__(self) -> None:
        if self.takes not in INPUTS:
            raise UsageError("takes", self.takes, f"must be one of {', '.join(INPUTS)}")


def measure_preservation(
    conn: psycopg.Connection[Any],
    table: str,
    source: Side,
    dest: Side,
    *,
    k: int = 10,
    users: int = 30,
    queries_per_user: int = 3,
    queries: Sequence[Query] | None = None,
    min_overlap: float = 0.95,
    min_share: float | None = None,
    seed: int = 0,
    owner: str | None = None,
) -> PreservationReport:
    """The same queries on both sides per sampled user (users and content read from the destination
    ``table`` through ``conn``; with ``owner``, only the rows that source wrote there -- a table
    shared by several sources is sampled over this one's users); see the module docstring for the
    statistics and the gate."""
    from memwork.service.shadow import overlap_at_k, rbo

    if dest.takes != "vector":
        raise UsageError("dest", dest.takes, "the destination's search takes a vector")
    report = PreservationReport(
        k, min_overlap, min_share, "file" if queries else "content", source_input=source.takes
    )
    if source.takes == "text":
        report.notes.append(
            "the source searches by text: each query's text was sent to it as it is (ranked by the "
            "source's own model and ranking); the destination got it embedded by the table's model "
            "(a sampled row: its stored vector)"
        )
    sizes = _sizes(conn, table, owner)
    plan = (
        list(queries)
        if queries
        else _content_queries(conn, table, sample_users(sizes, users, seed), queries_per_user, seed, owner)
    )
    by_user: dict[str, list[tuple[float, float, float | None]]] = {}
    skipped: dict[str, int] = {}
    tied = 0
    for query in plan:
        inputs = _inputs(query, source, dest)
        if isinstance(inputs, str):
            skipped[inputs] = skipped.get(inputs, 0) + 1
            continue
        theirs = source.search(query.user, inputs[0], k)
        ours = dest.search(query.user, inputs[1], k)
        if theirs is None or ours is None:
            side = "source" if theirs is None else "destination"
            why = f"{query.user}: the {side} cannot search this user alone"
            skipped[why] = skipped.get(why, 0) + 1
            continue
        hit = len(set(query.expected) & set(ours[:k])) / len(query.expected) if query.expected else None
        same = _twins(conn, table, query.user, inputs[1], [*theirs[:k], *ours[:k]], owner)
        left, right = _as_twins(theirs[:k], same), _as_twins(ours[:k], same)
        overlap = overlap_at_k(left, right, k)
        if overlap is None:  # both empty: nothing to compare
            continue
        tied += overlap != overlap_at_k(theirs, ours, k)
        by_user.setdefault(query.user, []).append((overlap, rbo(left, right) or 0.0, hit))
    for reason, n in sorted(skipped.items()):
        report.notes.append(f"{n} quer(ies) not run: {reason}")
    if tied:
        report.notes.append(
            f"{tied} quer(ies) answered with a tie: memories at the same distance from the query in "
            "the destination are one answer (either may be returned)"
        )
    for user, results in sorted(by_user.items(), key=lambda kv: (sizes.get(kv[0], 0), kv[0])):
        overlaps, rbos = [r[0] for r in results], [r[1] for r in results]
        found = [r[2] for r in results if r[2] is not None]
        mean = float(np.mean(overlaps))
        report.users.append(
            UserAgreement(
                user,
                sizes.get(user, 0),
                len(results),
                mean,
                bootstrap_ci(overlaps, seed=seed),
                float(np.mean(rbos)),
                bootstrap_ci(rbos, seed=seed),
                mean >= min_overlap,
                round(float(np.mean(found)), 4) if found else None,
            )
        )
    _judge(report)
    return report


def _judge(report: PreservationReport) -> None:
    failed = [u for u in report.users if not u.passed]
    bound = report.share_lower_bound
    if not report.users:
        why = f" ({report.notes[0]})" if report.notes else ""
        report.problems.append(f"preserved: no sampled user could be queried on both sides{why}")
    elif report.min_share is not None and bound is not None and bound < report.min_share:
        detail = (
            f"failing: {_named(failed)}"
            if failed
            else f"it takes {users_needed(report.min_share)} sampled users, all passing"
        )
        report.problems.append(
            f"preserved: {report.claim()}; the target is >= {report.min_share:.1%} ({detail})"
        )
    elif report.min_share is None and failed:
        report.problems.append(
            f"preserved: {len(failed)} of {len(report.users)} sampled user(s) below overlap@{report.k} "
            f"{report.min_overlap:g}: {_named(failed)}"
        )


def _named(users: list[UserAgreement]) -> str:
    worst = sorted(users, key=lambda u: (u.overlap, u.user))[:WORST_LISTED]
    return ", ".join(f"{u.user} ({u.overlap:.2f})" for u in worst)


def _inputs(query: Query, source: Side, dest: Side) -> tuple[Any, np.ndarray] | str:
    """What each side is sent: a text-searching source the query's text, and the destination that
    text embedded by its model (else the query's vector: a sampled row's own); otherwise
    :func:`_vectors`. Or why the query cannot be run."""
    if source.takes != "text":
        return _vectors(query, source, dest)
    if query.text is None:
        return "the source searches by text and the query has none (a queries.jsonl line with a vector only)"
    if dest.embedder is not None:
        return query.text, dest.embedder.embed([query.text])[0]
    if query.vector is not None:
        return query.text, np.asarray(query.vector, dtype=np.float32)
    return "a text query needs the destination's model to embed it (--embedder)"


def _vectors(query: Query, source: Side, dest: Side) -> tuple[np.ndarray, np.ndarray] | str:
    """The query's vector for each side -- its text embedded by each side's model when both have
    one, else its vector as it is on both -- or why it cannot be run."""
    if query.text is not None and source.embedder is not None and dest.embedder is not None:
        return source.embedder.embed([query.text])[0], dest.embedder.embed([query.text])[0]
    if query.vector is not None and None not in (source.model, dest.model) and source.model != dest.model:
        return (
            f"the copy was re-embedded ({source.model} -> {dest.model}): a query is embedded by each "
            "side's model (--source-embedder and --embedder)"
        )
    if query.vector is not None:
        vector = np.asarray(query.vector, dtype=np.float32)
        return vector, vector
    return "a text query needs an embedder for each side (--embedder, --source-embedder)"


#: decimals of the cosine distance two answers tie at
TIE_DECIMALS = 6


def _twins(
    conn: psycopg.Connection[Any],
    table: str,
    user: str,
    vector: np.ndarray,
    ids: Sequence[str],
    owner: str | None,
) -> dict[str, str]:
    """Each of ``ids`` the destination holds for ``user`` -> its cosine distance from the query
    ``vector`` there (the production path's distance), to :data:`TIE_DECIMALS`: two memories at the
    same distance are tied, and either one is the same answer. Only the destination's ties count: a
    memory the destination ranks farther (a drifted vector) never stands in for the source's."""
    t = quote_identifier(table)
    key = "coalesce(d.source_memory_id, d.id::text)"
    literal = "[" + ",".join(repr(float(x)) for x in np.asarray(vector, dtype=float).ravel()) + "]"
    rows = conn.execute(
        f"SELECT {key}, round((d.embedding <=> %(q)s::vector)::numeric, {TIE_DECIMALS})::text "
        f"FROM {t} AS d WHERE d.user_id = %(user)s AND {key} = ANY(%(ids)s){_owned(owner)}",
        {"user": user, "ids": list(dict.fromkeys(ids)), "owner": owner, "q": literal},
    ).fetchall()
    return {str(k): str(distance) for k, distance in rows if distance is not None}


def _as_twins(ids: Sequence[str], digests: dict[str, str]) -> list[str]:
    """``ids`` with each one tied with another answered id named by their distance and its
    occurrence (``tie:<distance>#2``): tied answers compare equal, as a multiset."""
    shared = {d for d in digests.values() if sum(v == d for v in digests.values()) > 1}
    seen: dict[str, int] = {}
    out = []
    for key in ids:
        digest = digests.get(key)
        if digest in shared:
            seen[digest] = seen.get(digest, 0) + 1
            out.append(f"tie:{digest}#{seen[digest]}")
        else:
            out.append(key)
    return out


def _owned(owner: str | None) -> str:
    from memwork.migrate.ownership import owner_sql

    return "" if owner is None else f" AND {owner_sql('d')} = %(owner)s"


def _sizes(conn: psycopg.Connection[Any], table: str, owner: str | None) -> dict[str, int]:
    """Rows per user in the destination (this owner's only, when given)."""
    t = quote_identifier(table)
    sql = f"SELECT user_id, count(*) FROM {t} AS d WHERE true{_owned(owner)} GROUP BY 1"
    return {str(u): int(n) for u, n in conn.execute(sql, {"owner": owner})}


def _content_queries(
    conn: psycopg.Connection[Any], table: str, users: list[str], per_user: int, seed: int, owner: str | None
) -> list[Query]:
    """A few stored rows of each user as queries: their content (or, in a copy that kept the
    source's vectors, their stored vector, which is of both sides' model)."""
    from memwork.certify.vectors import as_array

    t = quote_identifier(table)
    out: list[Query] = []
    for user in users:
        rows = conn.execute(
            f"SELECT content, embedding FROM {t} AS d WHERE user_id = %(user)s{_owned(owner)} "
            "ORDER BY md5(id::text || %(seed)s) LIMIT %(n)s",
            {"user": user, "seed": str(seed), "n": per_user, "owner": owner},
        ).fetchall()
        out += [
            Query(user, str(content), tuple(float(x) for x in as_array(vector))) for content, vector in rows
        ]
    return out


def pgvector_search(backend: PgvectorBackend) -> Search:
    """A pgvector table's production search path (the backend's own strategy) as a :data:`Search`."""

    def search(user: str, vector: np.ndarray, k: int) -> list[str]:
        answer = backend.resolve({"userId": user, "embedding": vector.tolist(), "limit": k})
        return [str(m["id"]) for m in answer["semanticMemories"]]

    return search
