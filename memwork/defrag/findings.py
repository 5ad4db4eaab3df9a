"""The read-only actions as pure functions over lists of entries (no store needed).

Every function groups entries by scope and never pairs entries of different scopes; stubs are never
treated as entries (they are only counted by :func:`analyze`), nor are superseded entries (history
kept by ``defrag supersede``: never paired, merged or compacted). A vector marked out of its model's
range (:mod:`memwork.coverage`) is never compared by cosine: such an entry pairs by text only.

Duplicates are found in two passes per scope: first an exact pass (a hash of the content, and of the
content with case folded and whitespace collapsed), whose pairs have ``kind`` ``exact`` or
``normalised`` and need no embeddings; then the similarity join, whose other pairs have ``kind``
``similar``. Entries whose normalised content is empty are left to the join.

With ``since`` (``--since``) the pair searches return exactly the full run's pairs that hold an entry
created or changed at or after that instant (:func:`changed_since`), comparing only those entries
against their whole scope (O(new x N)); a scope with no such entry is not searched at all. With
``clusters`` the search then follows the pairs it found to old entries, round by round, until it has
every pair touching any entry of a cluster that holds a changed one -- what a merge needs to decide
those clusters exactly as a full run would.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from operator import attrgetter
from typing import Any

import numpy as np

from memwork import similarity
from memwork.coverage import count_out_of_range, out_of_range, pair_readable, pairs_readable
from memwork.defrag.contradictions import Contradiction, detect
from memwork.defrag.merge import links_to
from memwork.defrag.scores import confidence_of, health, quality_issues, quality_score
from memwork.embed import coverage_for_model
from memwork.entry import Entry, utcnow
from memwork.progress import Progress


@dataclass(frozen=True)
class Pair:
    """Two entries of one scope and how similar they are (0-1)."""

    scope: str
    path_a: str
    path_b: str
    similarity: float
    text_similarity: float
    semantic_similarity: float | None
    link_status: str | None = None  # find_related: unlinked / one-way / bidirectional
    #: the signals at or above the threshold: ("text",), ("semantic",) or both
    matched_by: tuple[str, ...] = ()
    #: a vector of the pair is out of its model's range, so no cosine was computed
    out_of_range: bool = False
    #: with a calibrated policy: its combined score, and ``merge`` / ``review`` / ``distinct``
    policy_score: float | None = None
    decision: str | None = None
    #: how it was found: ``exact`` (same content), ``normalised`` (same after case and whitespace
    #: folding) or ``similar`` (the similarity join)
    kind: str = "similar"
    #: a possible contradiction between the two (:mod:`memwork.defrag.contradictions`): never merged
    contradiction: Contradiction | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "scope": self.scope,
            "path_a": self.path_a,
            "path_b": self.path_b,
            "similarity": round(self.similarity, 6),
            "text_similarity": round(self.text_similarity, 6),
            "semantic_similarity": None
            if self.semantic_similarity is None
            else round(self.semantic_similarity, 6),
        }
        data["matched_by"] = list(self.matched_by)
        data["out_of_range"] = self.out_of_range
        data["kind"] = self.kind
        if self.contradiction is not None:
            data["contradiction"] = self.contradiction.to_dict()
        if self.link_status is not None:
            data["link_status"] = self.link_status
        if self.decision is not None:
            data["policy_score"] = None if self.policy_score is None else round(self.policy_score, 6)
            data["decision"] = self.decision
        return data

    def semantic_text(self, digits: int = 3) -> str:
        """The semantic similarity for a person: the number, "out of model range" or "-" (no vector)."""
        if self.semantic_similarity is not None:
            return f"{self.semantic_similarity:.{digits}f}"
        return "out of model range" if self.out_of_range else "-"


@dataclass(frozen=True)
class EntryReport:
    """One entry as listed by an action: its quality, issues, age and hits."""

    scope: str
    path: str
    title: str
    quality: int
    issues: tuple[str, ...]
    age_days: float
    hits: int
    size: int
    confidence: str | None
    stub: bool = False
    note: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = {
            "scope": self.scope,
            "path": self.path,
            "title": self.title,
            "quality_score": self.quality,
            "issues": list(self.issues),
            "age_days": round(self.age_days, 2),
            "hits": self.hits,
            "size": self.size,
            "confidence": self.confidence,
            "stub": self.stub,
        }
        if self.note:
            data["note"] = self.note
        return data | self.extra


def age_days(entry: Entry, now: datetime) -> float:
    """Days since the entry was last updated."""
    return (now - entry.updated_at) / timedelta(days=1)


def report(entry: Entry, now: datetime, note: str | None = None) -> EntryReport:
    return EntryReport(
        scope=entry.scope,
        path=entry.path,
        title=entry.title,
        quality=0 if entry.is_stub else quality_score(entry.metadata),
        issues=() if entry.is_stub else tuple(quality_issues(entry)),
        age_days=age_days(entry, now),
        hits=entry.hits,
        size=entry.size,
        confidence=confidence_of(entry.metadata),
        stub=entry.is_stub,
        note=note,
    )


def by_scope(entries: Iterable[Entry], *, stubs: bool = False) -> dict[str, list[Entry]]:
    """Entries grouped by scope in (scope, path) order: non-stubs only, or stubs only."""
    groups: dict[str, list[Entry]] = defaultdict(list)
    for entry in sorted(entries, key=attrgetter("scope", "path")):  # Entry.key, without a call each
        if entry.is_stub == stubs and entry.superseded_by is None:
            groups[entry.scope].append(entry)
    return dict(groups)


def compared(entry: Entry) -> bool:
    """Whether the pair searches compare ``entry`` (what :func:`by_scope` keeps: no stub, not superseded)."""
    return not entry.is_stub and entry.superseded_by is None


@dataclass(frozen=True)
class Tile:
    """One tile of a scope's pair matrix, for a scope too big for one worker.

    The scope's compared entries in :func:`by_scope` order are cut into blocks; a tile pairs block i
    (``left``) against block j (``right``, i < j), or within block i (``right`` None, the diagonal),
    so every pair of the scope lies in exactly one tile. ``dims`` counts the vector dimensions of
    the whole scope's compared entries (what picks its comparable vectors, as in one process);
    ``counted`` are the entries whose counts the tile's summary carries (every entry of block i,
    stubs too, on the diagonal; none off it), so the tiles of a scope count each entry once."""

    scope: str
    left: list[Entry]
    right: list[Entry] | None
    dims: Counter[int]
    counted: list[Entry] = field(default_factory=list)

    @property
    def group(self) -> list[Entry]:
        return self.left + (self.right or [])

    @property
    def cross(self) -> int | None:
        """The first position of ``right`` in :attr:`group` (None on the diagonal)."""
        return None if self.right is None else len(self.left)


def normalised_content(text: str) -> str:
    """The content with case folded and every run of whitespace one space (the ``normalised`` pass)."""
    return " ".join(text.casefold().split())


def exact_pairs(group: Sequence[Entry]) -> dict[tuple[int, int], str]:
    """``{(i, j): "exact" | "normalised"}`` for the positions ``i < j`` of ``group`` whose content is
    the same, or the same after :func:`normalised_content` (empty normalised content is skipped)."""
    buckets: dict[str, list[int]] = defaultdict(list)  # keyed by the folded text itself: no digest
    for k, entry in enumerate(group):
        folded = normalised_content(entry.content)
        if folded:
            buckets[folded].append(k)
    out: dict[tuple[int, int], str] = {}
    for members in buckets.values():
        for x, i in enumerate(members):
            for j in members[x + 1 :]:
                out[(i, j)] = "exact" if group[i].content == group[j].content else "normalised"
    return out


def flag_contradictions(pairs: Iterable[Pair], entries: Iterable[Entry]) -> list[Pair]:
    """``pairs`` with ``contradiction`` set where the two contents may contradict (rule-based)."""
    content = {e.key: e.content for e in entries}
    out = []
    for pair in pairs:
        a, b = content.get((pair.scope, pair.path_a)), content.get((pair.scope, pair.path_b))
        found = detect(a, b) if a is not None and b is not None else None
        out.append(replace(pair, contradiction=found) if found is not None else pair)
    return out


def _comparable_embeddings(entries: list[Entry], dims: Counter[int] | None = None) -> list[np.ndarray | None]:
    """Embeddings of the scope's most common dimension; others count as not embedded (cosine of
    vectors of different models is meaningless), and so do vectors out of their model's range (the
    model could not read the text: unrelated ones collide). ``dims``: the scope's dimension counts
    when ``entries`` are only part of it (a :class:`Tile`)."""
    if dims is None:
        dims = Counter(e.embedding.shape[0] for e in entries if e.embedding is not None)
    if not dims:
        return [None] * len(entries)
    dim = max(dims, key=lambda d: (dims[d], d))
    return [_usable(e, dim) for e in entries]


def _usable(entry: Entry, dimension: int) -> np.ndarray | None:
    """The entry's vector when it has the scope's dimension and is inside its model's range."""
    vector = entry.embedding
    if vector is None or vector.shape[0] != dimension or out_of_range(entry):
        return None
    return vector


