"""The modifying actions' planners: pure functions from entries to a :class:`Plan`.

Merging clusters near-duplicates per scope with union-find, so three or more similar entries merge
into one survivor and every merged-away entry's stub points straight at it; existing stubs whose
target is merged away (or that point at another stub) are re-pointed to the final entry. Hence no
merge sequence can create a redirect cycle or a stub pointing at a stub.

With a reviewer's CSV the clusters are the closure of the approved pairs, and a rejected pair is never
merged into one group: a cluster holding a rejected pair is split greedily, joining approved pairs from
the highest similarity down and skipping any join that would put a rejected pair together (ties by
path). The cluster report names the original cluster, the rejected pairs and the approved pairs
that were therefore not merged.

Transitivity can chain entries that are not alike: A ~ B and B ~ C make one cluster even when A and C
are far apart. Every cluster of found pairs is reported with its size and density (the pairs found
inside it over the pairs possible); a cluster of three or more below ``min_cluster_density`` is not
merged at all -- it is listed for review (``review`` true, with its pairs), never merged automatically.
A reviewer's approved pairs are a person's decision, so a cluster of approved pairs only is not held.

Possible contradictions (:mod:`memwork.defrag.contradictions`) are never merged, not even when a
policy would auto-merge the pair or a reviewer approved it: every pair of a cluster's members (only
its found pairs in a cluster of more than :data:`CONTRADICTION_CHECK_LIMIT`) is checked, and a
contradicting pair is kept apart exactly like a rejected one. The pair carries ``contradiction``
(kind, differing tokens, reason), a policy's ``merge`` decision becomes ``contradiction``, the cluster
report lists ``contradictions`` and the summary counts ``contradiction_pairs``;
``memwork defrag supersede`` is the action for them.

With ``since`` (``--since``) a merge plans exactly what a full run plans for the clusters that hold
an entry created or changed since then, and nothing else: such a cluster may hold old entries and
old pairs (A and B alike for long, C new and like both), and its density, contradictions and
survivor depend on all of them, so the search follows found pairs from the changed entries round by
round until it has every pair touching any member (:func:`memwork.defrag.findings.find_duplicates`
with ``clusters``) -- work proportional to the changed entries and their clusters, times the scope.
Its ``pairs`` are the full run's pairs touching a changed entry or a member of a planned cluster.
Clusters of old entries only are left to a full run (an existing stub is still re-pointed when its
target merges here).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Protocol

import numpy as np

from memwork.defrag.calibrate import Policy, check_model, find_policy_pairs
from memwork.defrag.contradictions import Contradiction, detect
from memwork.defrag.findings import (
    EntryReport,
    Pair,
    age_days,
    by_scope,
    changed_since,
    find_duplicates,
    find_related,
    flag_contradictions,
    out_of_range_summary,
    report,
)
from memwork.defrag.merge import choose_survivor
from memwork.defrag.plan import Operation, Plan
from memwork.defrag.review import Pair3, pair_key
from memwork.defrag.review_queue import pair_chars
from memwork.defrag.scores import quality_score
from memwork.entry import Entry, normalize_path
from memwork.errors import InvalidPath, UsageError
from memwork.progress import Progress
from memwork.similarity import cosine, jaccard


@dataclass
class Planned:
    """A plan with what it was based on: the pairs or entries found, and what was skipped and why."""

    plan: Plan
    pairs: list[Pair] = field(default_factory=list)
    entries: list[EntryReport] = field(default_factory=list)
    skipped: list[EntryReport] = field(default_factory=list)
    clusters: list[dict[str, object]] = field(default_factory=list)
    #: figures for the action's summary (e.g. how many vectors were out of their model's range)
    summary: dict[str, int] = field(default_factory=dict)


#: a cluster of found pairs below this density (pairs found / pairs possible) is listed, not merged
DEFAULT_MIN_CLUSTER_DENSITY = 0.7
#: clusters up to this size have every member pair checked for a contradiction; larger ones their links
CONTRADICTION_CHECK_LIMIT = 30


def cluster_contradictions(
    finders: Mapping[str, _UnionFindLike], links: Sequence[Pair3], index: Mapping[tuple[str, str], Entry]
) -> dict[Pair3, Contradiction]:
    """Every possible contradiction inside a cluster (module docstring), keyed by sorted pair."""
    linked = {pair_key(*k) for k in links}
    found: dict[Pair3, Contradiction] = {}
    for scope, finder in finders.items():
        for cluster in finder.groups():
            if len(cluster) <= CONTRADICTION_CHECK_LIMIT:
                keys = [(scope, a, b) for i, a in enumerate(cluster) for b in cluster[i + 1 :]]
            else:
                members = set(cluster)
                keys = sorted(k for k in linked if k[0] == scope and k[1] in members)
            for key in keys:
                a, b = index.get((scope, key[1])), index.get((scope, key[2]))
                if a is None or b is None:
                    continue
                flag = detect(a.content, b.content)
                if flag is not None:
                    found[key] = flag
    return found


def cluster_density(group: Sequence[str], edges: AbstractSet[tuple[str, str]]) -> float:
    """The share of ``group``'s member pairs that are in ``edges`` (``(a, b)`` with ``a < b``)."""
    n = len(group)
    if n < 2:
        return 1.0
    found = sum(1 for i, a in enumerate(group) for b in group[i + 1 :] if (min(a, b), max(a, b)) in edges)
    return found / (n * (n - 1) / 2)


