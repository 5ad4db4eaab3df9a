"""Every defrag action on the filesystem, SQLite and embedded PostgreSQL stores, plus undo."""

from __future__ import annotations

from datetime import timedelta

import pytest

from memwork.defrag import run_action, undo
from memwork.embed import HashEmbedder
from memwork.entry import Entry, utcnow

NOW = utcnow().replace(microsecond=0)
EMB = HashEmbedder(384)
BASE = "postgres vacuum reclaims storage held by dead tuples after updates and deletes"


def seed(store) -> None:
    def put(path, content, *, days, meta=None, scope="default", hits=0, embed=True):
        store.put(
            Entry(
                path=path,
                content=content,
                scope=scope,
                metadata=meta or {},
                embedding=EMB.embed([content])[0] if embed else None,
                created_at=NOW - timedelta(days=days + 1),
                updated_at=NOW - timedelta(days=days),
                hits=hits,
            )
        )

    put("db/vacuum.md", BASE, days=120, meta={"type": "fact", "tags": ["pg"], "confidence": "high"})
    put("db/vacuum-2.md", BASE + " quickly", days=10, meta={"type": "fact", "tags": ["db"], "domain": "ops"})
    put("db/vacuum-3.md", BASE + " too", days=50, meta={"confidence": "low"})
    put("db/autovacuum.md", "postgres autovacuum reclaims storage held by dead tuples on a schedule", days=40)
    put("misc/junk.md", "lorem ipsum dolor", days=100, embed=False)
    put(
        "old/stub.md",
        "# merged",
        days=200,
        meta={"stub": True, "redirect_to": "db/vacuum.md", "reason": "merged"},
    )
    put("db/vacuum.md", BASE, days=3, scope="agent-b", meta={"type": "fact"})


READ_ONLY = ["analyze", "find_duplicates", "find_low_quality", "find_archival_candidates", "find_related"]


@pytest.mark.parametrize("action", READ_ONLY)
def test_read_only_actions(any_store, action):
    seed(any_store)
    before = [e.to_record() for e in any_store.all_entries()]
    data = run_action(
        any_store, action, now=NOW, **({"min_similarity": 0.3} if action == "find_related" else {})
    )
    data = data.to_dict()
    assert [e.to_record() for e in any_store.all_entries()] == before  # nothing written, no hits
    if action == "find_duplicates":
        pairs = {(p["scope"], p["path_a"], p["path_b"]) for p in data["pairs"]}
        assert ("default", "db/vacuum-2.md", "db/vacuum-3.md") in pairs
        assert all(p["scope"] == "default" for p in data["pairs"])
        assert all(0 <= p["similarity"] <= 1 and "semantic_similarity" in p for p in data["pairs"])
    if action == "analyze":
        assert data["summary"]["health"]["stubs"] == 1 and data["summary"]["health"]["entries"] == 6
    if action == "find_archival_candidates":
        assert {e["path"] for e in data["entries"]} == {"db/vacuum.md", "misc/junk.md"}


@pytest.mark.parametrize(
    ("action", "params"),
    [
        ("link_related", {"min_similarity": 0.3}),
        ("merge_duplicates", {"strategy": "combine"}),
        ("merge_duplicates", {"strategy": "keep_larger"}),
        ("cleanup_stubs", {}),
        ("compact", {}),
        ("full", {"strategy": "combine", "embedder": EMB}),
    ],
)
def test_modifying_actions_apply_and_undo(any_store, action, params):
    seed(any_store)
    original = [e.to_record() for e in any_store.all_entries()]
    preview = run_action(any_store, action, now=NOW, **params).to_dict()
    assert [e.to_record() for e in any_store.all_entries()] == original
    assert preview["operations"], "the seed gives every action something to do"
    applied = run_action(any_store, action, now=NOW, apply=True, **params).to_dict()
    assert applied["operations"] == preview["operations"]
    assert applied["changes"] == preview["changes"]
    if action == "full":
        assert applied["summary"]["health_after"]["score"] == preview["summary"]["health_after"]["score"]
    for e in any_store.all_entries():
        if e.is_stub:
            target = any_store.get(e.redirect_to, scope=e.scope)
            assert target is not None and not target.is_stub
    undo(applied["run_id"], any_store)
    assert [e.to_record() for e in any_store.all_entries()] == original
