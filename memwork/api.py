"""memwork's Python API: the verbs a notebook user reaches for, with one calling convention.

.. code-block:: python

    import memwork

    store = memwork.open_store("sqlite:///memory.db")
    memwork.health_report(store).headline()
    memwork.duplicates(store, scope="alice")                            # pairs as a DataFrame
    memwork.duplicates(store, scope="alice", similarity_threshold=0.7)  # another threshold
    plan = memwork.preview_merge(store, scope="alice")                  # a dry run: plan + changes
    memwork.run_action(store, "merge_duplicates", scope="alice", apply=True)

The convention, for every verb:

* the first (positional) argument is what the verb works on: a store (a spec -- ``./memory``,
  ``sqlite:///file.db``, ``pg://embedded`` -- or a :class:`~memwork.stores.base.Store` from
  :func:`open_store`), a source (a registry name such as ``qdrant``, ``module:PATH``, or a
  :class:`~memwork.contracts.Source`), a report's name or a user id;
* every other argument is keyword-only and named like the command-line option that means the same
  (``scope`` is ``--scope``, ``similarity_threshold`` ``--similarity-threshold``, ``to`` ``--to``,
  ``apply`` ``--apply``); an option left at None takes the command's default;
* a verb that changes something is a dry run unless ``apply=True``: the dry run returns the plan, and
  applying executes exactly that plan (journaled, so ``memwork defrag undo RUN_ID`` reverts it);
* the destination PostgreSQL is ``to`` everywhere (``--to`` on the command line; unset, it is
  ``MEMORY_PGVECTOR_DATABASE_URL``, else the embedded server ``pg://embedded``);
* results are the library's own objects; their ``.to_dict()`` is the command's ``--json``.

A spec is opened and closed by the call; a Store you opened stays open until you close it (or use it
in a ``with`` block). The option dataclasses behind these verbs (``ImportOptions``, ...) stay
available for everything the verbs leave out.

This module imports each feature only when its verb is called, so ``import memwork`` stays light.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from memwork.certify import Certificate
    from memwork.contracts import Source
    from memwork.defrag.actions import ActionResult
    from memwork.defrag.findings import Pair
    from memwork.defrag.report import DuplicateReview, HealthReport
    from memwork.embed import Embedder
    from memwork.entry import Entry
    from memwork.facade.facade import MemoryFacade
    from memwork.migrate.run import MigrationReport
    from memwork.reports.runner import ReportRun
    from memwork.stores.base import Store

__all__ = [
    "MemoryFacade",
    "duplicate_review",
    "duplicates",
    "facade_from_env",  # noqa: F822 - served by __getattr__ from the facade, like MemoryFacade
    "health_report",
    "import_source",
    "list_entries",
    "open_store",
    "preview_merge",
    "read_entry",
    "related",
    "run_action",
    "run_report",
    "sample_store",
    "undo",
    "user_memories",
    "verify_import",
]

#: the columns of :func:`duplicates` and :func:`related`, in order (``link_status``: related pairs only)
PAIR_COLUMNS = (
    "scope",
    "path_a",
    "path_b",
    "similarity",
    "text_similarity",
    "semantic_similarity",
    "matched_by",
    "kind",
    "contradiction",
    "link_status",
    "title_a",
    "title_b",
    "content_a",
    "content_b",
)


def _given(**options: Any) -> dict[str, Any]:
    """The options the caller set: None means "the command's default", which the library applies."""
    return {name: value for name, value in options.items() if value is not None}


# ---- stores and defrag -------------------------------------------------------------------------------
def open_store(store: str, *, create: bool = False) -> Store:
    """The store a spec names (directory, ``sqlite:///file.db``, ``postgresql://...``,
    ``pg://embedded[/NAME]``); a missing one is an error unless ``create``. Close it when done, or
    use ``with memwork.open_store(...) as store:``."""
    from memwork.stores import open_store as open_spec

    return open_spec(store, create=create)


def read_entry(store: str | Store, path: str, *, scope: str | None = None, history: bool = False) -> Entry:
    """The entry at ``path`` as a user reads it (``memwork store read``): a stub followed to its
    target, a superseded entry (``defrag supersede``) to the newer one that replaced it -- or with
    ``history`` the superseded entry itself, ``superseded_by`` and ``valid_until`` in its metadata.
    ``scope`` defaults to ``default``; counts no hit."""
    from memwork.entry import DEFAULT_SCOPE
    from memwork.stores import opened_store

    with opened_store(store) as opened:
        return opened.read(path, scope=scope or DEFAULT_SCOPE, count_hit=False, history=history)


def list_entries(
    store: str | Store, *, scope: str | None = None, prefix: str | None = None, history: bool = False
) -> pd.DataFrame:
    """The entries (``memwork store list``), stubs included, as a DataFrame (scope, path, title, size,
    updated_at, stub, superseded_by, valid_until); superseded entries only with ``history``."""
    import pandas as pd

    from memwork.stores import opened_store
    from memwork.stores.transfer import list_view

    with opened_store(store) as opened:
        rows = list_view(opened, scope=scope, prefix=prefix, history=history)
    columns = ["scope", "path", "title", "size", "updated_at", "stub", "superseded_by", "valid_until"]
    return pd.DataFrame(rows, columns=columns)


def sample_store(n: int = 400, *, embedder: str = "minilm", seed: int = 11) -> str:
    """A generated SQLite store (scopes alice, bob, ops) in a temporary folder removed when this
    process exits, for trying things out; returns its spec. ``embedder="hash:384"`` builds it faster,
    with vectors that only match exact text."""
    from memwork.samples.store import sample_store as build

    return build(n, seed=seed, embedder=embedder)


def health_report(
    store: str | Store,
    *,
    scope: str | None = None,
    age_days: int = 90,
    min_score: int = 0,
    previous_summary: str = "",
) -> HealthReport:
    """Health score and band, coverage, low-quality entries, archival candidates and stubs of one
    store (or one ``scope``) -- what the ``health_report`` notebook shows. ``.headline()`` is one
    line, ``.frames()`` the tables; FAIL when the score is below ``min_score``."""
    from memwork.defrag.report import health_report as report

    return report(store, scope, age_days=age_days, min_score=min_score, previous_summary=previous_summary)


def duplicates(
    store: str | Store, *, scope: str | None = None, similarity_threshold: float | None = None
) -> pd.DataFrame:
    """Duplicate pairs (``max(Jaccard, cosine) >= similarity_threshold``, default 0.85) of one scope or
    every scope, most similar first, as a DataFrame with both entries' titles and contents: the
    ``find_duplicates`` action, to browse. Call it again with another threshold to compare."""
    return _pairs(store, "find_duplicates", scope, _given(similarity_threshold=similarity_threshold))


def related(
    store: str | Store,
    *,
    scope: str | None = None,
    min_similarity: float | None = None,
    max_similarity: float | None = None,
) -> pd.DataFrame:
    """Related pairs (``min_similarity <= cosine < max_similarity``, default 0.60..0.85) and whether
    they are linked (``link_status``), as a DataFrame like :func:`duplicates`'s."""
    params = _given(min_similarity=min_similarity, max_similarity=max_similarity)
    return _pairs(store, "find_related", scope, params)


def _pairs(store: str | Store, action: str, scope: str | None, params: dict[str, Any]) -> pd.DataFrame:
    from memwork.defrag.actions import run_action as run
    from memwork.stores import opened_store

    with opened_store(store) as opened:
        found = run(opened, action, scope=scope, **params)
        return pairs_frame(found.pairs, opened)


def pairs_frame(pairs: list[Pair], store: Store | None = None) -> pd.DataFrame:
    """``pairs`` as a DataFrame, most similar first (columns :data:`PAIR_COLUMNS`; ``link_status``
    only for related pairs; ``kind`` exact / normalised / similar, ``contradiction`` its reason or
    None). With ``store``, each entry's title and content are read into the table
    (without counting a hit); without it those columns are left out."""
    import pandas as pd

    columns = [
        c
        for c in PAIR_COLUMNS
        if (c != "link_status" or any(p.link_status is not None for p in pairs))
        and (store is not None or not c.startswith(("title_", "content_")))
    ]
    rows = []
    for pair in sorted(pairs, key=lambda p: (-p.similarity, p.scope, p.path_a, p.path_b)):
        row = pair.to_dict() | {"matched_by": " + ".join(pair.matched_by)}
        row["contradiction"] = pair.contradiction.reason if pair.contradiction is not None else None
        if store is not None:
            for side, path in (("a", pair.path_a), ("b", pair.path_b)):
                entry = store.get(path, scope=pair.scope)
                row[f"title_{side}"] = entry.title if entry else None
                row[f"content_{side}"] = entry.content if entry else None
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)