class _UnionFindLike(Protocol):
    def groups(self) -> list[list[str]]: ...


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

    def groups(self) -> list[list[str]]:
        out: dict[str, list[str]] = {}
        for x in self.parent:
            out.setdefault(self.find(x), []).append(x)
        return sorted(sorted(g) for g in out.values() if len(g) > 1)


def _target(stub: Entry) -> str | None:
    try:
        return normalize_path(stub.redirect_to) if stub.redirect_to else None
    except InvalidPath:
        return None


def _final_target(start: str, redirects: dict[str, str]) -> str | None:
    """Follow ``redirects`` from ``start``; None on a cycle."""
    seen = {start}
    current = start
    while current in redirects:
        current = redirects[current]
        if current in seen:
            return None
        seen.add(current)
    return current


def _split_by_rejections(
    scope: str,
    cluster: list[str],
    links: Sequence[Pair3],
    rejected: set[Pair3],
    similarity: Mapping[Pair3, float],
    contradictions: Mapping[Pair3, Contradiction] | None = None,
) -> tuple[list[list[str]], dict[str, object] | None]:
    """Groups of ``cluster`` that hold no rejected (or contradicting) pair, and the report (None when
    nothing was rejected). ``rejected`` includes the keys of ``contradictions``; the report names
    those apart, with their reason."""
    contradictions = contradictions or {}
    members = set(cluster)
    inside = sorted(k for k in rejected if k[0] == scope and k[1] in members and k[2] in members)
    if not inside:
        return [cluster], None
    blocked = {(a, b) for _, a, b in inside} | {(b, a) for _, a, b in inside}
    edges = sorted(
        {pair_key(s, a, b) for s, a, b in links if s == scope and a in members and b in members},
        key=lambda k: (-similarity.get(k, 0.0), k[1], k[2]),
    )
    group_of = {m: frozenset([m]) for m in cluster}
    not_merged: list[list[str]] = []
    for _, a, b in edges:
        ga, gb = group_of[a], group_of[b]
        if ga is gb:
            continue
        if any((x, y) in blocked for x in ga for y in gb):
            not_merged.append([a, b])
            continue
        joined = ga | gb
        for m in joined:
            group_of[m] = joined
    groups = sorted({g for g in group_of.values()}, key=lambda g: sorted(g))
    report: dict[str, object] = {
        "split_from": sorted(cluster),
        "rejected": [[a, b] for s, a, b in inside if (s, a, b) not in contradictions],
        "not_merged": not_merged,
    }
    flagged = [k for k in inside if k in contradictions]
    if flagged:
        report["contradictions"] = [[a, b, contradictions[(s, a, b)].reason] for s, a, b in flagged]
    return [sorted(g) for g in groups], report