def _matched_by(text: float, semantic: float | None, threshold: float) -> tuple[str, ...]:
    """Which signals reach ``threshold``: text (Jaccard), semantic (cosine), or both."""
    fired = ("text",) if text >= threshold else ()
    return fired + (("semantic",) if semantic is not None and semantic >= threshold else ())


def out_of_range_summary(entries: Iterable[Entry]) -> dict[str, int]:
    """``{"embedded_out_of_range": n}``: entries whose vector was set aside (its model could not read
    the text), for the summary of every action that compares vectors."""
    return {"embedded_out_of_range": count_out_of_range(entries)}


def analyze(entries: Iterable[Entry]) -> dict[str, Any]:
    """Health of all entries together and of each scope."""
    entries = list(entries)
    scopes: dict[str, list[Entry]] = defaultdict(list)
    for entry in entries:
        scopes[entry.scope].append(entry)
    return {
        "health": health(entries).to_dict(),
        "scopes": {name: health(group).to_dict() for name, group in sorted(scopes.items())},
    }


def changed_since(entry: Entry, since: datetime) -> bool:
    """Whether ``entry`` was created or changed at or after ``since`` (the ``--since`` test)."""
    return entry.updated_at >= since or entry.created_at >= since


def find_duplicates(
    entries: Iterable[Entry],
    threshold: float = 0.85,
    *,
    progress: Progress | None = None,
    keep: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
    since: datetime | None = None,
    clusters: bool = False,
) -> list[Pair]:
    """Every same-scope pair with ``max(jaccard(content), cosine(embedding)) >= threshold``.

    ``progress`` gets one stage whose total is the number of entries compared (stubs are not).
    ``keep(text, semantic)`` narrows the pairs inside the join, before the pair budget is spent
    (:func:`memwork.similarity.find_duplicate_pairs`); it sees the raw cosine, so it must keep every
    pair its caller may want once an unreadable cosine is set aside (e.g. a score that does not
    grow when the cosine is replaced by the lower text score).

    With ``since`` only the pairs holding an entry changed since then (:func:`changed_since`), and
    with ``clusters`` too every pair touching an entry connected to one of those through found pairs
    (module docstring) -- in both cases exactly the full run's pairs, with the same scores."""
    pairs: list[Pair] = []
    groups = by_scope(entries)
    advance = _stage(progress, "finding duplicates", groups)
    budget = similarity.PairBudget()  # one for the whole store, not one per scope
    for scope, group in groups.items():
        if since is None:
            pairs.extend(_scope_duplicates(scope, group, threshold, None, advance, budget, keep))
            continue
        rows = [k for k, e in enumerate(group) if changed_since(e, since)]
        if not rows:
            if advance is not None:
                advance.advance(len(group))  # nothing changed here: nothing to compare
            continue
        pairs.extend(_rounds(scope, group, threshold, rows, clusters, advance, budget, keep))
    return _sorted(pairs)


