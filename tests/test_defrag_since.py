"""``--since RUN_ID|TIMESTAMP``: an incremental run returns exactly the full run's pairs that hold an
entry created or changed since then (same scores), comparing only those entries against their scope."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memwork.cli import main
from memwork.defrag import plan_merge_duplicates, run_action
from memwork.defrag.calibrate import BASE_FEATURES, CHAR_FEATURE, Policy, find_policy_pairs
from memwork.defrag.findings import Pair, changed_since, find_duplicates, find_related
from memwork.defrag.planners import policy_pairs
from memwork.defrag.review_queue import store_embedding_model
from memwork.defrag.since import resolve_since, run_start
from memwork.entry import Entry
from memwork.errors import UsageError
from memwork.similarity import find_duplicate_pairs, find_related_pairs
from memwork.stores import open_store
from memwork.stores.memory import MemoryStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SINCE = T0 + timedelta(days=10)
WORDS = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"]
SCOPES = ("default", "alice", "bob")


def touches(pair: Pair, changed: set[tuple[str, str]]) -> bool:
    return (pair.scope, pair.path_a) in changed or (pair.scope, pair.path_b) in changed


@st.composite
def stores(draw: st.DrawFn) -> list[Entry]:
    """A few scopes of entries from a small vocabulary (many pairs) with 4-d vectors near a few
    directions (some missing, some a copy), a random subset changed at or after ``SINCE``."""
    n = draw(st.integers(2, 24))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((3, 4))
    entries = []
    for k in range(n):
        words = rng.choice(WORDS, size=int(rng.integers(1, 5)))
        content = " ".join(words) if rng.random() > 0.15 else (entries[-1].content if entries else "alpha")
        vector = None if rng.random() < 0.2 else base[rng.integers(0, 3)] + 0.25 * rng.standard_normal(4)
        created = T0 + timedelta(days=int(rng.integers(0, 20)))
        updated = created + timedelta(days=int(rng.integers(0, 3)))
        entries.append(
            Entry(
                path=f"fact/{k:02d}.md",
                content=content,
                scope=SCOPES[int(rng.integers(0, 3))],
                embedding=None if vector is None else vector.astype(np.float32),
                created_at=created,
                updated_at=updated,
            )
        )
    return entries


HYPO = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@HYPO
@given(stores(), st.sampled_from([0.0, 0.3, 0.5, 0.7, 0.85, 1.0]))
def test_since_duplicates_equal_full_run_filtered(entries, threshold):
    changed = {e.key for e in entries if changed_since(e, SINCE)}
    full = find_duplicates(entries, threshold)
    assert find_duplicates(entries, threshold, since=SINCE) == [p for p in full if touches(p, changed)]


@HYPO
@given(stores(), st.sampled_from([(0.0, 0.5), (0.3, 0.9), (0.6, 0.85), (0.5, 0.5)]))
def test_since_related_equal_full_run_filtered(entries, band):
    changed = {e.key for e in entries if changed_since(e, SINCE)}
    full = find_related(entries, *band)
    assert find_related(entries, *band, since=SINCE) == [p for p in full if touches(p, changed)]


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 2**16), st.sampled_from([0.0, 0.4, 0.8]))
def test_pair_search_changed_rows_equal_full_search(seed, threshold):
    """The join itself: candidates from the changed rows only, each new x new pair once."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    texts = [" ".join(rng.choice(WORDS, size=int(rng.integers(0, 5)))) for _ in range(n)]
    base = rng.standard_normal((2, 6))
    vectors = [None if rng.random() < 0.2 else base[k % 2] + 0.4 * rng.standard_normal(6) for k in range(n)]
    rows = np.flatnonzero(rng.random(n) < 0.3)
    keep = set(rows.tolist())
    full = find_duplicate_pairs(texts, vectors, threshold)
    assert find_duplicate_pairs(texts, vectors, threshold, changed=rows) == [
        p for p in full if p.i in keep or p.j in keep
    ]
    full = find_related_pairs(vectors, threshold, min(1.0, threshold + 0.3), texts)
    assert find_related_pairs(vectors, threshold, min(1.0, threshold + 0.3), texts, changed=rows) == [
        p for p in full if p.i in keep or p.j in keep
    ]


# ---- merges: the clusters holding a changed entry, each decided as a full run decides it -------------------
def _merges(planned) -> dict[str, tuple]:
    return {op.path: (op.kind, op.target) for op in planned.plan if op.kind in ("merge", "stub")}


@HYPO
@given(stores(), st.sampled_from([0.5, 0.7, 0.85]), st.sampled_from([0.0, 0.7, 1.0]))
def test_since_merge_plans_the_full_runs_clusters_holding_a_changed_entry(entries, threshold, density):
    full = plan_merge_duplicates(entries, threshold, min_cluster_density=density)
    since = plan_merge_duplicates(entries, threshold, min_cluster_density=density, since=SINCE)
    _assert_same_clusters(entries, full, since)