def plan_merge_duplicates(
    entries: Sequence[Entry],
    similarity_threshold: float = 0.85,
    strategy: str = "keep_newer",
    *,
    approved: Iterable[tuple[str, str, str]] | None = None,
    rejected: Iterable[tuple[str, str, str]] | None = None,
    policy: Policy | None = None,
    min_cluster_density: float = DEFAULT_MIN_CLUSTER_DENSITY,
    progress: Progress | None = None,
    since: datetime | None = None,
) -> Planned:
    """Merge each cluster of duplicates into one survivor (or only the ``approved`` pairs' clusters).

    ``rejected`` pairs (default: ``approved.rejected`` of a :class:`~memwork.defrag.review.ReviewedPairs`)
    never end up in one group; a cluster holding one is split (module docstring) and its entries in
    ``clusters`` carry ``split_from``, ``rejected`` and ``not_merged``. A split that leaves no group of
    two is reported with ``survivor`` None and nothing merged.

    With a calibrated ``policy`` (:mod:`memwork.defrag.calibrate`) the threshold is unused: the pairs
    are the policy's, and only those at or above its ``auto_merge`` are merged -- plus the ``approved``
    ones; pairs in its review band are listed, never merged.

    A group of three or more whose density (pairs linked / pairs possible) is below
    ``min_cluster_density`` is chained, not alike: it is listed in ``clusters`` with ``review`` true
    and its pairs' ``decision`` becomes ``review``; nothing of it merges (module docstring). Not
    applied when only ``approved`` pairs are merged (a person linked them).

    With ``since`` only the clusters holding an entry changed since then are planned, each exactly
    as a full run plans it (module docstring).
    """
    plan = Plan("merge_duplicates")
    live = by_scope(entries)
    stubs = by_scope(entries, stubs=True)
    similarity: dict[Pair3, float] = dict(getattr(approved, "similarity", {}))
    if policy is not None:
        pairs = policy_pairs(entries, policy, progress=progress, since=since, clusters=True)
        merged = [p for p in pairs if p.decision == "merge"]
        links = [(p.scope, p.path_a, p.path_b) for p in merged] + list(approved or [])
        for p in merged:
            similarity.setdefault(pair_key(p.scope, p.path_a, p.path_b), p.policy_score or 0.0)
    elif approved is None:
        pairs = find_duplicates(
            entries, similarity_threshold, progress=progress, since=since, clusters=since is not None
        )
        links = [(p.scope, p.path_a, p.path_b) for p in pairs]
    else:
        pairs = []
        links = list(approved)
    if since is not None:
        links, pairs = _clusters_since(entries, since, links, pairs)
    if rejected is None:
        rejected = getattr(approved, "rejected", ())
    finders: dict[str, _UnionFind] = {}
    for scope, a, b in links:
        finders.setdefault(scope, _UnionFind()).union(a, b)
    contradicted = cluster_contradictions(finders, links, {e.key: e for e in entries if not e.is_stub})
    refused = {pair_key(*k) for k in rejected} | set(contradicted)
    hold = policy is not None or approved is None
    edges = {pair_key(*k) for k in links}
    held: set[Pair3] = set()
    clusters: list[dict[str, object]] = []
    for scope in sorted(set(live) | set(stubs)):
        index = {e.path: e for e in live.get(scope, [])}
        redirects: dict[str, str] = {}
        for cluster in finders[scope].groups() if scope in finders else []:
            groups, review = _split_by_rejections(scope, cluster, links, refused, similarity, contradicted)
            reported = False
            scope_edges = {(a, b) for s, a, b in edges if s == scope}
            for group in groups:
                members = [index[p] for p in group if p in index]
                if len(members) < 2:
                    continue
                density = cluster_density(group, scope_edges)
                shape = {"size": len(group), "density": round(density, 4)} if hold else {}
                if hold and len(group) >= 3 and density < min_cluster_density:
                    inside = sorted((a, b) for a, b in scope_edges if a in group and b in group)
                    held |= {(scope, a, b) for a, b in inside}
                    clusters.append(
                        {"scope": scope, "survivor": None, "merged": [], "review": True, "chained": group}
                        | shape
                        | {"pairs": [list(k) for k in inside]}
                        | (review or {})
                    )
                    reported = True
                    continue
                reported = True
                survivor = choose_survivor(members, strategy)
                sources = [e for e in members if e.path != survivor.path]
                clusters.append(
                    {"scope": scope, "survivor": survivor.path, "merged": [e.path for e in sources]}
                    | shape
                    | (review or {})
                )
                for source in sources:
                    plan.add(Operation("merge", scope, source.path, survivor.path, strategy))
                for source in sources:
                    plan.add(Operation("stub", scope, source.path, survivor.path))
                    redirects[source.path] = survivor.path
            if review is not None and not reported:
                clusters.append({"scope": scope, "survivor": None, "merged": []} | review)
        # existing stubs: point each straight at the entry it finally resolves to
        old = {s.path: t for s in stubs.get(scope, []) if (t := _target(s)) is not None}
        chain = old | redirects
        for stub in stubs.get(scope, []):
            direct = old.get(stub.path)
            if direct is None:
                continue
            final = _final_target(stub.path, chain)
            if final is not None and final != direct and final in index and final not in redirects:
                plan.add(Operation("repoint", scope, stub.path, final))
    if held:
        pairs = [
            replace(p, decision="review") if pair_key(p.scope, p.path_a, p.path_b) in held else p
            for p in pairs
        ]
    pairs = [_flagged(p, contradicted) for p in pairs]
    found = out_of_range_summary(entries) if approved is None or policy is not None else {}
    chained = sum(1 for c in clusters if c.get("review"))
    if chained:
        found |= {"chained_clusters": chained}
    if contradicted:
        found |= {"contradiction_pairs": len(contradicted)}
    if policy is not None:
        decisions = [p.decision for p in pairs]
        found |= {"auto_merge_pairs": decisions.count("merge"), "review_pairs": decisions.count("review")}
    return Planned(plan, pairs=pairs, clusters=clusters, summary=found)


