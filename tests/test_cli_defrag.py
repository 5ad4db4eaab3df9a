"""``memwork defrag`` through click's CliRunner."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from click.testing import CliRunner

from memwork.cli import main
from memwork.entry import Entry, utcnow
from memwork.stores import open_store

TEXT = "redis keeps keys in memory and persists snapshots to disk on a schedule"


@pytest.fixture
def store_dir(tmp_path):
    spec = str(tmp_path / "mem")
    with open_store(spec) as store:
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
        (["defrag", "analyze", "--age-days", "3"], "age_days=3"),
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