@HYPO
@given(stores())
def test_since_with_a_policy_equals_the_full_run(entries):
    """The policy's pairs and merges (auto_merge / review decisions) the same way."""
    policy = Policy(store_embedding_model(entries), (6.0, 6.0), -7.0, 0.8, 0.4, 0.3, 0.99, "0" * 64)
    changed = {e.key for e in entries if changed_since(e, SINCE)}
    full = find_policy_pairs(entries, policy)
    assert policy_pairs(entries, policy, since=SINCE) == [p for p in full if touches(p, changed)]
    _assert_same_clusters(
        entries,
        plan_merge_duplicates(entries, policy=policy),
        plan_merge_duplicates(entries, policy=policy, since=SINCE),
    )


@HYPO
@given(stores())
def test_since_with_a_three_signal_policy_equals_the_full_run(entries):
    """A policy that weighs the character similarity too (what ``defrag calibrate`` writes) scores the
    incremental pairs with it, as the full run does (it raised before: no character similarity)."""
    features = (*BASE_FEATURES, CHAR_FEATURE)
    policy = Policy(
        store_embedding_model(entries),
        (4.0, 4.0, 3.0),
        -7.0,
        0.8,
        0.4,
        0.3,
        0.99,
        "0" * 64,
        features=features,
    )
    assert policy.uses_char
    changed = {e.key for e in entries if changed_since(e, SINCE)}
    full = find_policy_pairs(entries, policy)
    assert policy_pairs(entries, policy, since=SINCE) == [p for p in full if touches(p, changed)]


def _assert_same_clusters(entries, full, since):
    """``since`` plans exactly ``full``'s clusters that hold a changed entry, with their pairs."""
    changed = {e.key for e in entries if changed_since(e, SINCE)}

    def members(cluster):
        return {cluster["survivor"], *cluster["merged"], *cluster.get("chained", [])} - {None}

    kept = [c for c in full.clusters if any((c["scope"], m) in changed for m in members(c))]
    assert since.clusters == kept
    touched = {(c["scope"], m) for c in kept for m in members(c)} | changed
    assert since.pairs == [p for p in full.pairs if touches(p, touched)]
    assert _merges(since) == {
        path: op for path, op in _merges(full).items() if any(path in members(c) for c in kept)
    }


def _plane(path: str, degrees: float, updated: datetime) -> Entry:
    """Own words (Jaccard 0 with any other), a vector at ``degrees`` in a plane."""
    rad = math.radians(degrees)
    vector = np.zeros(8, dtype=np.float32)
    vector[:2] = (math.cos(rad), math.sin(rad))
    return Entry(path=path, content=f"{path} own words", embedding=vector, created_at=T0, updated_at=updated)


def test_since_merge_pulls_the_old_members_of_a_new_entrys_cluster():
    """a and b old and alike, c new and like both: the incremental merge must see a ~ b (an old x old
    pair) or the cluster's density looks 2/3 and it would be held as chained instead of merged."""
    entries = [_plane("a.md", 0, T0), _plane("b.md", 3, T0), _plane("c.md", 6, SINCE)]
    planned = plan_merge_duplicates(entries, 0.85, since=SINCE)
    assert planned.clusters == plan_merge_duplicates(entries, 0.85).clusters
    assert planned.clusters[0]["density"] == 1.0 and planned.clusters[0]["size"] == 3
    assert {(p.path_a, p.path_b) for p in planned.pairs} == {
        ("a.md", "b.md"),
        ("a.md", "c.md"),
        ("b.md", "c.md"),
    }
    assert find_duplicates(entries, 0.85, since=SINCE) != planned.pairs  # find lists the new pairs only


def test_since_merge_leaves_clusters_of_old_entries_alone():
    entries = [
        _plane("a.md", 0, T0),
        _plane("b.md", 2, T0),
        _plane("c.md", 90, SINCE),
        _plane("d.md", 92, T0),
    ]
    planned = plan_merge_duplicates(entries, 0.85, since=SINCE)
    assert [c["merged"] + [c["survivor"]] for c in planned.clusters] == [["d.md", "c.md"]]
    assert {op.path for op in planned.plan if op.kind == "merge"} == {"d.md"}


# ---- a store that changed between runs; RUN_ID resolves to run 1's start ---------------------------------
def _text_store() -> MemoryStore:
    texts = ["the deploy needs the vpn token", "the deploy needs the vpn token today",
             "lunch is at noon", "cats sleep a lot", "cats sleep a lot every day"]  # fmt: skip
    return MemoryStore(
        Entry(path=f"{k}.md", content=t, scope=s, created_at=T0, updated_at=T0)
        for s in ("default", "alice")
        for k, t in enumerate(texts)
    )