def policy_pairs(
    entries: Sequence[Entry],
    policy: Policy,
    *,
    progress: Progress | None = None,
    since: datetime | None = None,
    clusters: bool = False,
) -> list[Pair]:
    """:func:`~memwork.defrag.calibrate.find_policy_pairs`, incremental with ``since`` (and following
    clusters with ``clusters``, see :func:`~memwork.defrag.findings.find_duplicates`): the same
    steps on the incremental search, kept here so the calibration module stays as it is."""
    if since is None:
        return find_policy_pairs(entries, policy, progress=progress)
    check_model(policy, entries)
    found = find_duplicates(
        entries, policy.search_floor(), progress=progress, keep=policy.keeps, since=since, clusters=clusters
    )
    if not found:
        return []
    semantic = [math.nan if p.semantic_similarity is None else p.semantic_similarity for p in found]
    chars = pair_chars(found, entries) if policy.uses_char else None
    scores = policy.scores(np.array([p.text_similarity for p in found]), np.array(semantic), chars)
    kept = [
        replace(pair, policy_score=float(score), decision=policy.decide(float(score)), matched_by=())
        for pair, score in zip(found, scores, strict=True)
    ]
    kept = [pair for pair in kept if pair.decision != "distinct"]
    return sorted(kept, key=lambda p: (-(p.policy_score or 0.0), p.scope, p.path_a, p.path_b))


def _clusters_since(
    entries: Sequence[Entry], since: datetime, links: list[Pair3], pairs: list[Pair]
) -> tuple[list[Pair3], list[Pair]]:
    """The links of the clusters holding an entry changed since ``since``, and the pairs touching a
    changed entry or a member of such a cluster (module docstring)."""
    changed = {e.key for group in by_scope(entries).values() for e in group if changed_since(e, since)}
    finders: dict[str, _UnionFind] = {}
    for scope, a, b in links:
        finders.setdefault(scope, _UnionFind()).union(a, b)
    members: set[tuple[str, str]] = set()
    for scope, finder in finders.items():
        roots = {finder.find(p) for s, p in changed if s == scope and p in finder.parent}
        members |= {(scope, x) for x in finder.parent if finder.find(x) in roots}
    kept = [(s, a, b) for s, a, b in links if (s, a) in members]
    touch = members | changed
    shown = [p for p in pairs if (p.scope, p.path_a) in touch or (p.scope, p.path_b) in touch]
    return kept, shown