def preview_merge(
    store: str | Store,
    *,
    scope: str | None = None,
    similarity_threshold: float | None = None,
    strategy: str | None = None,
    approved: str | None = None,
) -> ActionResult:
    """What ``merge_duplicates`` would do, without doing it: the pairs, the plan (``.plan``; one
    merge and one redirect stub per duplicate) and the predicted changes. ``.frame("operations")``
    shows it as a table; ``run_action(store, "merge_duplicates", ..., apply=True)`` executes it.
    ``approved``: a review CSV (see :func:`duplicate_review`) -- only its approved pairs merge."""
    params = _given(similarity_threshold=similarity_threshold, strategy=strategy, approved=approved)
    return run_action(store, "merge_duplicates", scope=scope, **params)


def run_action(
    store: str | Store, action: str, *, scope: str | None = None, apply: bool = False, **params: Any
) -> ActionResult:
    """One defrag action (``analyze``, ``find_duplicates``, ..., ``merge_duplicates``, ``full``; see
    ``memwork defrag --help``), its options as keywords. A modifying action is a dry run (the plan)
    unless ``apply``; applied, ``.run_id`` names the journaled run that :func:`undo` reverts."""
    from memwork.defrag.actions import run_action as run
    from memwork.stores import opened_store

    with opened_store(store) as opened:
        return run(opened, action, scope=scope, apply=apply, **params)


