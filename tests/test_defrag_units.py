"""Fast unit tests of the defrag engine on in-memory entries (scores, plans, invariants)."""

from __future__ import annotations

import csv
from datetime import timedelta

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memwork.defrag import (
    analyze,
    find_duplicates,
    find_low_quality,
    find_related,
    health,
    health_band,
    list_runs,
    merge_entries,
    plan_compact,
    plan_merge_duplicates,
    quality_score,
    run_action,
    undo,
    write_review_csv,
)
from memwork.defrag.scores import health_points
from memwork.embed import HashEmbedder
from memwork.entry import Entry, utcnow
from memwork.errors import UsageError
from memwork.stores.memory import MemoryStore

NOW = utcnow().replace(microsecond=0)
EMB = HashEmbedder(32)
BASE = "the quick brown fox jumps over the lazy dog near the river bank today"


def entry(path, content=BASE, *, scope="default", days=0, meta=None, embed=True, hits=0, stub_to=None):
    metadata = dict(meta or {})
    if stub_to:
        metadata = {"stub": True, "redirect_to": stub_to, "reason": "merged"}
        embed = False
    return Entry(
        path=path,
        content=content,
        scope=scope,
        metadata=metadata,
        embedding=EMB.embed([content])[0] if embed else None,
        created_at=NOW - timedelta(days=days + 1),
        updated_at=NOW - timedelta(days=days),
        hits=hits,
    )


def check_redirects(store):
    """Invariant 2: every stub points straight at a live, non-stub entry of its scope."""
    by_key = {e.key: e for e in store.all_entries()}
    for e in by_key.values():
        if e.is_stub:
            target = by_key.get((e.scope, e.redirect_to))
            assert target is not None, f"{e.path} -> missing {e.redirect_to}"
            assert not target.is_stub, f"{e.path} -> stub {e.redirect_to}"


# ---- scores ----------------------------------------------------------------------------------------
def test_quality_score_formula():
    assert quality_score({}) == 0
    full = {
        "type": "fact",
        "confidence": "high",
        "tags": ["a"],
        "related": ["memory://x"],
        "domain": "d",
        "last_verified": "2024-01-01",
    }
    assert quality_score(full) == 100
    assert quality_score({"type": "fact", "confidence": "low", "tags": []}) == 40
    assert quality_score({"tags": None, "related": None}) == 0  # missing lists do not crash


def test_health_tiers_are_either_or_and_bands():
    assert health_points(100, 100, 100, 100, 100) == 100
    assert health_points(60, 40, 30, 60, 30) == 20 + 10 + 10 + 8 + 8
    assert health_points(80, 60, 40, 80, 50) == 20 + 10 + 10 + 8 + 8  # strictly greater
    assert [health_band(s) for s in (100, 80, 79, 60, 59, 40, 39, 20, 19, 0)] == [
        "excellent",
        "excellent",
        "good",
        "good",
        "fair",
        "fair",
        "poor",
        "poor",
        "critical",
        "critical",
    ]


def test_stubs_never_scored_or_paired():
    """Invariant 1: analyze, duplicate/related detection, low quality and compact ignore stubs."""
    entries = [
        entry("a.md"),
        entry("s1.md", BASE, stub_to="a.md", days=400),
        entry("s2.md", BASE, stub_to="a.md"),
    ]
    assert health(entries).entries == 1 and health(entries).stubs == 2
    assert analyze(entries)["health"]["entries"] == 1
    assert find_duplicates(entries, 0.1) == []
    assert find_related(entries, 0.0, 1.0) == []
    assert [r.path for r in find_low_quality(entries)] == ["a.md"]
    assert plan_compact(entries, 101, 0, 100, now=NOW).plan.operations == []  # a.md: a stub target
    lone_stub = [entry("s3.md", stub_to="gone.md", days=400)]
    assert plan_compact(lone_stub, 101, 0, 100, now=NOW).plan.operations == []
    store = MemoryStore(entries)
    result = run_action(store, "compact", now=NOW, min_quality_score=100, min_age_days=0, max_hits=10)
    assert all(not op.path.startswith("s") for op in result.plan)