def _flagged(pair: Pair, contradicted: Mapping[Pair3, Contradiction]) -> Pair:
    """``pair`` with its contradiction, if any; a policy's ``merge`` decision becomes ``contradiction``."""
    flag = contradicted.get(pair_key(pair.scope, pair.path_a, pair.path_b))
    if flag is None:
        return pair
    decision = "contradiction" if pair.decision == "merge" else pair.decision
    return replace(pair, contradiction=flag, decision=decision)


def _given_pair(entries: Sequence[Entry], pair: Sequence[str]) -> Pair:
    """The person-given pair of ``supersede --pair`` as a :class:`Pair` (its contradiction, if any):
    both live entries of one scope, else a usage error naming ``pair``."""
    shown = " ".join(pair)
    a, b = pair
    if a == b:
        raise UsageError("pair", shown, "names the same entry twice")
    live = by_scope(entries)
    scopes = [s for s, group in live.items() if {a, b} <= {e.path for e in group}]
    if not scopes:
        raw = {e.key: e for e in entries}
        for path in (a, b):
            held = [e for (_, p), e in raw.items() if p == path]
            if not held:
                raise UsageError("pair", shown, f"no entry {path!r} (in the scope given)")
            if all(e.is_stub or e.superseded_by for e in held):
                raise UsageError("pair", shown, f"{path!r} is a stub or already superseded")
        raise UsageError("pair", shown, "the two entries are not in one scope (use --scope)")
    if len(scopes) > 1:
        raise UsageError("pair", shown, f"both entries exist in scopes {', '.join(scopes)}; use --scope")
    index = {e.path: e for e in live[scopes[0]]}
    ea, eb = index[min(a, b)], index[max(a, b)]
    text = jaccard(ea.content, eb.content)
    both = ea.embedding is not None and eb.embedding is not None and ea.embedding.shape == eb.embedding.shape
    semantic = cosine(ea.embedding, eb.embedding) if both else None
    return Pair(
        scopes[0], ea.path, eb.path, max(text, semantic or 0.0), text, semantic,
        contradiction=detect(ea.content, eb.content),
    )  # fmt: skip


def plan_supersede(
    entries: Sequence[Entry],
    min_similarity: float = 0.60,
    pair: Sequence[str] | None = None,
    *,
    progress: Progress | None = None,
) -> Planned:
    """Mark the older entry of each possible contradiction superseded by the newer (kept, not deleted).

    The candidate pairs are every same-scope pair with ``max(Jaccard, cosine) >= min_similarity``
    (the duplicate and the related band, by either signal, so a store without vectors is covered),
    flagged by :func:`memwork.defrag.contradictions.detect`; or only ``pair`` (two paths), which a
    person chose, superseded whether or not a rule flags it. Older and newer are by ``updated_at``;
    a pair of the same time is listed, not superseded (``same_time_pairs``). An entry in several
    contradictions is superseded once, by its newest partner; a chain (A by B, B by C) is followed by
    :meth:`~memwork.stores.base.Store.read`.
    """
    plan = Plan("supersede")
    if pair is not None:
        candidates = [_given_pair(entries, pair)]
    else:
        found = find_duplicates(entries, min_similarity, progress=progress)
        candidates = [p for p in flag_contradictions(found, entries) if p.contradiction is not None]
    index = {e.key: e for group in by_scope(entries).values() for e in group}
    chosen: dict[tuple[str, str], tuple[Entry, Pair]] = {}
    same_time = 0
    for p in candidates:
        a, b = index[(p.scope, p.path_a)], index[(p.scope, p.path_b)]
        if a.updated_at == b.updated_at:
            same_time += 1
            continue
        older, newer = (a, b) if a.updated_at < b.updated_at else (b, a)
        held = chosen.get(older.key)
        if held is None or (newer.updated_at, newer.path) > (held[0].updated_at, held[0].path):
            chosen[older.key] = (newer, p)
    for (scope, older_path), (newer, p) in sorted(chosen.items()):
        why = p.contradiction.reason if p.contradiction is not None else "given pair (no rule fired)"
        plan.add(Operation("supersede", scope, older_path, newer.path, reason=why, similarity=p.similarity))
    summary = {"contradiction_pairs": sum(p.contradiction is not None for p in candidates)}
    if same_time:
        summary["same_time_pairs"] = same_time
    return Planned(plan, pairs=candidates, summary=summary)


