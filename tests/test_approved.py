"""``merge-duplicates --approved`` honours the reviewer's rejections (issue 8 point 8).

Approving A-B and B-C while rejecting A-C used to merge all three into one survivor (the closure of the
approved pairs overrode the reviewer). Now a cluster holding a rejected pair is split greedily by the
highest approved similarity, and what was rejected and done is reported in the JSON and the text.
"""

from __future__ import annotations

import csv
import inspect
import json
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memwork.cli import main
from memwork.defrag import plan_merge_duplicates, run_action
from memwork.entry import Entry
from memwork.errors import UsageError
from memwork.stores import open_store
from memwork.stores.memory import MemoryStore

T0 = datetime(2025, 1, 1, tzinfo=UTC)
TEXT = "postgres vacuum settings tuned for the nightly batch job alpha"


def entries(*names: str) -> list[Entry]:
    """One entry per name, each a day newer than the one before (so the last is keep_newer's survivor)."""
    return [
        Entry(path=f"{n}.md", content=TEXT + " " * k + n, updated_at=T0 + timedelta(days=k))
        for k, n in enumerate(names)
    ]


def review_csv(tmp_path, rows) -> str:
    path = tmp_path / "review.csv"
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["scope", "path_a", "path_b", "similarity", "decision"])
        writer.writerows(["default", f"{a}.md", f"{b}.md", sim, decision] for a, b, sim, decision in rows)
    return str(path)


def groups(clusters) -> list[set[str]]:
    return [{c["survivor"], *c["merged"]} for c in clusters if c["survivor"]]


@pytest.fixture(params=["filesystem", "sqlite"])
def spec(request, tmp_path) -> str:
    spec = str(tmp_path / "fs") if request.param == "filesystem" else f"sqlite:///{tmp_path / 's.db'}"
    create = {"create": True} if "create" in inspect.signature(open_store).parameters else {}
    with open_store(spec, **create) as store:
        store.put_many(entries("a", "b", "c"))
    return spec


def cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


FINDINGS_ROWS = [("a", "b", "0.9", "approve"), ("b", "c", "0.9", "approve"), ("a", "c", "0.8", "reject")]


def test_rejected_pair_is_never_merged_and_the_split_is_reported(spec, tmp_path):
    approved = review_csv(tmp_path, FINDINGS_ROWS)
    dry = cli("defrag", "merge-duplicates", "--store", spec, "--approved", approved, "--json")
    assert dry.exit_code == 0, dry.output
    (cluster,) = json.loads(dry.stdout)["summary"]["clusters"]
    assert cluster == {  # the tie a-b / b-c breaks on path: a-b joins first, then b-c would join a and c
        "scope": "default",
        "survivor": "b.md",
        "merged": ["a.md"],
        "split_from": ["a.md", "b.md", "c.md"],
        "rejected": [["a.md", "c.md"]],
        "not_merged": [["b.md", "c.md"]],
    }

    text = cli("defrag", "merge-duplicates", "--store", spec, "--approved", approved)
    assert text.exit_code == 0
    flat = " ".join(text.stdout.split())
    assert "Review: cluster a.md, b.md, c.md (scope default) holds rejected pair(s) a.md - c.md" in flat
    assert "merged a.md into b.md; kept apart: c.md; approved but not merged: b.md - c.md" in flat

    applied = cli("defrag", "merge-duplicates", "--store", spec, "--approved", approved, "--apply", "--json")
    assert applied.exit_code == 0, applied.output
    with open_store(spec) as store:
        assert store.get("a.md").redirect_to == "b.md"
        assert not store.get("b.md").is_stub and not store.get("c.md").is_stub
        assert store.get("c.md").content == TEXT + "  c"  # untouched: nothing of a or b merged into it
        assert "a.md" not in store.get("c.md").metadata.get("merged_from", [])


