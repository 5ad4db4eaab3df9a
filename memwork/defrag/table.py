"""The defrag actions, each declared once: name, help, parameters, read-only or not, and how it runs.

:func:`~memwork.defrag.actions.run_action` dispatches through :data:`ACTIONS`, and ``memwork defrag``
generates one command per action with only that action's options. A read-only action has ``find``
(entries -> :class:`Found`); a modifying action has ``plan`` (entries -> :class:`Planned`); a composite
one (``full``) has ``steps``: registered planners run in order, each on the state the previous one
leaves, its parameters derived from theirs. Adding an action is one :func:`register` call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from memwork.defrag import findings
from memwork.defrag import params as p
from memwork.defrag.calibrate import load_policy
from memwork.defrag.params import Param
from memwork.defrag.planners import (
    Planned,
    plan_cleanup_stubs,
    plan_compact,
    plan_link_related,
    plan_merge_duplicates,
    plan_supersede,
    policy_pairs,
)
from memwork.defrag.review import Pair3
from memwork.defrag.since import Since, resolve_since
from memwork.entry import Entry
from memwork.errors import UsageError
from memwork.progress import Progress

if TYPE_CHECKING:
    from memwork.stores.base import Store


@dataclass(frozen=True)
class Context:
    """What an action may use besides its parameters: the clock, progress and approved pairs."""

    now: datetime
    progress: Progress | None = None
    approved: list[Pair3] | None = None


@dataclass
class Found:
    """A read-only action's answer: its summary and the pairs or entries it found."""

    summary: dict[str, Any]
    pairs: list[findings.Pair] = field(default_factory=list)
    entries: list[findings.EntryReport] = field(default_factory=list)


Finder = Callable[[list[Entry], dict[str, Any], Context], Found]
#: the same finder on one tile of a scope's pair matrix (:mod:`memwork.defrag.partitioned`)
TileFinder = Callable[[findings.Tile, dict[str, Any], Context], Found]
#: a finder that reads the store itself (never loading it whole): ``(store, scope, params, context)``
StoreFinder = Callable[["Store", str | None, dict[str, Any], Context], Found]
Planner = Callable[[list[Entry], dict[str, Any], Context], Planned]


@dataclass(frozen=True)
class Step:
    """One planner of a composite action; ``rename`` maps its parameter names to the composite's,
    ``fixed`` holds the ones the composite does not offer (the step always runs with that value)."""

    action: str
    rename: Mapping[str, str] = field(default_factory=dict)
    fixed: Mapping[str, Any] = field(default_factory=dict)

    def name_of(self, param: str) -> str:
        return self.rename.get(param, param)

    def params_of(self, composite: Mapping[str, Any], names: Iterable[str]) -> dict[str, Any]:
        """The step's parameters (``names``) taken from the composite's checked ``composite`` ones."""
        return {n: self.fixed[n] if n in self.fixed else composite[self.name_of(n)] for n in names}