def undo(store: str | Store, run_id: str, *, force: bool = False) -> dict[str, Any]:
    """Revert an applied run (``memwork defrag undo``): every entry it touched gets its image from
    before the run. Refused when an entry changed since, unless ``force``. The answer is the
    command's ``--json``: ``{"undone", "run_id" (the undo's own run), "changes"}``."""
    from memwork.defrag.journal import undo as revert
    from memwork.stores import opened_store

    with opened_store(store) as opened:
        new_run, changes = revert(run_id, opened, force=force)
    return {"undone": run_id, "run_id": new_run, "changes": [c.to_dict() for c in changes]}


def duplicate_review(
    store: str | Store,
    *,
    scope: str | None = None,
    similarity_threshold: float = 0.85,
    strategy: str = "keep_newer",
    review_file: str = "",
    labels: str = "",
    policy: str = "",
    sample_pairs: int = 50_000,
    max_entries: int = 50_000,
    seed: int = 0,
) -> DuplicateReview:
    """The duplicate review: pairs, a stated sample of the pairs below the duplicate band, the dry-run
    merge plan (the ``policy``'s, or the one calibrated from ``labels``) and a review CSV
    (``review_file``) with a decision column; ``preview_merge(store, approved=review_file)`` then
    plans only the approved pairs. A store of more than ``max_entries`` entries (0: no limit) is
    reviewed on a stated, ``seed``-ed sample of its scopes, its estimates weighted to the whole store
    (``review.scope_text()``); the review CSV then lists the sampled scopes' pairs only."""
    from memwork.defrag.report import duplicate_review as review

    return review(
        store, scope, threshold=similarity_threshold, strategy=strategy, review_file=review_file,
        labels=labels, policy=policy, sample_pairs=sample_pairs, max_entries=max_entries, seed=seed,
    )  # fmt: skip


# ---- migration into pgvector -------------------------------------------------------------------------
def import_source(
    source: str | Source,
    *,
    to: str | None = None,
    apply: bool = False,
    resume: bool = False,
    table: str | None = None,
    page_size: int | None = None,
    limit: int | None = None,
    vectors: str | None = None,
    embedder: Embedder | str | None = None,
    create_schema: bool = False,
    env: Mapping[str, str] | None = None,
) -> MigrationReport:
    """Every memory of ``source`` into pgvector at ``to`` (``memwork import --from SOURCE``).

    A dry run reads the source to the end and counts (users, models, dimensions, a sample) without
    opening PostgreSQL; ``apply`` writes page by page with a checkpoint, idempotently, and ``resume``
    continues a stopped run. ``env`` holds the source's variables (``MEMORY_QDRANT_URL``, ...) on top
    of ``os.environ``."""
    options = _given(table=table, page_size=page_size, limit=limit, vectors=vectors, embedder=embedder)
    return _run_import(
        source, to=to, env=env, apply=apply, resume=resume, create_schema=create_schema, **options
    )