def plan_link_related(
    entries: Sequence[Entry],
    min_similarity: float = 0.60,
    max_similarity: float = 0.85,
    *,
    progress: Progress | None = None,
) -> Planned:
    """Link every related pair that is not yet linked both ways."""
    plan = Plan("link_related")
    pairs = find_related(entries, min_similarity, max_similarity, progress=progress)
    for pair in pairs:
        if pair.link_status != "bidirectional":
            plan.add(Operation("link", pair.scope, pair.path_a, pair.path_b, similarity=pair.similarity))
    return Planned(plan, pairs=pairs, summary=out_of_range_summary(entries))


def _stub_targets(
    entries: Iterable[Entry], excluding: AbstractSet[tuple[str, str]] = frozenset()
) -> set[tuple[str, str]]:
    return {
        (e.scope, t)
        for e in entries
        if e.is_stub and e.key not in excluding and (t := _target(e)) is not None
    }


def _superseded_targets(entries: Iterable[Entry]) -> set[tuple[str, str]]:
    """The entries a kept superseded entry points at: deleting one would leave that history
    pointing nowhere (and lose the fact that replaced it)."""
    return {(e.scope, normalize_path(t)) for e in entries if (t := e.superseded_by) is not None}


def plan_cleanup_stubs(
    entries: Sequence[Entry], age_days_min: float = 90, max_hits: int = 10, *, now: datetime
) -> Planned:
    """Delete stubs at least ``age_days_min`` old with at most ``max_hits`` hits.

    A stub that a kept stub still redirects to is kept (deleting it would break that redirect).
    """
    plan = Plan("cleanup_stubs")
    stubs = [e for group in by_scope(entries, stubs=True).values() for e in group]
    pinned = _superseded_targets(entries)
    old = {e.key for e in stubs if age_days(e, now) >= age_days_min and e.hits <= max_hits}
    doomed = old - pinned
    while True:
        needed = _stub_targets(stubs, excluding=doomed) & doomed
        if not needed:
            break
        doomed -= needed
    chosen, skipped = [], []
    for stub in stubs:
        if stub.key in doomed:
            chosen.append(report(stub, now))
            plan.add(Operation("delete", stub.scope, stub.path, reason="old, rarely read stub"))
        elif age_days(stub, now) >= age_days_min and stub.hits <= max_hits:
            why = "a superseded entry points here" if stub.key in pinned else "another stub redirects here"
            skipped.append(report(stub, now, note=why))
    return Planned(plan, entries=chosen, skipped=skipped)


def plan_compact(
    entries: Sequence[Entry],
    min_quality_score: float = 20,
    min_age_days: float = 30,
    max_hits: int = 0,
    *,
    now: datetime,
) -> Planned:
    """Delete entries with quality < ``min_quality_score``, age >= ``min_age_days`` and hits <= ``max_hits``.

    Stubs are never compacted, and an entry a stub redirects to is kept (run cleanup_stubs first), as
    is one that supersedes a kept older entry (``supersede``: it is the fact that replaced it).
    """
    plan = Plan("compact")
    targets = _stub_targets(entries)
    newer = _superseded_targets(entries)
    chosen, skipped = [], []
    for group in by_scope(entries).values():
        for entry in group:
            if not (
                quality_score(entry.metadata) < min_quality_score
                and age_days(entry, now) >= min_age_days
                and entry.hits <= max_hits
            ):
                continue
            if entry.key in targets or entry.key in newer:
                why = "a stub redirects here" if entry.key in targets else "it supersedes an older entry"
                skipped.append(report(entry, now, note=why))
                continue
            chosen.append(report(entry, now))
            plan.add(Operation("delete", entry.scope, entry.path, reason="low quality, old, unread"))
    return Planned(plan, entries=chosen, skipped=skipped)
