"""memwork.api: the verbs a notebook user guesses, with one calling convention, as thin wrappers.

Each verb is checked against the library call it wraps (the same pairs, plan, report), on a generated
SQLite store; the import and its verification on the embedded PostgreSQL. The convention itself is a
test: what a verb works on is positional, every option keyword-only and named like the command-line
option of the same meaning (``to`` is ``--to``), and every verb is documented in docs/usage.md (Python API).
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import click
import pytest
from import_harness import ListSource

import memwork
from memwork import api
from memwork.contracts import SourceRecord
from memwork.defrag import run_action as library_run_action
from memwork.defrag.report import health_report as library_health_report
from memwork.errors import UsageError
from memwork.stores import open_store

ROOT = Path(__file__).resolve().parents[1]


def _build(spec: str) -> str:
    """A generated store (alice, bob, ops) without vectors: fast, and duplicates by text."""
    from memwork.samples.entries import generate_entries

    entries = generate_entries(120, scopes=("alice", "bob", "ops"), seed=5, embedder=None)
    with open_store(spec, create=True) as store:
        store.put_many(entries)
    return spec


@pytest.fixture(scope="module")
def store_spec(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _build(f"sqlite:///{tmp_path_factory.mktemp('api') / 'store.db'}")


@pytest.fixture
def copy_spec(tmp_path: Path) -> str:
    """The same store, for a test that changes it."""
    return _build(f"sqlite:///{tmp_path / 'copy.db'}")


# ---- the namespace ---------------------------------------------------------------------------------
def test_import_memwork_stays_light():
    """``import memwork`` loads neither the API nor pandas, SQLAlchemy or the facade."""
    heavy = "('memwork.api', 'pandas', 'sqlalchemy', 'memwork.facade')"
    code = f"import sys, memwork; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_verb_is_served_from_memwork_itself():
    assert set(memwork.API) == set(api.__all__)
    assert set(api.__all__) <= set(memwork.__all__)
    for name in api.__all__:
        assert getattr(memwork, name) is getattr(api, name), name
    assert memwork.facade_from_env.__module__ == "memwork.facade.facade"
    with pytest.raises(AttributeError):
        memwork.no_such_verb  # noqa: B018


def test_one_calling_convention():
    """What a verb works on is positional (the store, and the action of ``run_action``, the run of
    ``undo``; for ``facade_from_env`` the environment); every option is keyword-only; every verb says
    what it does."""
    for name in api.__all__:
        verb = getattr(api, name)
        if inspect.isclass(verb):
            continue
        assert (verb.__doc__ or "").strip(), f"{name} has no docstring"
        first, *rest = inspect.signature(verb).parameters.values()
        assert first.kind is not first.KEYWORD_ONLY, name
        for param in rest:
            if param.kind is not param.VAR_KEYWORD and param.default is not inspect.Parameter.empty:
                assert param.kind is param.KEYWORD_ONLY, f"{name}({param.name}) is an option: keyword-only"


def _cli_options(*path: str) -> set[str]:
    from memwork.cli import main

    command: click.Command = main
    ctx = click.Context(main)
    for word in path:
        assert isinstance(command, click.Group)
        found = command.get_command(ctx, word)
        assert found is not None, path
        command = found
    return {opt for p in command.params for opt in p.opts if opt.startswith("--")}


#: (verb, its command) -> keywords that are no command-line option (the environment, a Python object)
COMMANDS = {
    "duplicates": (("defrag", "find-duplicates"), set()),
    "related": (("defrag", "find-related"), set()),
    "preview_merge": (("defrag", "merge-duplicates"), set()),
    "run_action": (("defrag", "merge-duplicates"), set()),
    "undo": (("defrag", "undo"), set()),
    "read_entry": (("store", "read"), set()),
    "list_entries": (("store", "list"), set()),
    "import_source": (("import",), {"env"}),
    "verify_import": (("verify",), {"env"}),
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_keywords_are_the_command_line_options(name):
    """``similarity_threshold`` is ``--similarity-threshold``, ``to`` is ``--to``: one name for one thing."""
    path, not_options = COMMANDS[name]
    options = _cli_options(*path)
    keywords = [
        p.name
        for p in inspect.signature(getattr(api, name)).parameters.values()
        if p.kind is p.KEYWORD_ONLY and p.name not in not_options
    ]
    missing = [k for k in keywords if "--" + k.replace("_", "-") not in options]
    assert not missing, f"{name}: {missing} are not options of memwork {' '.join(path)}"


def test_the_destination_is_to_everywhere():
    for name in ("import_source", "verify_import"):
        assert "to" in inspect.signature(getattr(api, name)).parameters
    assert "--to" in _cli_options("import") and "--to" in _cli_options("import-verify")
    notebook = (ROOT / "notebooks" / "explore.ipynb").read_text(encoding="utf-8")
    assert "database_url" not in notebook and "pgvector_url" not in notebook


def test_usage_documents_every_verb():
    usage = (ROOT / "docs" / "usage.md").read_text(encoding="utf-8")
    section = usage.split("\n## Python API\n", 1)[1].split("\n## ", 1)[0]
    missing = [name for name in api.__all__ if f"`{name}" not in section]
    assert not missing, f"docs/usage.md's Python API section does not name {missing}"


# ---- stores and defrag -------------------------------------------------------------------------------
def test_health_report_takes_a_spec_or_an_open_store(store_spec):
    by_spec = memwork.health_report(store_spec, scope="alice")
    with memwork.open_store(store_spec) as store:
        by_store = memwork.health_report(store, scope="alice")
        assert store.count() > 0  # the caller's store is still open
    assert by_spec.health == by_store.health == library_health_report(store_spec, "alice").health
    assert by_spec.store == store_spec and by_store.store.startswith(store_spec)


def test_duplicates_are_the_actions_pairs_as_a_table(store_spec):
    frame = memwork.duplicates(store_spec, scope="alice")
    with open_store(store_spec) as store:
        pairs = library_run_action(store, "find_duplicates", scope="alice").pairs
        first = store.get(frame.loc[0, "path_a"], scope="alice")
    assert len(frame) == len(pairs) > 0
    assert {(r.path_a, r.path_b) for r in frame.itertuples()} == {(p.path_a, p.path_b) for p in pairs}
    assert list(frame.columns) == [c for c in api.PAIR_COLUMNS if c != "link_status"]
    assert set(frame["scope"]) == {"alice"}
    assert (frame["similarity"] >= 0.85).all()
    assert frame["similarity"].is_monotonic_decreasing
    assert first is not None and frame.loc[0, "content_a"] == first.content


def test_another_threshold_finds_more(store_spec):
    strict = memwork.duplicates(store_spec, scope="alice")
    loose = memwork.duplicates(store_spec, scope="alice", similarity_threshold=0.5)
    assert len(loose) > len(strict)
    assert set(zip(strict.path_a, strict.path_b, strict="strict")) <= set(
        zip(loose.path_a, loose.path_b, strict="strict")
    )


def test_related_pairs_say_whether_they_are_linked(store_spec):
    frame = memwork.related(store_spec, min_similarity=0.3, max_similarity=0.85)
    assert "link_status" in frame.columns and len(frame) > 0
    assert set(frame["link_status"]) <= {"unlinked", "one-way", "bidirectional"}
    assert ((frame["similarity"] >= 0.3) & (frame["similarity"] < 0.85)).all()


def test_a_bad_option_is_a_usage_error_naming_it(store_spec):
    with pytest.raises(UsageError) as caught:
        memwork.duplicates(store_spec, similarity_threshold=2)
    assert caught.value.field == "similarity_threshold"
    with pytest.raises(UsageError):
        memwork.run_action(store_spec, "defragment")


def _snapshot(spec: str) -> dict[tuple[str, str], tuple[object, ...]]:
    with open_store(spec) as store:
        return {
            e.key: (e.content, e.title, repr(e.metadata), e.updated_at, e.hits)
            for e in store.all_entries(scope="alice")
        }


def test_preview_merge_is_a_dry_run_then_apply_and_undo(copy_spec):
    before = _snapshot(copy_spec)
    preview = memwork.preview_merge(copy_spec, scope="alice")
    assert not preview.applied and preview.plan is not None and preview.plan.operations
    ops = preview.frame("operations")
    assert len(ops) == len(preview.plan.operations) and set(ops["op"]) <= {"merge", "stub", "repoint"}
    assert len(preview.frame("changes")) == len(preview.changes) > 0
    with pytest.raises(UsageError):
        preview.frame("nothing")
    assert _snapshot(copy_spec) == before  # nothing written

    applied = memwork.run_action(copy_spec, "merge_duplicates", scope="alice", apply=True)
    assert applied.applied and applied.run_id
    assert applied.plan is not None and applied.plan.to_dict() == preview.plan.to_dict()  # exactly the plan
    assert memwork.duplicates(copy_spec, scope="alice").empty

    undone = memwork.undo(copy_spec, applied.run_id)
    assert undone["undone"] == applied.run_id and undone["changes"]
    assert _snapshot(copy_spec) == before


def test_duplicate_review_writes_the_review_file(store_spec, tmp_path):
    review = memwork.duplicate_review(store_spec, scope="alice", review_file=str(tmp_path / "r.csv"))
    assert (tmp_path / "r.csv").exists()
    assert len(review.pairs) == len(memwork.duplicates(store_spec, scope="alice"))


def test_run_report_refuses_an_unknown_parameter_before_any_kernel(tmp_path):
    with pytest.raises(UsageError):
        memwork.run_report("health_report", out_dir=str(tmp_path), no_such_parameter=1)
    assert not list(tmp_path.iterdir())


# ---- the facade ----------------------------------------------------------------------------------------
def test_user_memories_through_the_facade(tmp_path):
    from memwork.samples.legacy import ITEMS, generate_legacy_items, load_legacy_rows

    url = f"sqlite:///{tmp_path / 'legacy.db'}"
    rows = generate_legacy_items(3, 6, seed=2, active_only=True)
    load_legacy_rows(url, ITEMS, rows)
    env = {"MEMORY_LEGACY_DATABASE_URL": url}
    answer = memwork.user_memories("user-000001", env=env, limit=4)
    assert answer["ok"] and answer["source"] == "legacy-conversation-memory"
    mine = {r["id"] for r in rows if r["user_id"] == "user-000001"}
    assert answer["memories"] and len(answer["memories"]) <= 4
    assert {m["id"] for m in answer["memories"]} <= mine
    facade = memwork.facade_from_env(env)
    try:
        assert memwork.user_memories("user-000001", facade=facade, limit=4) == answer
    finally:
        facade.close()


# ---- import and verify ---------------------------------------------------------------------------------
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _records(n: int) -> list[SourceRecord]:
    return [
        SourceRecord(
            id=f"m{i:03d}", user_id=f"u{i % 3}", content=f"memory {i}", type="fact", metadata={},
            created_at=T0 + timedelta(seconds=i), updated_at=T0 + timedelta(seconds=i),
            vector=[float(i % 5 + 1), 1.0, 0.5, 0.25],
        )
        for i in range(n)
    ]  # fmt: skip


def test_import_is_a_dry_run_by_default():
    report = memwork.import_source(ListSource(_records(7)), to="postgresql://nowhere.invalid/x")
    assert report.mode == "dry-run" and report.rows_read == 7 and report.rows_written == 0


def test_a_bad_destination_is_refused_as_to():
    with pytest.raises(UsageError) as caught:
        memwork.import_source(ListSource(_records(1)), to="mysql://root@127.0.0.1/test", apply=True)
    assert caught.value.field == "to"


def test_import_then_verify_on_postgres(pg_url):
    records = _records(25)
    report = memwork.import_source(
        ListSource(records), to=pg_url, apply=True, create_schema=True, page_size=10
    )
    assert report.rows_written == 25 and report.pages == 3
    verification = memwork.verify_import(ListSource(records), to=pg_url)
    assert verification.verdict == "PASS", verification.reasons()
    assert verification.rows.source_rows == verification.rows.dest_rows == 25


def test_the_design_notes_place_every_unit():
    """docs/design.md's module map names every unit of memwork/, so a new one is placed when it lands."""
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    units = [
        p.name + ("/" if p.is_dir() else "")
        for p in (ROOT / "memwork").iterdir()
        if not p.name.startswith(("_", ".")) and (p.suffix == ".py" or (p / "__init__.py").exists())
    ]
    missing = [unit for unit in units if f"`{unit}`" not in design]
    assert not missing, f"docs/design.md does not place {missing}"