def verify_import(
    source: str | Source,
    *,
    to: str | None = None,
    table: str | None = None,
    page_size: int | None = None,
    allow_quarantined: bool = False,
    executor: str | None = None,
    workers: int | None = None,
    env: Mapping[str, str] | None = None,
) -> Certificate:
    """Is the copy at ``to`` faithful to ``source``? (``memwork verify``): the migration certificate --
    each bad row by id, kind, user and field, vectors against their model or the source's, the index,
    retrieval per user size; ``.verdict`` is PASS or FAIL and ``.reasons()`` says why, gate by gate.
    ``executor`` / ``workers`` (legacy-mysql): the row checksums as key ranges of users on
    ``local:N`` or ``dask://HOST:PORT`` -- the same certificate."""
    options = _given(table=table, page_size=page_size, executor=executor, workers=workers)
    return _run_verify(source, to=to, env=env, allow_quarantined=allow_quarantined, **options)


def _run_import(
    source: str | Source, *, to: str | None, env: Mapping[str, str] | None, **options: Any
) -> MigrationReport:
    """The one call into :mod:`memwork.migrate` for an import (re-point it here if that entry moves)."""
    from memwork.migrate.run import ImportOptions, environment, run_import

    return run_import(ImportOptions(source=source, env=environment(env), database_url=to, **options))


def _run_verify(
    source: str | Source, *, to: str | None, env: Mapping[str, str] | None, **options: Any
) -> Certificate:
    """The one call into :mod:`memwork.certify` for a verification (re-point it here if it moves)."""
    from memwork.certify import CertifyOptions, certify
    from memwork.migrate.run import environment

    return certify(CertifyOptions(dest_url=to, source=source, env=environment(env), **options))


# ---- reports -----------------------------------------------------------------------------------------
def run_report(
    name: str, /, *, out_dir: str | None = None, show_code: bool = False, **params: Any
) -> ReportRun:
    """Run report ``name`` (``health_report``, ``duplicate_review``, ...; ``memwork report list``) with
    its parameters as keywords -- ``memwork report run NAME -p KEY VALUE``. The run folder
    (``.run_dir``) holds the executed notebook, the HTML, ``summary.json`` and a manifest."""
    from memwork.reports.runner import run_report as run

    return run(name, params, out_dir, show_code=show_code)


# ---- the facade ----------------------------------------------------------------------------------------
#: the facade's own names, served from :mod:`memwork.facade.facade` when first asked for:
#: ``facade_from_env(env=None)`` builds the memory facade the environment describes (``os.environ`` by
#: default; it never raises on a bad setting, ``.status()`` lists the problems)
_FACADE = ("MemoryFacade", "facade_from_env")


def __getattr__(name: str) -> Any:
    if name in _FACADE:
        from memwork.facade import facade

        return getattr(facade, name)
    raise AttributeError(f"module 'memwork.api' has no attribute {name!r}")


def user_memories(
    user_id: str,
    *,
    facade: MemoryFacade | None = None,
    env: Mapping[str, str] | None = None,
    query: str | None = None,
    limit: int | None = None,
    session_id: str | None = None,
) -> dict[str, Any]:
    """One user's memories as the facade resolves them for the application: ``memories`` (newest
    first, at most ``limit``), ``profile``, ``activeGoals``, ... and ``source`` (the backend that
    answered). Through ``facade``, else one built from ``env`` for this call."""
    from memwork.facade.facade import facade_from_env

    request = {"userId": user_id} | _given(query=query, limit=limit, sessionId=session_id)
    if facade is not None:
        return facade.resolve(request)
    built = facade_from_env(env)
    try:
        return built.resolve(request)
    finally:
        built.close()