def _rounds(
    scope: str,
    group: list[Entry],
    threshold: float,
    rows: list[int],
    clusters: bool,
    progress: Progress | None,
    budget: similarity.PairBudget,
    keep: Callable[[np.ndarray, np.ndarray], np.ndarray] | None,
) -> list[Pair]:
    """The pairs holding ``rows``; with ``clusters``, again from each partner not searched yet, until
    no new entry turns up (one index of the scope for every round)."""
    space = _Scope(group)
    position = {e.path: k for k, e in enumerate(group)}
    found: dict[tuple[str, str], Pair] = {}
    searched: set[int] = set()
    frontier = sorted(set(rows))
    while frontier:
        got = _scope_duplicates(scope, group, threshold, frontier, progress, budget, keep, space)
        progress = None  # the stage counts the scope once
        searched.update(frontier)
        for pair in got:
            found.setdefault((pair.path_a, pair.path_b), pair)
        if not clusters:
            break
        frontier = sorted({position[p] for pair in got for p in (pair.path_a, pair.path_b)} - searched)
    return list(found.values())


class _Scope:
    """One scope's comparable vectors, exact pairs and pair index, each built once for every round
    (or a tile's: its exact pairs only those across ``cross`` when it is off the diagonal)."""

    def __init__(
        self, group: list[Entry], dims: Counter[int] | None = None, cross: int | None = None
    ) -> None:
        self.vectors = _comparable_embeddings(group, dims)
        self.exact = exact_pairs(group)
        if cross is not None:
            self.exact = {(i, j): kind for (i, j), kind in self.exact.items() if i < cross <= j}
        self.space = similarity.PairSpace([e.content for e in group], self.vectors)
        self.cross = cross


