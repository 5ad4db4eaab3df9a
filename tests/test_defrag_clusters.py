"""Clusters safe to merge: a chained cluster (A ~ B, B ~ C, A !~ C) is listed for review, never merged."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from memwork.defrag import plan_merge_duplicates, run_action
from memwork.defrag.planners import cluster_density
from memwork.entry import Entry
from memwork.errors import UsageError
from memwork.stores.memory import MemoryStore

NOW = datetime(2026, 1, 1, tzinfo=UTC)
WORDS = iter(f"word{k}" for k in range(10_000))


def entry(path: str, degrees: float, scope: str = "default") -> Entry:
    """An entry whose words are its own (Jaccard 0 with any other) and whose vector is at ``degrees``
    in a plane: cosines follow the angles between entries."""
    rad = math.radians(degrees)
    vector = np.zeros(8, dtype=np.float32)
    vector[:2] = (math.cos(rad), math.sin(rad))
    content = " ".join(next(WORDS) for _ in range(12))
    return Entry(
        path=path,
        content=content,
        scope=scope,
        embedding=vector,
        created_at=NOW - timedelta(days=2),
        updated_at=NOW - timedelta(days=1),
    )


def chain_and_clique() -> list[Entry]:
    """a, b, c: 30 degrees apart (cos 0.866 >= 0.85 neighbour to neighbour, cos 0.5 end to end);
    d, e, f: within 5 degrees of each other (every pair a duplicate)."""
    return [entry("a.md", 0), entry("b.md", 30), entry("c.md", 60), entry("d.md", 120),
            entry("e.md", 122), entry("f.md", 125)]  # fmt: skip


def test_density() -> None:
    assert cluster_density(["a", "b", "c"], {("a", "b"), ("b", "c")}) == pytest.approx(2 / 3)
    assert cluster_density(["a", "b"], {("a", "b")}) == 1.0


def test_chained_cluster_is_listed_never_merged() -> None:
    planned = plan_merge_duplicates(chain_and_clique())
    merged = {op.path for op in planned.plan if op.kind == "merge"}
    assert merged.isdisjoint({"a.md", "b.md", "c.md"})
    assert len(merged & {"d.md", "e.md", "f.md"}) == 2  # the dense cluster merges as before
    chained = [c for c in planned.clusters if c.get("review")]
    assert chained == [
        {"scope": "default", "survivor": None, "merged": [], "review": True,
         "chained": ["a.md", "b.md", "c.md"], "size": 3, "density": 0.6667,
         "pairs": [["a.md", "b.md"], ["b.md", "c.md"]]}
    ]  # fmt: skip
    assert {p.decision for p in planned.pairs if "a.md" in (p.path_a, p.path_b)} == {"review"}
    assert planned.summary["chained_clusters"] == 1


def test_bound_is_adjustable_and_checked() -> None:
    planned = plan_merge_duplicates(chain_and_clique(), min_cluster_density=0.5)
    merged = {op.path for op in planned.plan if op.kind == "merge"}
    assert len(merged & {"a.md", "b.md", "c.md"}) == 2
    with pytest.raises(UsageError) as info:
        run_action(MemoryStore(chain_and_clique()), "merge_duplicates", min_cluster_density=1.5)
    assert info.value.field == "min_cluster_density"


def test_full_never_merges_a_chain() -> None:
    store = MemoryStore(chain_and_clique())
    result = run_action(store, "full", apply=True, now=NOW)
    assert {e.path for e in store.all_entries() if e.is_stub} == {"d.md", "e.md", "f.md"} - {
        c["survivor"] for c in result.summary["clusters"] if c.get("survivor")
    }
    assert not any(e.is_stub for e in store.all_entries() if e.path in {"a.md", "b.md", "c.md"})