@dataclass(frozen=True)
class Action:
    """One defrag action. ``params`` keeps the order of the ``--json`` ``params`` object."""

    name: str
    help: str
    params: Mapping[str, Param]
    read_only: bool
    find: Finder | None = None
    plan: Planner | None = None
    steps: tuple[Step, ...] = ()
    #: the lists (``pairs``, ``entries``) its JSON always carries, even when empty
    lists: tuple[str, ...] = ()
    #: its plan can rewrite content, so it takes ``--embedder``
    reembeds: bool = False
    #: a check across parameters, after each one is checked
    check: Callable[[dict[str, Any]], None] | None = None
    #: its ``find`` on one tile of a scope (the merged tiles give ``find``'s pairs and summary)
    tiled: TileFinder | None = None
    #: used instead of ``find`` when ``candidates`` is not ``exact``: reads the store in batches
    find_in_store: StoreFinder | None = None

    def reads_store(self, params: Mapping[str, Any]) -> bool:
        """Whether these (checked) parameters run :attr:`find_in_store` instead of loading entries."""
        return self.find_in_store is not None and params.get("candidates", "exact") != "exact"

    @property
    def cli_name(self) -> str:
        return self.name.replace("_", "-")

    def defaults(self) -> dict[str, Any]:
        return {name: param.default for name, param in self.params.items()}

    def validate(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Defaults merged with ``given``, each checked; an unknown parameter names the ones accepted.

        ``None`` for a parameter whose default is not ``None`` means "not given" (the CLI's unset option).
        """
        out = self.defaults()
        for raw_name, value in given.items():
            name = ALIASES.get(raw_name, raw_name)
            if name not in self.params:
                accepted = ", ".join(self.params) or "none"
                raise UsageError(name, value, f"not a parameter of {self.name} (accepts: {accepted})")
            if value is None and self.params[name].default is not None:
                continue
            out[name] = value
        for name, value in out.items():
            out[name] = self.params[name].check(name, value)
        if self.check is not None:
            self.check(out)
        return out


#: every action by name: the read-only ones first, then the planners, then ``full``
ACTIONS: dict[str, Action] = {}
#: alias -> parameter name, over every registered action
ALIASES: dict[str, str] = {}


def register(action: Action) -> Action:
    """Add ``action``; a second action of the same name, or a step that is not a planner, is refused."""
    if action.name in ACTIONS:
        raise ValueError(f"defrag action {action.name!r} is already registered")
    runs = (action.find is not None, action.plan is not None, bool(action.steps))
    if runs not in (
        {(True, False, False)} if action.read_only else {(False, True, False), (False, False, True)}
    ):
        raise ValueError(f"{action.name}: a read-only action has find, a modifying one plan or steps")
    for step in action.steps:
        if step.action not in ACTIONS or ACTIONS[step.action].plan is None:
            raise ValueError(f"{action.name}: step {step.action!r} is not a registered planner")
    ACTIONS[action.name] = action
    for name, param in action.params.items():
        for alias in param.aliases:
            ALIASES[alias] = name
    return action


def composite(name: str, help: str, steps: tuple[Step, ...], helps: Mapping[str, str]) -> Action:
    """An action running ``steps`` in order; its parameters are theirs, renamed (``helps`` by new name)."""
    params: dict[str, Param] = {}
    for step in steps:
        if unknown := set(step.fixed) - set(ACTIONS[step.action].params):
            raise ValueError(f"{name}: step {step.action!r} has no parameter {sorted(unknown)} to fix")
        for param_name, param in ACTIONS[step.action].params.items():
            if param_name in step.fixed:
                continue
            new = step.name_of(param_name)
            if new in params:
                raise ValueError(f"{name}: two steps take {new!r}; rename one")
            params[new] = param.but(help=helps[new]) if new in helps else param
    return Action(
        name,
        help,
        params,
        read_only=False,
        steps=steps,
        reembeds=any(ACTIONS[s.action].reembeds for s in steps),
    )


def normalize_action(action: str) -> str:
    """``find-duplicates`` and ``find_duplicates`` are the same action; anything else is a usage error."""
    name = str(action).strip().lower().replace("-", "_")
    if name not in ACTIONS:
        raise UsageError("action", action, f"unknown action; known: {', '.join(ACTIONS)}")
    return name


def lookup(action: str) -> Action:
    """The registered action of that name (either spelling)."""
    return ACTIONS[normalize_action(action)]


def validate_params(action: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """``action``'s defaults merged with ``params``, each checked (see :meth:`Action.validate`)."""
    return lookup(action).validate(params)


# ---- the read-only actions -----------------------------------------------------------------------------
def _since(q: dict[str, Any]) -> Since | None:
    """The resolved ``--since`` of the parameters, None without one."""
    return resolve_since(q["since"]) if q.get("since") else None


def since_summary(since: Since | None, entries: list[Entry]) -> dict[str, Any]:
    """``{"since": {...}, "changed_entries": n}`` for an incremental run's summary, else nothing."""
    if since is None:
        return {}
    live = (e for e in entries if not e.is_stub and e.superseded_by is None)  # what by_scope compares
    changed = sum(findings.changed_since(e, since.at) for e in live)
    return {"since": since.to_dict(), "changed_entries": changed}


def _analyze(entries: list[Entry], _: dict[str, Any], ctx: Context) -> Found:
    return Found(findings.analyze(entries))


def _find_duplicates(entries: list[Entry], q: dict[str, Any], ctx: Context) -> Found:
    """Every pair marked with its kind (exact / normalised / similar) and any possible contradiction
    (never merged: a policy's ``merge`` decision becomes ``contradiction``)."""
    since = _since(q)
    at = since.at if since is not None else None
    if q.get("policy"):
        pairs = policy_pairs(entries, load_policy(q["policy"]), progress=ctx.progress, since=at)
    else:
        pairs = findings.find_duplicates(entries, q["similarity_threshold"], progress=ctx.progress, since=at)
    return _duplicates_found(pairs, entries, entries, q, since)


def _tile_duplicates(tile: findings.Tile, q: dict[str, Any], ctx: Context) -> Found:
    """:func:`_find_duplicates` on one tile (no policy, no ``since``: those run in one piece)."""
    pairs = findings.tile_duplicates(tile, q["similarity_threshold"])
    return _duplicates_found(pairs, tile.group, tile.counted, q, None)


def _duplicates_found(
    pairs: list[findings.Pair],
    entries: list[Entry],
    counted: list[Entry],
    q: dict[str, Any],
    since: Since | None,
) -> Found:
    """The pairs flagged and counted: ``entries`` hold both sides of every pair, ``counted`` are
    the entries the summary counts (a tile counts each entry of its scope once over all tiles)."""
    pairs = [
        replace(p, decision="contradiction") if p.contradiction is not None and p.decision == "merge" else p
        for p in findings.flag_contradictions(pairs, entries)
    ]
    decisions: dict[str, int] = {}
    if q.get("policy"):
        decisions = {"auto_merge_pairs": sum(p.decision == "merge" for p in pairs)}
        decisions["review_pairs"] = sum(p.decision == "review" for p in pairs)
    kinds = {f"{k}_pairs": n for k in ("exact", "normalised") if (n := sum(p.kind == k for p in pairs))}
    flagged = sum(p.contradiction is not None for p in pairs)
    counts = {"pairs": len(pairs)} | kinds | ({"contradiction_pairs": flagged} if flagged else {})
    summary = counts | decisions | findings.out_of_range_summary(counted) | since_summary(since, counted)
    return Found(summary, pairs=pairs)


def _find_related(entries: list[Entry], q: dict[str, Any], ctx: Context) -> Found:
    since = _since(q)
    pairs = findings.find_related(
        entries,
        q["min_similarity"],
        q["max_similarity"],
        progress=ctx.progress,
        since=since.at if since is not None else None,
    )
    return _related_found(pairs, entries, entries, since)


def _tile_related(tile: findings.Tile, q: dict[str, Any], ctx: Context) -> Found:
    """:func:`_find_related` on one tile (no ``since``: an incremental run runs in one piece)."""
    pairs = findings.tile_related(tile, q["min_similarity"], q["max_similarity"])
    return _related_found(pairs, tile.group, tile.counted, None)


def _related_found(
    pairs: list[findings.Pair], entries: list[Entry], counted: list[Entry], since: Since | None
) -> Found:
    """The pairs flagged and counted (``entries`` and ``counted`` as for :func:`_duplicates_found`)."""
    pairs = findings.flag_contradictions(pairs, entries)  # a related pair may contradict too
    status = [pair.link_status for pair in pairs]
    counts = {s: status.count(s) for s in ("unlinked", "one-way", "bidirectional")}
    summary = {"pairs": len(status)} | counts | findings.out_of_range_summary(counted)
    return Found(summary | since_summary(since, counted), pairs=pairs)


def _approximate_check(params: dict[str, Any]) -> None:
    """``--candidates hnsw`` takes its knobs and no ``--policy``/``--since``; ``exact`` takes no knob."""
    knobs = {name: params[name] for name in p.APPROXIMATE if params.get(name) is not None}
    if params["candidates"] == "exact":
        for name, value in knobs.items():
            raise UsageError(name, value, "only with --candidates hnsw")
        return
    for name in ("policy", "since"):
        if params.get(name):
            raise UsageError(name, params[name], "not with --candidates hnsw (exact candidates only)")
    from memwork.defrag.approximate import settings

    settings(params["k"], params["ef_search"], params["recall_sample"], params["exact_upto"])


def _approximate_summary(run: Any) -> dict[str, Any]:
    """``recall_estimate`` and its sample first, then how the run found its candidates."""
    recall = run.recall.to_dict()
    return {"recall_estimate": recall.pop("recall_estimate"), "recall_check": recall} | run.summary


def _options(q: dict[str, Any]) -> Any:
    from memwork.defrag.approximate import settings

    return settings(q["k"], q["ef_search"], q["recall_sample"], q["exact_upto"])


def _duplicates_in_store(store: Store, scope: str | None, q: dict[str, Any], ctx: Context) -> Found:
    """``find_duplicates --candidates hnsw``: candidates from the store's HNSW index, verified exactly
    (contradictions marked there, from the texts read with each batch)."""
    from memwork.defrag.approximate import find_duplicates_hnsw

    run = find_duplicates_hnsw(
        store, q["similarity_threshold"], scope=scope, options=_options(q), progress=ctx.progress
    )
    pairs = run.pairs
    kinds = {f"{k}_pairs": n for k in ("exact", "normalised") if (n := sum(p.kind == k for p in pairs))}
    flagged = sum(p.contradiction is not None for p in pairs)
    counts = {"pairs": len(pairs)} | kinds | ({"contradiction_pairs": flagged} if flagged else {})
    return Found(counts | _approximate_summary(run), pairs=pairs)


def _related_in_store(store: Store, scope: str | None, q: dict[str, Any], ctx: Context) -> Found:
    """``find_related --candidates hnsw`` (see :func:`_duplicates_in_store`)."""
    from memwork.defrag.approximate import find_related_hnsw

    run = find_related_hnsw(
        store,
        q["min_similarity"],
        q["max_similarity"],
        scope=scope,
        options=_options(q),
        progress=ctx.progress,
    )
    status = [pair.link_status for pair in run.pairs]
    counts = {s: status.count(s) for s in ("unlinked", "one-way", "bidirectional")}
    return Found({"pairs": len(status)} | counts | _approximate_summary(run), pairs=run.pairs)


def _find_low_quality(entries: list[Entry], q: dict[str, Any], ctx: Context) -> Found:
    found = findings.find_low_quality(entries, q["confidence_filter"], now=ctx.now)
    return Found({"entries": len(found)}, entries=found)


def _find_archival(entries: list[Entry], q: dict[str, Any], ctx: Context) -> Found:
    found = findings.find_archival_candidates(entries, q["age_days"], now=ctx.now)
    return Found({"entries": len(found)}, entries=found)


# ---- the planners --------------------------------------------------------------------------------------
def _merge(entries: list[Entry], q: dict[str, Any], ctx: Context) -> Planned:
    since = _since(q)
    planned = plan_merge_duplicates(
        entries,
        q["similarity_threshold"],
        q["strategy"],
        approved=ctx.approved,
        policy=load_policy(q["policy"]) if q.get("policy") else None,
        min_cluster_density=q["min_cluster_density"],
        progress=ctx.progress,
        since=since.at if since is not None else None,
    )
    planned.summary |= since_summary(since, entries)
    return planned


def _supersede(entries: list[Entry], q: dict[str, Any], ctx: Context) -> Planned:
    return plan_supersede(entries, q["min_similarity"], q["pair"], progress=ctx.progress)


def _link(entries: list[Entry], q: dict[str, Any], ctx: Context) -> Planned:
    return plan_link_related(entries, q["min_similarity"], q["max_similarity"], progress=ctx.progress)


def _cleanup(entries: list[Entry], q: dict[str, Any], ctx: Context) -> Planned:
    return plan_cleanup_stubs(entries, q["age_days"], q["max_hits"], now=ctx.now)


def _compact(entries: list[Entry], q: dict[str, Any], ctx: Context) -> Planned:
    return plan_compact(entries, q["min_quality_score"], q["min_age_days"], q["max_hits"], now=ctx.now)


_RELATED = {"min_similarity": p.MIN_SIMILARITY, "max_similarity": p.MAX_SIMILARITY}
_RELATED_SINCE = _RELATED | {"since": p.SINCE}
_related_order = p.ordered("min_similarity", "max_similarity")


def _related_checks(params: dict[str, Any]) -> None:
    _related_order(params)
    _approximate_check(params)


register(
    Action(
        "analyze",
        "Health score (0-100, with its band) and metadata, tag, link and embedding coverage.",
        {},
        read_only=True,
        find=_analyze,
    )
)
register(
    Action(
        "find_duplicates",
        "Pairs with max(Jaccard, cosine) >= --similarity-threshold (default 0.85), or a policy's pairs; "
        "exact / normalised copies first (no vectors needed), possible contradictions marked.",
        {
            "similarity_threshold": p.SIMILARITY_THRESHOLD,
            "policy": p.POLICY,
            "since": p.SINCE,
            "candidates": p.CANDIDATES,
        }
        | p.APPROXIMATE,
        read_only=True,
        find=_find_duplicates,
        lists=("pairs",),
        tiled=_tile_duplicates,
        check=_approximate_check,
        find_in_store=_duplicates_in_store,
    )
)
register(
    Action(
        "find_low_quality",
        "Entries with quality issues (no metadata/tags/links/embedding, low confidence).",
        {"confidence_filter": p.CONFIDENCE_FILTER},
        read_only=True,
        find=_find_low_quality,
        lists=("entries",),
    )
)
register(
    Action(
        "find_archival_candidates",
        "Entries not updated for --age-days (default 90).",
        {"age_days": p.AGE_DAYS},
        read_only=True,
        find=_find_archival,
        lists=("entries",),
    )
)
register(
    Action(
        "find_related",
        "Pairs with min <= cosine < max similarity (0.60..0.85) and their link status.",
        _RELATED_SINCE | {"candidates": p.CANDIDATES} | p.APPROXIMATE,
        read_only=True,
        find=_find_related,
        lists=("pairs",),
        check=_related_checks,
        tiled=_tile_related,
        find_in_store=_related_in_store,
    )
)
register(
    Action(
        "link_related",
        "Link related pairs both ways (memory://path in metadata.related).",
        _RELATED,
        read_only=False,
        plan=_link,
        lists=("pairs",),
        check=_related_order,
    )
)
register(
    Action(
        "merge_duplicates",
        "Merge duplicate clusters into one survivor each, leaving redirect stubs.",
        {
            "similarity_threshold": p.SIMILARITY_THRESHOLD,
            "strategy": p.STRATEGY,
            "approved": p.APPROVED,
            "policy": p.POLICY,
            "min_cluster_density": p.MIN_CLUSTER_DENSITY,
            "since": p.SINCE,
        },
        read_only=False,
        plan=_merge,
        lists=("pairs",),
        reembeds=True,
    )
)
register(
    Action(
        "supersede",
        "Mark the older entry of each possible contradiction superseded by the newer (kept, undoable).",
        {"min_similarity": p.CONTRADICTION_FLOOR, "pair": p.PAIR},
        read_only=False,
        plan=_supersede,
        lists=("pairs",),
    )
)
register(
    Action(
        "cleanup_stubs",
        "Delete stubs older than --age-days (90) with at most --max-hits (10) hits.",
        {"age_days": p.AGE_DAYS, "max_hits": p.MAX_HITS},
        read_only=False,
        plan=_cleanup,
        lists=("entries",),
    )
)
register(
    Action(
        "compact",
        "Delete entries with quality < 20, age >= 30 days and hits <= 0 (all adjustable).",
        {
            "min_quality_score": p.MIN_QUALITY_SCORE,
            "min_age_days": p.MIN_AGE_DAYS,
            "max_hits": p.MAX_HITS.but(default=0),
        },
        read_only=False,
        plan=_compact,
        lists=("entries",),
    )
)
register(
    composite(
        "full",
        "merge-duplicates, then supersede (possible contradictions: the older fact superseded by the "
        "newer, kept), then cleanup-stubs, then compact; health before and after.",
        (
            Step("merge_duplicates"),
            Step("supersede", {"min_similarity": "contradiction_floor"}, fixed={"pair": None}),
            Step("cleanup_stubs"),
            Step("compact", {"max_hits": "compact_max_hits"}),
        ),
        helps={
            "compact_max_hits": "full: compact's --max-hits.",
            "contradiction_floor": "full: supersede's --min-similarity (lowest max(Jaccard, cosine) of "
            "a possible contradiction), 0..1.",
        },
    )
)

#: every action's default parameters (derived from :data:`ACTIONS`)
DEFAULTS: dict[str, dict[str, Any]] = {name: action.defaults() for name, action in ACTIONS.items()}