def tile_duplicates(tile: Tile, threshold: float, budget: similarity.PairBudget | None = None) -> list[Pair]:
    """The duplicate pairs of one :class:`Tile`: exactly the pairs :func:`find_duplicates` finds in
    the tile's part of its scope's pair matrix, with the same scores."""
    group = tile.group
    budget = budget if budget is not None else similarity.PairBudget()
    index = _Scope(group, tile.dims, tile.cross)
    return _sorted(_scope_duplicates(tile.scope, group, threshold, None, None, budget, None, index))


def _scope_duplicates(
    scope: str,
    group: list[Entry],
    threshold: float,
    rows: list[int] | None,
    advance: Progress | None,
    budget: similarity.PairBudget,
    keep: Callable[[np.ndarray, np.ndarray], np.ndarray] | None,
    index: _Scope | None = None,
) -> list[Pair]:
    """One scope's duplicate pairs (only those holding a position of ``rows`` when given)."""
    index = index if index is not None else _Scope(group)
    vectors, exact = index.vectors, index.exact  # exact first, needing no embeddings
    touching = set(rows) if rows is not None else None
    chosen = [
        (ij, kind)
        for ij, kind in sorted(exact.items())
        if touching is None or ij[0] in touching or ij[1] in touching
    ]
    pairs = _exact_kind_pairs(scope, group, vectors, chosen, threshold)
    found = similarity.find_duplicate_pairs(
        index.space.texts,
        vectors,
        threshold,
        progress=advance,
        budget=budget,
        keep=keep,
        changed=rows,
        space=index.space,
        cross=index.cross,
    )
    return pairs + _similar_pairs(scope, group, [p for p in found if (p.i, p.j) not in exact], threshold)


def _exact_kind_pairs(
    scope: str,
    group: list[Entry],
    vectors: list[np.ndarray | None],
    chosen: list[tuple[tuple[int, int], str]],
    threshold: float,
) -> list[Pair]:
    """The pairs of the exact pass (same content, or same once normalised): similarity 1.0."""
    pairs: list[Pair] = []
    for (i, j), kind in chosen:
        semantic = similarity.cosine(vectors[i], vectors[j])
        text = similarity.jaccard(group[i].content, group[j].content)
        # content without a word (only punctuation, say) fires neither signal: the pass itself found it
        fired = _matched_by(text, semantic, threshold) or (kind,)
        pairs.append(
            Pair(scope, group[i].path, group[j].path, 1.0, text, semantic, matched_by=fired, kind=kind)
        )
    return pairs


def _similar_pairs(
    scope: str, group: list[Entry], found: list[similarity.PairScore], threshold: float
) -> list[Pair]:
    """The similarity join's scored pairs as :class:`Pair`, a cosine the model could not read set
    aside (the pair then stands on its text score alone)."""
    # the cosine decides only where it is above the text score: there, did the model read what
    # tells the two apart? (one tokenizer call per model for all of them, not one per pair)
    ask = [
        k
        for k, p in enumerate(found)
        if p.semantic_similarity is not None and p.semantic_similarity > p.text_similarity
    ]
    readable = pairs_readable([(group[found[k].i], group[found[k].j]) for k in ask], coverage_for_model)
    unreadable = {k for k, ok in zip(ask, readable, strict=True) if not ok}
    pairs: list[Pair] = []
    for k, p in enumerate(found):
        a, b = group[p.i], group[p.j]
        semantic, unread = p.semantic_similarity, out_of_range(a) or out_of_range(b)
        if k in unreadable:
            semantic, unread = None, True  # the cosine cannot see what tells them apart
            if p.text_similarity < threshold:
                continue
        pairs.append(
            Pair(
                scope,
                a.path,
                b.path,
                max(p.text_similarity, semantic or 0.0),
                p.text_similarity,
                semantic,
                matched_by=_matched_by(p.text_similarity, semantic, threshold),
                out_of_range=unread,
            )
        )
    return pairs