def test_scopes_never_cross():
    entries = [entry("a.md", scope="alice"), entry("a.md", scope="bob"), entry("b.md", scope="bob")]
    pairs = find_duplicates(entries, 0.85)
    assert [(p.scope, p.path_a, p.path_b) for p in pairs] == [("bob", "a.md", "b.md")]
    plan = plan_merge_duplicates(entries).plan
    assert {op.scope for op in plan} == {"bob"}
    # related pairs and links: identical vectors in two scopes are never paired or linked
    everything = find_related(entries, 0.0, 1.0) + find_duplicates(entries, 0.0)
    assert {(p.scope, p.path_a, p.path_b) for p in everything} == {("bob", "a.md", "b.md")}
    store = MemoryStore(entries)
    linked = run_action(store, "link_related", min_similarity=0.0, max_similarity=1.0, apply=True)
    assert [(op.scope, op.path, op.target) for op in linked.plan] == [("bob", "a.md", "b.md")]
    assert "related" not in store.get("a.md", scope="alice").metadata
    merged = run_action(store, "full", similarity_threshold=0.0, apply=True, now=NOW)
    assert {c.scope for c in merged.changes} == {"bob"}


def test_full_passes_each_parameter_to_its_step():
    """Invariant 6: full runs merge -> cleanup -> compact with the parameters given, not defaults."""
    defaults = run_action(_messy_store(), "full", now=NOW)
    deleted = {(op.step, op.path) for op in defaults.plan if op.kind == "delete"}
    assert ("cleanup_stubs", "hot-stub.md") not in deleted  # 50 hits > max_hits 10
    assert ("compact", "junk.md") in deleted  # quality 0, 60 days old, unread
    custom = run_action(
        _messy_store(),
        "full",
        now=NOW,
        similarity_threshold=1.0,
        strategy="keep_larger",
        age_days=0,
        max_hits=100,
        min_quality_score=0,
        min_age_days=1000,
        compact_max_hits=0,
    )
    steps = {(op.step, op.kind, op.path) for op in custom.plan}
    assert ("cleanup_stubs", "delete", "hot-stub.md") in steps and (
        "cleanup_stubs",
        "delete",
        "stub.md",
    ) in steps
    assert not any(step == "compact" for step, _, _ in steps)  # nothing has quality < 0
    assert custom.params["strategy"] == "keep_larger" and custom.params["age_days"] == 0
    wide = run_action(
        _messy_store(), "full", now=NOW, min_quality_score=100, min_age_days=0, compact_max_hits=5
    )
    compacted = {op.path for op in wide.plan if op.step == "compact"}
    assert "x.md" in compacted  # 5 days old: only deleted because min_age_days=0 reached compact


# ---- usage errors (invariant 5) -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("action", "params", "field"),
    [
        ("defragment", {}, "action"),
        ("merge_duplicates", {"strategy": "newest"}, "strategy"),
        ("find_duplicates", {"similarity_threshold": 1.5}, "similarity_threshold"),
        ("find_duplicates", {"similarity_threshold": -0.1}, "similarity_threshold"),
        ("find_related", {"min_similarity": 0.9, "max_similarity": 0.5}, "min_similarity"),
        ("find_related", {"max_similarity": 2}, "max_similarity"),
        ("find_archival_candidates", {"age_days": -1}, "age_days"),
        ("cleanup_stubs", {"max_hits": -3}, "max_hits"),
        ("compact", {"min_age_days": -1}, "min_age_days"),
        ("find_low_quality", {"confidence_filter": "sure"}, "confidence_filter"),
        ("find_duplicates", {"age_days": 3}, "age_days"),
        ("merge_duplicates", {"approved": "/nonexistent.csv"}, "approved"),
    ],
)
def test_usage_errors_name_field_and_value(action, params, field):
    with pytest.raises(UsageError) as info:
        run_action(MemoryStore([entry("a.md")]), action, **params)
    assert info.value.field == field
    assert repr(next(iter(params.values()), action)) in str(info.value) or action in str(info.value)


def test_action_name_spellings():
    store = MemoryStore([entry("a.md"), entry("b.md")])
    assert run_action(store, "find-duplicates").action == run_action(store, "find_duplicates").action


# ---- merge (invariants 2, 3) ---------------------------------------------------------------------------
def test_three_duplicates_one_survivor_and_direct_stubs():
    store = MemoryStore(
        [entry("a.md", days=3), entry("b.md", days=1), entry("c.md", days=2), entry("old.md", stub_to="c.md")]
    )
    result = run_action(store, "merge_duplicates", apply=True, now=NOW)
    assert result.summary["clusters"] == [
        {"scope": "default", "survivor": "b.md", "merged": ["a.md", "c.md"], "size": 3, "density": 1.0}
    ]
    check_redirects(store)
    assert store.get("old.md").redirect_to == "b.md"  # re-pointed, not a chain
    assert store.read("a.md").path == "b.md"