def test_split_follows_the_highest_approved_similarity(tmp_path):
    rows = [("a", "b", "0.90", "approve"), ("b", "c", "0.95", "approve"), ("a", "c", "0.8", "reject")]
    result = run_action(
        MemoryStore(entries("a", "b", "c")), "merge_duplicates", approved=review_csv(tmp_path, rows)
    )
    (cluster,) = result.summary["clusters"]
    assert (cluster["survivor"], cluster["merged"], cluster["not_merged"]) == (
        "c.md",
        ["b.md"],
        [["a.md", "b.md"]],
    )


def test_a_chain_with_a_rejected_end_is_split_into_two_groups(tmp_path):
    rows = [
        ("a", "b", "0.99", "approve"),
        ("b", "c", "0.90", "approve"),
        ("c", "d", "0.98", "approve"),
        ("a", "d", "", "reject"),
    ]
    result = run_action(
        MemoryStore(entries("a", "b", "c", "d")), "full", approved=review_csv(tmp_path, rows), apply=True
    )
    assert groups(result.summary["clusters"]) == [{"a.md", "b.md"}, {"c.md", "d.md"}]
    assert all(c["not_merged"] == [["b.md", "c.md"]] for c in result.summary["clusters"])


def test_approved_and_rejected_pair_is_rejected_and_reported(tmp_path):
    rows = [("a", "b", "0.9", "approve"), ("b", "a", "0.9", "reject")]
    store = MemoryStore(entries("a", "b"))
    result = run_action(store, "merge_duplicates", approved=review_csv(tmp_path, rows), apply=True)
    assert len(result.plan) == 0
    assert result.summary["clusters"] == [
        {
            "scope": "default",
            "survivor": None,
            "merged": [],
            "split_from": ["a.md", "b.md"],
            "rejected": [["a.md", "b.md"]],
            "not_merged": [["a.md", "b.md"]],
        }
    ]
    assert not any(e.is_stub for e in store.all_entries())


def test_without_rejections_the_closure_still_merges_as_one(tmp_path):
    rows = [("a", "b", "0.9", "approve"), ("b", "c", "0.9", "approve"), ("a", "c", "0.8", "")]
    result = run_action(
        MemoryStore(entries("a", "b", "c")), "merge_duplicates", approved=review_csv(tmp_path, rows)
    )
    assert result.summary["clusters"] == [
        {"scope": "default", "survivor": "c.md", "merged": ["a.md", "b.md"]}
    ]


@pytest.mark.parametrize("value", ["high", "1.5", "nan"])
def test_bad_similarity_names_row_and_field(tmp_path, value):
    path = review_csv(tmp_path, [("a", "b", value, "approve")])
    with pytest.raises(UsageError) as info:
        run_action(MemoryStore(entries("a", "b")), "merge_duplicates", approved=path)
    assert info.value.field == "approved row 2 similarity" and info.value.value == value


NAMES = ["a", "b", "c", "d", "e", "f"]
PAIR = st.tuples(st.sampled_from(NAMES), st.sampled_from(NAMES)).filter(lambda p: p[0] != p[1])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(PAIR, max_size=12), st.lists(PAIR, max_size=5))
def test_no_merge_group_ever_holds_a_rejected_pair(approved, rejected):
    store_entries = entries(*NAMES)
    planned = plan_merge_duplicates(
        store_entries,
        approved=[("default", f"{a}.md", f"{b}.md") for a, b in approved],
        rejected=[("default", f"{a}.md", f"{b}.md") for a, b in rejected],
    )
    refused = {frozenset((f"{a}.md", f"{b}.md")) for a, b in rejected}
    allowed = {frozenset((f"{a}.md", f"{b}.md")) for a, b in approved}
    seen: set[str] = set()
    for group in groups(planned.clusters):
        assert not any(frozenset((x, y)) in refused for x in group for y in group if x != y)
        assert not (group & seen)  # each entry in at most one group
        seen |= group
        # every group is connected by approved pairs
        reached, frontier = set(), [next(iter(sorted(group)))]
        while frontier:
            node = frontier.pop()
            reached.add(node)
            frontier += [y for y in group if y not in reached and frozenset((node, y)) in allowed]
        assert reached == group
    merged = {op.path for op in planned.plan if op.kind == "merge"}
    assert merged <= seen