def duplicates_touching(
    scope: str, group: list[Entry], threshold: float, rows: list[int] | None
) -> list[Pair]:
    """The exact search of one scope's live entries (``group``, in path order): every duplicate pair,
    or only those holding a position of ``rows`` -- the reference an approximate search is measured by."""
    return _scope_duplicates(scope, group, threshold, rows, None, similarity.PairBudget(), None)


def verify_duplicates(
    scope: str, group: list[Entry], i: Sequence[int], j: Sequence[int], threshold: float
) -> list[Pair]:
    """Of the candidate pairs ``(group[i[k]], group[j[k]])`` (``i < j``; ``group`` one scope's live
    entries in path order), exactly those the full search returns, with its scores and kinds: the
    same exact pass, join verification and readability check, only the candidates came from elsewhere."""
    vectors = _comparable_embeddings(group)
    exact = exact_pairs(group)
    candidates = sorted(set(zip(i, j, strict=True)))
    chosen = [(ij, exact[ij]) for ij in candidates if ij in exact]
    rest = [ij for ij in candidates if ij not in exact]
    found = similarity.verify_duplicate_pairs(
        [e.content for e in group], vectors, [a for a, _ in rest], [b for _, b in rest], threshold
    )
    return _exact_kind_pairs(scope, group, vectors, chosen, threshold) + _similar_pairs(
        scope, group, found, threshold
    )


def _stage(progress: Progress | None, description: str, groups: dict[str, list[Entry]]) -> Progress | None:
    """One stage over every scope's entries; the per-scope searches advance it."""
    if progress is not None:
        progress.start(description, sum(map(len, groups.values())))
    return progress


def link_status(a: Entry, b: Entry) -> str:
    """``bidirectional``, ``one-way`` or ``unlinked``."""
    forward, backward = links_to(a, b.path), links_to(b, a.path)
    if forward and backward:
        return "bidirectional"
    return "one-way" if forward or backward else "unlinked"


def find_related(
    entries: Iterable[Entry],
    min_similarity: float = 0.60,
    max_similarity: float = 0.85,
    *,
    progress: Progress | None = None,
    since: datetime | None = None,
) -> list[Pair]:
    """Same-scope embedded pairs with ``min <= cosine < max`` (cosine only), with their link status.

    ``progress`` gets one stage whose total is the number of entries (stubs are not). With ``since``
    only the pairs holding an entry changed since then (:func:`changed_since`), exactly as found by a
    full run, comparing only those entries against their scope."""
    pairs: list[Pair] = []
    groups = by_scope(entries)
    advance = _stage(progress, "finding related pairs", groups)
    budget = similarity.PairBudget()  # one for the whole store, not one per scope
    for scope, group in groups.items():
        if since is not None and not any(changed_since(e, since) for e in group):
            if advance is not None:
                advance.advance(len(group))  # nothing changed here: nothing to compare
            continue
        rows = None if since is None else [k for k, e in enumerate(group) if changed_since(e, since)]
        pairs.extend(_scope_related(scope, group, min_similarity, max_similarity, rows, advance, budget))
    return _sorted(pairs)


def tile_related(
    tile: Tile, min_similarity: float, max_similarity: float, budget: similarity.PairBudget | None = None
) -> list[Pair]:
    """The related pairs of one :class:`Tile`: exactly the pairs :func:`find_related` finds in the
    tile's part of its scope's pair matrix, with the same scores and link status."""
    budget = budget if budget is not None else similarity.PairBudget()
    found = _scope_related(
        tile.scope, tile.group, min_similarity, max_similarity, None, None, budget, tile.dims, tile.cross
    )
    return _sorted(found)