def test_combine_unions_all_metadata_and_keeps_both_contents():
    a = entry(
        "a.md", "alpha text", meta={"type": "fact", "tags": ["x"], "owner": "ann", "extra": {"k": 1}}, days=2
    )
    b = entry(
        "b.md",
        "beta text",
        meta={"type": "concept", "tags": ["y", "x"], "source": "web", "extra": {"k": 2, "j": 3}},
        days=1,
    )
    merged = merge_entries(b, a, "combine", NOW)
    assert "alpha text" in merged.content and "beta text" in merged.content
    meta = merged.metadata
    assert meta["tags"] == ["y", "x"] and meta["owner"] == "ann" and meta["source"] == "web"
    assert meta["type"] == "concept" and meta["merged_values"]["type"] == [{"from": "a.md", "value": "fact"}]
    assert meta["extra"] == {"k": 2, "j": 3} and meta["merged_values"]["extra.k"] == [
        {"from": "a.md", "value": 1}
    ]
    assert meta["merged_from"] == ["a.md"]


@pytest.mark.parametrize("with_embedder", [True, False])
def test_combined_entry_is_reembedded_or_marked(with_embedder):
    store = MemoryStore([entry("a.md", BASE + " alpha", days=2), entry("b.md", BASE + " beta", days=1)])
    run_action(
        store,
        "merge_duplicates",
        strategy="combine",
        apply=True,
        now=NOW,
        embedder=EMB if with_embedder else None,
        similarity_threshold=0.8,
    )
    survivor = store.get("b.md")
    if with_embedder:
        assert np.allclose(survivor.embedding, EMB.embed([survivor.content])[0])
        assert "embedding_stale" not in survivor.metadata
    else:
        assert survivor.embedding is None and survivor.metadata["embedding_stale"] is True


def test_combine_over_the_size_limit_fails_in_preview_and_writes_nothing():
    from memwork.entry import MAX_CONTENT_BYTES

    big = "x" * (MAX_CONTENT_BYTES // 2)  # two of them, combined, are over the limit
    a, b = entry("a.md", big + " alpha", days=2), entry("b.md", big + " gamma", days=1)
    a.embedding = b.embedding  # duplicates by cosine
    store = MemoryStore([a, b])
    original = [e.to_record() for e in store.all_entries()]
    for apply in (False, True):
        with pytest.raises(UsageError, match="byte limit") as info:
            run_action(store, "merge_duplicates", strategy="combine", apply=apply, now=NOW)
        assert info.value.field == "path" and info.value.value == "b.md"
    assert [e.to_record() for e in store.all_entries()] == original
    assert [(r["changes"], r["status"][:6]) for r in list_runs()] == [(0, "failed")]  # attempt audited
    run_action(store, "merge_duplicates", strategy="keep_larger", apply=True, now=NOW)
    assert store.get("a.md").is_stub


def test_keep_newer_keeps_merged_away_content_in_journal():
    store = MemoryStore([entry("a.md", BASE + " old", days=5), entry("b.md", BASE + " new", days=1)])
    result = run_action(store, "merge_duplicates", apply=True, now=NOW, similarity_threshold=0.8)
    from memwork.defrag import read_run

    before = [c["before"] for c in read_run(result.run_id).changes if c["path"] == "a.md"]
    assert before[0]["content"] == BASE + " old"
    assert store.get("b.md").content == BASE + " new"


WORDS = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(
            st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),  # content words
            st.integers(0, 5),  # age
            st.sampled_from(["default", "other"]),
        ),
        min_size=2,
        max_size=9,
    ),
    st.lists(
        st.tuples(
            st.sampled_from(["keep_newer", "keep_larger", "combine"]), st.sampled_from([0.3, 0.5, 0.85])
        ),
        min_size=1,
        max_size=4,
    ),
)
def test_no_merge_sequence_creates_cycles_or_chains(items, runs):
    """Invariant 2, property-based: random entries, random merge sequences, every strategy."""
    entries = [
        entry(f"e{k}.md", " ".join(words), days=age, scope=scope, embed=k % 2 == 0)
        for k, (words, age, scope) in enumerate(items)
    ]
    store = MemoryStore(entries)
    for n, (strategy, threshold) in enumerate(runs):
        now = NOW + timedelta(days=n)
        run_action(
            store, "merge_duplicates", strategy=strategy, similarity_threshold=threshold, apply=True, now=now
        )
        check_redirects(store)
        # a new near-copy of an existing entry appears between runs
        live = [e for e in store.all_entries() if not e.is_stub]
        store.put(live[0].copy(path=f"new{n}.md", updated_at=now))
    for e in store.all_entries():
        assert store.read(e.path, scope=e.scope).is_stub is False


