"""``memwork defrag`` through click's CliRunner."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from click.testing import CliRunner

from memwork.cli import load_all_commands, main
from memwork.entry import Entry, utcnow
from memwork.stores import open_store

TEXT = "redis keeps keys in memory and persists snapshots to disk on a schedule"


@pytest.fixture
def store_dir(tmp_path):
    spec = str(tmp_path / "mem")
    with open_store(spec, create=True) as store:
        old = utcnow() - timedelta(days=100)
        store.put(Entry(path="a.md", content=TEXT, updated_at=old, created_at=old))
        store.put(Entry(path="b.md", content=TEXT + " again", metadata={"type": "fact"}))
    return spec


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.mark.parametrize("name", ["find_duplicates", "find-duplicates"])
def test_find_duplicates_json(store_dir, name):
    result = run("defrag", name, "--store", store_dir, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["pairs"][0]["path_a"] == "a.md" and 0 <= data["pairs"][0]["text_similarity"] <= 1


def test_merge_dry_run_then_apply_then_undo(store_dir):
    dry = json.loads(run("defrag", "merge-duplicates", "--store", store_dir, "--json").output)
    assert dry["dry_run"] is True and dry["run_id"] is None and dry["operations"]
    with open_store(store_dir) as store:
        assert not store.get("a.md").is_stub
    done = json.loads(run("defrag", "merge-duplicates", "--store", store_dir, "--apply", "--json").output)
    assert done["applied"] and done["operations"] == dry["operations"]
    with open_store(store_dir) as store:
        assert store.get("a.md").is_stub
    journal = json.loads(run("defrag", "journal", "--json").output)
    assert [r["run_id"] for r in journal["runs"]] == [done["run_id"]]
    undone = run("defrag", "undo", done["run_id"], "--store", store_dir, "--json")
    assert undone.exit_code == 0, undone.output
    with open_store(store_dir) as store:
        assert not store.get("a.md").is_stub


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["defrag", "defragment"], "action='defragment'"),
        (["defrag", "merge-duplicates", "--strategy", "newest"], "strategy='newest'"),
        (["defrag", "find-duplicates", "--similarity-threshold", "1.5"], "similarity_threshold=1.5"),
        (
            ["defrag", "find-related", "--min-similarity", "0.9", "--max-similarity", "0.5"],
            "min_similarity=0.9",
        ),
        (["defrag", "cleanup-stubs", "--age-days", "-1"], "age_days=-1"),
        (["defrag", "full", "--compact-max-hits", "-1"], "compact_max_hits=-1"),
    ],
)
def test_usage_errors_exit_2_one_line(store_dir, args, needle):
    result = CliRunner().invoke(main, [*args, "--store", store_dir])
    assert result.exit_code == 2
    assert needle in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("action", ["analyze", "find-low-quality", "full", "find-related"])
def test_human_output(store_dir, action):
    result = run("defrag", action, "--store", store_dir)
    assert result.exit_code == 0, result.output
    assert result.output.strip()


def test_help_for_every_action():
    for action in ("analyze", "find-duplicates", "full", "undo", "journal"):
        result = run("defrag", action, "--help")
        assert result.exit_code == 0 and "Example" in result.output


def test_every_defrag_and_store_command_has_help_example_and_json():
    """Issue 2: --help (with an example) on every command, --json on every command that reports."""
    from memwork.defrag import ACTIONS

    groups = {group: load_all_commands()[group] for group in ("defrag", "store")}
    extra = {"undo", "journal", "review", "calibrate"}
    assert {a.cli_name for a in ACTIONS.values()} | extra == set(groups["defrag"].commands)
    for group, command in groups.items():
        assert "Example" in run(group, "--help").output
        for name in command.commands:
            result = run(group, name, "--help")
            assert result.exit_code == 0, (group, name)
            assert "Example" in result.output and f"memwork {group} " in result.output, (group, name)
            assert "--json" in result.output, (group, name)


def test_progress_bar_on_terminal_quiet_under_json(store_dir, fake_bar):
    shown = run("defrag", "find-duplicates", "--store", store_dir)
    assert shown.exit_code == 0
    assert list(fake_bar[-1].tasks.values()) == [["loading entries", 2, 2], ["finding duplicates", 2, 2]]
    applied = run("defrag", "full", "--store", store_dir, "--apply")
    assert applied.exit_code == 0
    stages = [t[0] for t in fake_bar[-1].tasks.values()]
    assert stages[:2] == ["loading entries", "finding duplicates"] and "applying merge_duplicates" in stages
    bars = len(fake_bar)
    for args in (["find-duplicates"], ["full"], ["merge-duplicates", "--apply"]):
        result = CliRunner().invoke(main, ["defrag", *args, "--store", store_dir, "--json"])
        assert result.exit_code == 0 and result.stderr == ""
        assert json.loads(result.stdout)["action"]  # stdout is one JSON document and nothing else
    assert len(fake_bar) == bars  # no bar under --json


def test_progress_is_off_when_stderr_is_not_a_terminal(store_dir, monkeypatch):
    """CliRunner's stderr is not a terminal: run_action gets no progress object at all."""
    import memwork.defrag

    seen = []
    real = memwork.defrag.run_action

    def spy(*args, **kwargs):
        seen.append(kwargs.get("progress"))
        return real(*args, **kwargs)

    monkeypatch.setattr(memwork.defrag, "run_action", spy)
    assert run("defrag", "analyze", "--store", store_dir).exit_code == 0
    assert seen == [None]