def _scope_related(
    scope: str,
    group: list[Entry],
    low: float,
    high: float,
    rows: list[int] | None,
    advance: Progress | None,
    budget: similarity.PairBudget,
    dims: Counter[int] | None = None,
    cross: int | None = None,
) -> list[Pair]:
    """One scope's related pairs: only those holding a position of ``rows`` when given; for a tile,
    ``dims`` are the whole scope's and only the pairs across ``cross`` count."""
    vectors = _comparable_embeddings(group, dims)
    keep = [k for k, v in enumerate(vectors) if v is not None]
    if advance is not None and len(keep) < len(group):
        advance.advance(len(group) - len(keep))  # not embedded: nothing to compare
    at = {k: x for x, k in enumerate(keep)}
    changed = None if rows is None else [at[k] for k in rows if k in at]
    found = similarity.find_related_pairs(
        [vectors[k] for k in keep],
        low,
        high,
        texts=[group[k].content for k in keep],
        progress=advance,
        budget=budget,
        changed=changed,
        cross=None if cross is None else sum(k < cross for k in keep),
    )
    return _related_pairs(scope, [group[k] for k in keep], found)


def _related_pairs(scope: str, group: list[Entry], found: list[similarity.PairScore]) -> list[Pair]:
    """The scored related pairs as :class:`Pair` with their link status; a pair whose cosine the model
    could not read is dropped (the cosine cannot see what tells them apart)."""
    pairs: list[Pair] = []
    for p in found:
        a, b = group[p.i], group[p.j]
        if not pair_readable(a, b, coverage_for_model):
            continue
        sem = p.semantic_similarity if p.semantic_similarity is not None else 0.0
        pairs.append(
            Pair(scope, a.path, b.path, sem, p.text_similarity, sem, link_status(a, b), ("semantic",))
        )
    return pairs


def related_touching(
    scope: str, group: list[Entry], low: float, high: float, rows: list[int] | None
) -> list[Pair]:
    """The exact related search of one scope's live entries (in path order), only the pairs holding
    a position of ``rows`` when given: the reference for an approximate search."""
    return _scope_related(scope, group, low, high, rows, None, similarity.PairBudget())


def verify_related(
    scope: str, group: list[Entry], i: Sequence[int], j: Sequence[int], low: float, high: float
) -> list[Pair]:
    """Of the candidate pairs ``(group[i[k]], group[j[k]])`` (``i < j``), exactly those
    :func:`find_related` returns, with its scores and link status."""
    vectors = _comparable_embeddings(group)
    keep = [k for k, v in enumerate(vectors) if v is not None]
    at = {k: x for x, k in enumerate(keep)}
    both = [(at[a], at[b]) for a, b in zip(i, j, strict=True) if a in at and b in at]
    found = similarity.verify_related_pairs(
        [vectors[k] for k in keep], low, high, [group[k].content for k in keep],
        [a for a, _ in both], [b for _, b in both],
    )  # fmt: skip
    return _related_pairs(scope, [group[k] for k in keep], found)


def _sorted(pairs: list[Pair]) -> list[Pair]:
    return sorted(pairs, key=lambda p: (-p.similarity, p.scope, p.path_a, p.path_b))


def find_low_quality(
    entries: Iterable[Entry], confidence_filter: str | None = None, *, now: datetime | None = None
) -> list[EntryReport]:
    """Entries with at least one quality issue (only of ``confidence_filter`` when given), worst first."""
    now = now or utcnow()
    out = []
    for group in by_scope(entries).values():
        for entry in group:
            if confidence_filter is not None and confidence_of(entry.metadata) != confidence_filter:
                continue
            if quality_issues(entry):
                out.append(report(entry, now))
    return sorted(out, key=lambda r: (r.quality, r.scope, r.path))


def find_archival_candidates(
    entries: Iterable[Entry], age_days_min: float = 90, *, now: datetime | None = None
) -> list[EntryReport]:
    """Entries not updated for at least ``age_days_min`` days, oldest first."""
    now = now or utcnow()
    out = [
        report(entry, now)
        for group in by_scope(entries).values()
        for entry in group
        if age_days(entry, now) >= age_days_min
    ]
    return sorted(out, key=lambda r: (-r.age_days, r.scope, r.path))