# ---- approved CSV --------------------------------------------------------------------------------------
def test_review_csv_round_trip_and_only_approved_merge(tmp_path):
    entries = [entry("a.md"), entry("b.md"), entry("c.md")]
    pairs = find_duplicates(entries)
    path = write_review_csv(pairs, tmp_path / "review.csv")
    rows = list(csv.DictReader(path.open()))
    assert len(rows) == 3
    for row in rows:
        row["decision"] = "approve" if {row["path_a"], row["path_b"]} == {"a.md", "b.md"} else "reject"
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    store = MemoryStore(entries)
    result = run_action(store, "merge_duplicates", approved=str(path), apply=True, now=NOW)
    assert {op.path for op in result.plan if op.kind == "stub"} == {"a.md"} or {
        op.path for op in result.plan if op.kind == "stub"
    } == {"b.md"}
    assert not store.get("c.md").is_stub


@pytest.mark.parametrize(
    ("row", "field"),
    [
        (["default", "a.md", "zzz.md", "0.9", "approve"], "approved row 2 path_b"),
        (["default", "a.md", "b.md", "0.9", "yes"], "approved row 2 decision"),
    ],
)
def test_review_csv_errors_name_row_and_field(tmp_path, row, field):
    path = tmp_path / "r.csv"
    with path.open("w", newline="") as fh:
        csv.writer(fh).writerows([["scope", "path_a", "path_b", "similarity", "decision"], row])
    with pytest.raises(UsageError) as info:
        run_action(MemoryStore([entry("a.md"), entry("b.md")]), "merge_duplicates", approved=str(path))
    assert info.value.field == field


# ---- full, journal, undo (invariants 4, 6) -------------------------------------------------------------
def _messy_store():
    return MemoryStore(
        [
            entry("a.md", days=200, meta={"type": "fact", "tags": ["t"]}),
            entry("b.md", days=100, meta={"type": "fact", "confidence": "high"}),
            entry("junk.md", "lorem ipsum", days=60, embed=False),
            entry("stub.md", stub_to="a.md", days=300, hits=2),
            entry("hot-stub.md", stub_to="b.md", days=300, hits=50),
            entry("x.md", "unrelated words here", days=5, scope="other"),
        ]
    )


@pytest.mark.parametrize("strategy", ["keep_newer", "keep_larger", "combine"])
def test_full_preview_equals_apply(strategy):
    preview_store, apply_store = _messy_store(), _messy_store()
    preview = run_action(preview_store, "full", now=NOW, strategy=strategy).to_dict()
    applied = run_action(apply_store, "full", now=NOW, strategy=strategy, apply=True).to_dict()
    assert preview["operations"] == applied["operations"] and preview["operations"]
    assert preview["changes"] == applied["changes"]
    after_p, after_a = preview["summary"]["health_after"], applied["summary"]["health_after"]
    assert after_p.pop("predicted") is True and after_a.pop("predicted") is False
    assert after_p == after_a
    assert [s["action"] for s in applied["summary"]["steps"]] == [
        "merge_duplicates",
        "supersede",
        "cleanup_stubs",
        "compact",
    ]
    assert preview_store.all_entries()[0].to_record() == _messy_store().all_entries()[0].to_record()
    check_redirects(apply_store)


def test_undo_restores_exactly_and_is_journaled():
    store = _messy_store()
    original = [e.to_record() for e in store.all_entries()]
    result = run_action(store, "full", now=NOW, strategy="combine", apply=True)
    assert [e.to_record() for e in store.all_entries()] != original
    undo_id, _ = undo(result.run_id, store)
    assert [e.to_record() for e in store.all_entries()] == original
    runs = {r["run_id"]: r for r in list_runs()}
    assert runs[result.run_id]["undone_by"] == undo_id and runs[undo_id]["undoes"] == result.run_id
    with pytest.raises(Exception, match="already undone"):
        undo(result.run_id, store)