def test_run_id_form_equals_full_run_on_a_store_changed_between_runs():
    store = _text_store()
    run1 = T0 + timedelta(days=30)
    first = run_action(store, "merge_duplicates", similarity_threshold=0.7, apply=True, now=run1)
    assert first.run_id and resolve_since(first.run_id).at == run1  # its clock: before started_at
    later = run1 + timedelta(hours=1)
    store.put(
        Entry(path="5.md", content="cats sleep a lot every single day", created_at=later, updated_at=later)
    )
    edited = store.get("2.md")
    assert edited is not None
    edited.content, edited.updated_at = "the deploy needs the vpn token now", later
    store.put(edited)
    store.put(
        Entry(path="9.md", content="lunch is at noon", scope="alice", created_at=later, updated_at=later)
    )

    for action, knobs in (
        ("find_duplicates", {"similarity_threshold": 0.5}),
        ("find_related", {"min_similarity": 0.0, "max_similarity": 1.0}),
    ):
        full = run_action(store, action, **knobs)
        incremental = run_action(store, action, since=first.run_id, **knobs)
        changed = {e.key for e in store.all_entries() if changed_since(e, run1) and not e.is_stub}
        assert incremental.pairs == [p for p in full.pairs if touches(p, changed)]
        assert incremental.params["since"] == first.run_id
        assert incremental.summary["since"] == {
            "given": first.run_id,
            "from": run1.isoformat(),
            "run_id": first.run_id,
        }
        assert incremental.summary["changed_entries"] == len(changed)
    pairs = run_action(store, "find_duplicates", similarity_threshold=0.5, since=first.run_id).pairs
    found = {(p.scope, p.path_a, p.path_b) for p in pairs}
    assert ("alice", "2.md", "9.md") in found  # an added entry's copy in another scope
    assert any(s == "default" and "2.md" in (a, b) for s, a, b in found)  # the edited one, now a near copy
    merge = run_action(store, "merge_duplicates", similarity_threshold=0.7, since=first.run_id)
    assert (
        merge.to_dict()["params"]["since"] == first.run_id
        and merge.summary["since"]["run_id"] == first.run_id
    )


def test_run_start_is_the_earlier_of_started_at_and_clock():
    header = {"run_id": "r", "started_at": "2026-01-02T00:00:00+00:00", "clock": "2026-01-03T00:00:00+00:00"}
    assert run_start(header) == datetime(2026, 1, 2, tzinfo=UTC)
    assert run_start({"run_id": "r", "started_at": "2026-01-02T00:00:00+00:00"}) == datetime(
        2026, 1, 2, tzinfo=UTC
    )


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("yesterday", "neither a time nor a run"),
        ("2026-01-01T00:00:00", "needs a timezone"),
        ("", "--since"),
        ("20260101T000000Z-abcdef", "neither a time nor a run"),
    ],
)
def test_bad_since_is_a_usage_error(value, why):
    with pytest.raises(UsageError, match=why) as caught:
        resolve_since(value)
    assert caught.value.field == "since"


def test_aware_times_and_datetimes_resolve():
    assert resolve_since("2026-01-02T03:04:05Z").at == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert resolve_since("2026-01-02T04:04:05+01:00").at == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert resolve_since(T0).given == T0.isoformat()


# ---- CLI ---------------------------------------------------------------------------------------------
@pytest.fixture
def store_dir(tmp_path):
    spec = str(tmp_path / "mem")
    with open_store(spec, create=True) as store:
        for entry in _text_store().all_entries():
            store.put(entry)
    return spec


@pytest.mark.parametrize("action", ["find-duplicates", "find-related", "merge-duplicates", "review"])
@pytest.mark.parametrize("value", ["last-tuesday", "2026-01-01 00:00"])
def test_cli_bad_since_exits_2_one_line(store_dir, action, value):
    result = CliRunner().invoke(main, ["defrag", action, "--store", store_dir, "--since", value])
    assert result.exit_code == 2
    assert f"since={value!r}" in result.output and "--since" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def test_cli_since_run_id_and_timestamp(store_dir, tmp_path):
    runner = CliRunner()
    first = runner.invoke(main, ["defrag", "merge-duplicates", "--store", store_dir, "--apply", "--json"])
    assert first.exit_code == 0, first.output
    run_id = json.loads(first.output)["run_id"]
    found = runner.invoke(
        main, ["defrag", "find-duplicates", "--store", store_dir, "--since", run_id, "--json"]
    )
    assert found.exit_code == 0, found.output
    data = json.loads(found.output)
    assert data["params"]["since"] == run_id and data["summary"]["since"]["run_id"] == run_id
    out = tmp_path / "review.csv"
    review = runner.invoke(
        main,
        [
            "defrag",
            "review",
            "--store",
            store_dir,
            "--since",
            "2020-01-01T00:00:00Z",
            "-o",
            str(out),
            "--json",
        ],
    )
    assert review.exit_code == 0, review.output
    assert json.loads(review.output)["since"]["from"] == "2020-01-01T00:00:00+00:00"
    both = runner.invoke(
        main,
        ["defrag", "review", "--store", store_dir, "--since", run_id, "--sample-pairs", "5", "-o", str(out)],
    )
    assert both.exit_code == 2 and "--sample-pairs" in both.output