def test_link_related_bidirectional_and_idempotent():
    texts = ["alpha beta gamma delta", "alpha beta gamma epsilon zeta eta", "theta iota kappa"]
    store = MemoryStore([entry(f"{k}.md", t) for k, t in enumerate(texts)])
    found = run_action(store, "find_related", min_similarity=0.3, max_similarity=0.85)
    assert found.pairs and {p.link_status for p in found.pairs} == {"unlinked"}
    run_action(store, "link_related", min_similarity=0.3, max_similarity=0.85, apply=True)
    again = run_action(store, "find_related", min_similarity=0.3, max_similarity=0.85)
    assert {p.link_status for p in again.pairs} == {"bidirectional"}
    assert len(run_action(store, "link_related", min_similarity=0.3, max_similarity=0.85).plan) == 0
    assert "memory://1.md" in store.get("0.md").metadata["related"]


def test_scans_never_count_hits():
    store = _messy_store()
    hits = {e.key: e.hits for e in store.all_entries()}
    for action in ("analyze", "find_duplicates", "find_related", "find_low_quality", "full"):
        run_action(store, action, now=NOW)
    assert {e.key: e.hits for e in store.all_entries()} == hits


def test_cjk_duplicates_use_similarity_tokenize():
    """Invariant 7: the engine's Jaccard comes from similarity.tokenize (CJK bigrams)."""
    entries = [
        entry("zh1.md", "数据库清理死元组以回收存储空间", embed=False),
        entry("zh2.md", "数据库清理死元组以回收磁盘空间", embed=False),
    ]
    pairs = find_duplicates(entries, 0.5)
    assert [(p.path_a, p.path_b) for p in pairs] == [("zh1.md", "zh2.md")]
    assert pairs[0].semantic_similarity is None and 0.5 <= pairs[0].text_similarity < 1


def test_journal_records_run_and_images():
    from memwork.defrag import read_run

    store = _messy_store()
    result = run_action(store, "cleanup_stubs", apply=True, now=NOW)
    run = read_run(result.run_id)
    header = run.header
    assert header["action"] == "cleanup_stubs" and header["params"] == {"age_days": 90, "max_hits": 10}
    assert header["store"].startswith("memory") and header["started_at"]
    assert [(c["path"], c["after"]) for c in run.changes] == [("stub.md", None)]
    assert run.changes[0]["before"]["hits"] == 2 and run.footer["status"] == "ok"


# ---- progress ----------------------------------------------------------------------------------------
def test_run_action_reports_progress_with_sensible_totals(progress_recorder):
    store = _messy_store()  # 6 entries, 2 of them stubs
    rec = progress_recorder()
    result = run_action(store, "find_duplicates", progress=rec, now=NOW)
    assert result.pairs
    assert [s[0] for s in rec.stages] == ["loading entries", "finding duplicates"]
    assert rec.totals() == {"loading entries": 6, "finding duplicates": 4}  # stubs are not compared
    assert all(total == advanced for _, total, advanced in rec.stages)

    rec = progress_recorder()
    run_action(store, "find_related", min_similarity=0.1, progress=rec, now=NOW)
    assert rec.totals() == {"loading entries": 6, "finding related pairs": 4}
    assert all(total == advanced for _, total, advanced in rec.stages)

    rec = progress_recorder()
    run_action(store, "analyze", scope="other", progress=rec, now=NOW)
    assert rec.stages == [["loading entries", 1, 1]]


def test_full_apply_reports_every_stage_and_undo_too(progress_recorder):
    store = _messy_store()
    rec = progress_recorder()
    result = run_action(store, "full", apply=True, progress=rec, now=NOW)
    names = [s[0] for s in rec.stages]
    assert names[:2] == ["loading entries", "finding duplicates"]
    assert "applying merge_duplicates" in names and names[-1] == "loading entries"
    applied = sum(t for d, t, _ in rec.stages if d.startswith("applying"))
    assert applied == len(result.changes) > 0
    assert all(total == advanced for _, total, advanced in rec.stages)
    rec = progress_recorder()
    _, changes = undo(result.run_id, store, progress=rec)
    assert rec.stages == [["restoring entries", len(changes), len(changes)]]


def test_progress_changes_nothing_in_the_result(progress_recorder):
    plain = run_action(_messy_store(), "full", now=NOW).to_dict()
    tracked = run_action(_messy_store(), "full", now=NOW, progress=progress_recorder()).to_dict()
    assert plain == tracked
