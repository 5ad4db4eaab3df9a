"""Similarity primitives and the exact all-pairs search, against the guide's plain pairwise loop."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memwork import similarity
from memwork.errors import UsageError
from memwork.similarity import (
    PairScore,
    cosine,
    find_duplicate_pairs,
    find_related_pairs,
    jaccard,
    tokenize,
)

# --- reference: the guide's algorithm, one pair at a time ----------------------------------------


def brute_duplicates(texts, embeddings, threshold):
    """The guide's double loop: every pair, hybrid max(Jaccard, cosine) >= threshold."""
    pairs = []
    for i in range(len(texts)):
        for j in range(i + 1, len(texts)):
            pair = PairScore(i, j, jaccard(texts[i], texts[j]), cosine(embeddings[i], embeddings[j]))
            if pair.similarity >= threshold:
                pairs.append(pair)
    return sorted(pairs, key=lambda p: (-p.similarity, p.i, p.j))


def brute_related(embeddings, low, high, texts=None):
    """Every embedded pair with low <= cosine < high."""
    pairs = []
    for i in range(len(embeddings)):
        for j in range(i + 1, len(embeddings)):
            score = cosine(embeddings[i], embeddings[j])
            if score is not None and low <= score < high:
                text = jaccard(texts[i], texts[j]) if texts is not None else 0.0
                pairs.append(PairScore(i, j, text, score))
    return sorted(pairs, key=lambda p: (-p.similarity, p.i, p.j))


# --- tokenize -------------------------------------------------------------------------------------


def test_tokenize_english_words_lowercased_set():
    assert tokenize("The cat saw the CAT") == {"the", "cat", "saw"}


def test_tokenize_punctuation_splits_and_keeps_underscore_and_digits():
    assert tokenize("foo-bar, baz.qux! snake_case v2 (x)") == {
        "foo",
        "bar",
        "baz",
        "qux",
        "snake_case",
        "v2",
        "x",
    }


def test_tokenize_empty_and_symbols_only():
    assert tokenize("") == frozenset()
    assert tokenize("  -- !! ... ") == frozenset()


def test_tokenize_emoji_are_tokens_so_different_emoji_are_different_memories():
    # "\\w+" drops emoji: these two were one word set (Jaccard 1.0) and a duplicate pair
    assert jaccard("I love 🍕", "I love 🍣") == 0.5
    assert jaccard("I love 🍕", "i LOVE 🍕") == 1.0
    assert tokenize("Pay 5€ or 5¥") == {"pay", "5", "or", "€", "¥"}
    assert tokenize("我爱🍕") == {"我爱", "🍕"}
    # a skin tone is a symbol of its own; a zero-width joiner is not a token
    assert tokenize("👍🏽\u200d ok") == {"👍", "🏽", "ok"}


@given(st.text(alphabet=st.sampled_from("abc 🍕🍣😀€"), max_size=30))
def test_tokenize_keeps_every_non_ascii_symbol(text):
    assert {c for c in text if not c.isascii()} <= tokenize(text)


def test_tokenize_chinese_bigrams():
    assert tokenize("数据库迁移") == {"数据", "据库", "库迁", "迁移"}


def test_tokenize_single_cjk_char_is_unigram():
    assert tokenize("我 是") == {"我", "是"}


def test_tokenize_japanese_kana_and_kanji_bigrams():
    assert tokenize("東京タワー") == {"東京", "京タ", "タワ", "ワー"}
    assert tokenize("すし、ラーメン") == {"すし", "ラー", "ーメ", "メン"}


def test_tokenize_hangul_bigrams():
    assert tokenize("한국어") == {"한국", "국어"}


def test_tokenize_mixed_scripts_split_runs():
    # a \w+ word mixing Latin and CJK: Latin part stays a word, CJK runs become bigrams
    assert tokenize("用Python写代码 and PostgreSQL数据库") == {
        "用",
        "python",
        "写代",
        "代码",
        "and",
        "postgresql",
        "数据",
        "据库",
    }


def test_tokenize_chinese_jaccard_is_graded():
    a, b = "数据库迁移方案", "数据库备份方案"
    assert 0.0 < jaccard(a, b) < 1.0


# --- jaccard / cosine -----------------------------------------------------------------------------


def test_jaccard_values_and_edges():
    assert jaccard("a b", "b c") == pytest.approx(1 / 3)
    assert jaccard("", "") == 0.0
    assert jaccard("a", "") == 0.0
    assert jaccard("A b", "a B") == 1.0
    assert jaccard(frozenset({"a"}), "a") == 1.0


def test_cosine_edges():
    assert cosine(None, [1.0]) is None
    assert cosine([1.0], None) is None
    assert cosine([0.0, 0.0], [1.0, 2.0]) == 0.0
    assert cosine([1.0, 0.0], [0.0, 1.0]) == 0.0
    assert cosine([1.0, 1.0], [-1.0, -1.0]) == pytest.approx(-1.0)
    assert cosine([1.0, 0.0], [1.0, 1.0]) == pytest.approx(1 / math.sqrt(2))
    assert cosine(np.array([3.0, 4.0], dtype=np.float32), [3.0, 4.0]) == 1.0


def test_cosine_is_clipped():
    v = np.array([0.1, 0.2, 0.3])
    assert -1.0 <= cosine(v, v * 7) <= 1.0


def test_cosine_dimension_mismatch_is_usage_error():
    with pytest.raises(UsageError):
        cosine([1.0, 2.0], [1.0])


def test_pair_score_similarity_is_max_of_present():
    assert PairScore(0, 1, 0.3, None).similarity == 0.3
    assert PairScore(0, 1, 0.3, 0.9).similarity == 0.9
    assert PairScore(0, 1, 0.95, 0.9).similarity == 0.95


# --- validation -----------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [-0.1, 1.01, float("nan"), float("inf"), "0.5", None, True])
def test_duplicate_threshold_outside_unit_interval_is_usage_error(bad):
    with pytest.raises(UsageError) as err:
        find_duplicate_pairs(["a"], [None], bad)
    assert err.value.field == "similarity_threshold"


def test_related_bounds_validated_and_named():
    with pytest.raises(UsageError) as err:
        find_related_pairs([None], 1.2, 1.0)
    assert err.value.field == "min_similarity"
    with pytest.raises(UsageError) as err:
        find_related_pairs([None], 0.5, -1)
    assert err.value.field == "max_similarity"
    with pytest.raises(UsageError) as err:
        find_related_pairs([None], 0.9, 0.6)
    assert err.value.field == "min_similarity"


def test_length_mismatch_is_usage_error():
    with pytest.raises(UsageError):
        find_duplicate_pairs(["a", "b"], [None], 0.5)
    with pytest.raises(UsageError):
        find_related_pairs([None], 0.5, 0.8, texts=["a", "b"])


def test_mixed_dimensions_is_usage_error():
    with pytest.raises(UsageError):
        find_duplicate_pairs(["a", "b"], [np.ones(3), np.ones(4)], 0.5)


# --- behaviour on small hand-made cases -----------------------------------------------------------


def test_empty_and_single_inputs():
    assert find_duplicate_pairs([], [], 0.5) == []
    assert find_duplicate_pairs(["a"], [np.ones(3)], 0.5) == []
    assert find_related_pairs([], 0.6, 0.85) == []


def test_jaccard_boundary_half_is_included():
    texts = ["a b c", "a b d", "q"]  # J(0,1) = 2/4 = 0.5 exactly
    pairs = find_duplicate_pairs(texts, [None] * 3, 0.5)
    assert pairs == [PairScore(0, 1, 0.5, None)]


def test_threshold_zero_returns_every_pair():
    pairs = find_duplicate_pairs(["", "a", "b"], [None, None, None], 0.0)
    assert [(p.i, p.j) for p in pairs] == [(0, 1), (0, 2), (1, 2)]


def test_semantic_only_duplicate_and_sort_order():
    texts = ["alpha beta", "gamma delta", "alpha beta"]
    emb = [np.array([1.0, 0.0]), np.array([0.99, 0.01]), None]
    pairs = find_duplicate_pairs(texts, emb, 0.85)
    assert [(p.i, p.j) for p in pairs] == [(0, 2), (0, 1)]
    assert pairs[0].semantic_similarity is None and pairs[0].similarity == 1.0
    assert pairs[1].text_similarity == 0.0 and pairs[1].semantic_similarity > 0.99


def test_related_excludes_upper_bound_and_unembedded():
    emb = [np.array([1.0, 0.0]), np.array([1.0, 1.0]), None, np.array([1.0, 0.0])]
    pairs = find_related_pairs(emb, 0.6, 0.85, texts=["a b", "a c", "a", "z"])
    assert [(p.i, p.j) for p in pairs] == [(0, 1), (1, 3)]
    assert pairs[0].text_similarity == pytest.approx(1 / 3)
    assert find_related_pairs(emb, 0.6, 1.0)[0].i == 0  # (0,3) has cosine 1.0: excluded by < 1.0


def test_batch_cosine_matches_scalar_bitwise():
    rng = np.random.default_rng(7)
    emb = [rng.standard_normal(384).astype(np.float32) for _ in range(40)]
    pairs = find_related_pairs(emb, 0.0, 1.0)
    for p in pairs:
        assert p.semantic_similarity == cosine(emb[p.i], emb[p.j])


def test_blocked_cosine_join_with_tiny_blocks(monkeypatch):
    monkeypatch.setattr(similarity, "_PANEL_ROWS", 4)
    monkeypatch.setattr(similarity, "_TILE_COLS", 7)
    monkeypatch.setattr(similarity, "_MIN_BLOCK_ROWS", 1)
    monkeypatch.setattr(similarity, "_COSINE_VERIFY_CHUNK", 3)
    monkeypatch.setattr(similarity, "_BUILD_CHUNK", 4)
    monkeypatch.setattr(similarity, "_SPARSE_BUDGET", 3)
    monkeypatch.setattr(similarity, "_VERIFY_CHUNK", 5)
    rng = np.random.default_rng(3)
    base = rng.standard_normal((6, 16))
    emb = [base[k % 6] + 0.05 * rng.standard_normal(16) for k in range(30)]
    words = ["red", "green", "blue", "cat", "dog", "sun", "moon"]
    texts = [" ".join(rng.choice(words, 4)) for _ in range(30)]
    assert find_duplicate_pairs(texts, emb, 0.8) == brute_duplicates(texts, emb, 0.8)
    assert find_related_pairs(emb, 0.3, 0.9, texts) == brute_related(emb, 0.3, 0.9, texts)


# --- properties: equal to the brute-force reference -----------------------------------------------

WORDS = ["a", "b", "c", "d", "e", "f", "数据", "库", "東京", "x_y"]
texts_st = st.lists(st.sampled_from(WORDS), max_size=6).map(" ".join)
component = st.sampled_from([-2.0, -1.0, -0.5, 0.0, 0.0, 0.5, 1.0, 2.0, 3.0])
threshold_st = st.one_of(
    st.sampled_from([0.0, 1 / 3, 0.25, 0.5, 2 / 3, 0.75, 0.8, 0.85, 0.9, 1.0]),
    st.floats(min_value=0.0, max_value=1.0),
)


@st.composite
def stores(draw, max_size=14):
    n = draw(st.integers(min_value=0, max_value=max_size))
    dim = draw(st.integers(min_value=1, max_value=5))
    pool = draw(st.lists(texts_st, min_size=1, max_size=5))  # shared texts -> duplicates
    texts = [draw(st.one_of(st.sampled_from(pool), texts_st)) for _ in range(n)]
    vec_pool = draw(st.lists(st.lists(component, min_size=dim, max_size=dim), min_size=1, max_size=4))
    vector = st.one_of(st.none(), st.sampled_from(vec_pool), st.lists(component, min_size=dim, max_size=dim))
    embeddings = [draw(vector) for _ in range(n)]
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    return texts, [None if v is None else np.array(v, dtype=dtype) for v in embeddings]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stores(), threshold_st)
def test_find_duplicate_pairs_equals_brute_force(store, threshold):
    texts, embeddings = store
    assert find_duplicate_pairs(texts, embeddings, threshold) == brute_duplicates(
        texts, embeddings, threshold
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stores(), threshold_st, threshold_st, st.booleans())
def test_find_related_pairs_equals_brute_force(store, a, b, with_texts):
    texts, embeddings = store
    low, high = min(a, b), max(a, b)
    given_texts = texts if with_texts else None
    got = find_related_pairs(embeddings, low, high, given_texts)
    assert got == brute_related(embeddings, low, high, given_texts)


@settings(max_examples=100, deadline=None)
@given(st.lists(texts_st, max_size=25), threshold_st)
def test_text_only_join_equals_brute_force(texts, threshold):
    embeddings = [None] * len(texts)
    assert find_duplicate_pairs(texts, embeddings, threshold) == brute_duplicates(
        texts, embeddings, threshold
    )


@pytest.mark.parametrize("threshold", [0.3, 0.5, 0.6, 2 / 3, 0.75, 0.85, 0.9, 1.0])
def test_text_join_on_larger_random_store(threshold):
    rng = np.random.default_rng(int(threshold * 1000))
    words = [f"w{k}" for k in range(40)]
    weights = 1.0 / np.arange(1, 41)
    texts = [
        " ".join(rng.choice(words, int(rng.integers(0, 9)), p=weights / weights.sum())) for _ in range(150)
    ]
    texts += [texts[int(k)] + " extra" for k in rng.integers(0, 150, 30)]
    embeddings = [None] * len(texts)
    assert find_duplicate_pairs(texts, embeddings, threshold) == brute_duplicates(
        texts, embeddings, threshold
    )


# --- progress -------------------------------------------------------------------------------------
class Calls(list):
    """A :class:`memwork.progress.Progress` whose stage the caller started: it records each advance."""

    def start(self, description: str, total: int | None) -> None:
        raise AssertionError("a search advances its caller's stage, it never starts one")

    def advance(self, n: int = 1) -> None:
        self.append(n)


@pytest.mark.parametrize("embedded", [True, False])
@pytest.mark.parametrize("threshold", [0.0, 0.8])
def test_progress_advances_per_block_and_sums_to_row_count(monkeypatch, embedded, threshold):
    """The callback is called per block of rows, never backwards, and sums to len(texts)."""
    monkeypatch.setattr(similarity, "_PANEL_ROWS", 4)  # many cosine panels and tiles
    monkeypatch.setattr(similarity, "_TILE_COLS", 7)
    monkeypatch.setattr(similarity, "_MIN_BLOCK_ROWS", 1)
    monkeypatch.setattr(similarity, "_SPARSE_BUDGET", 3)  # many Jaccard blocks
    rng = np.random.default_rng(5)
    emb = [rng.standard_normal(16) if embedded else None for _ in range(300)]
    texts = [" ".join(rng.choice(["red", "green", "blue", "cat", "dog"], 3)) for _ in range(300)]
    calls = Calls()
    got = find_duplicate_pairs(texts, emb, threshold, progress=calls)
    assert got == find_duplicate_pairs(texts, emb, threshold)  # progress changes nothing found
    assert sum(calls) == 300 and all(n > 0 for n in calls)
    if threshold > 0:
        assert len(calls) >= 3, calls  # reported as blocks finish, not once at the end

    calls.clear()
    find_related_pairs(emb, 0.1, 0.9, texts, progress=calls)
    assert sum(calls) == 300 and all(n > 0 for n in calls)
    if embedded:
        assert len(calls) >= 3, calls


def test_progress_on_empty_input_is_never_called():
    calls = Calls()
    assert find_duplicate_pairs([], [], 0.5, progress=calls) == []
    assert find_related_pairs([], 0.5, 0.8, progress=calls) == []
    assert calls == []


# --- the tiled cosine join at its float32 limit: pairs right at the threshold ----------------------
@st.composite
def clustered_vectors(draw):
    """Near-duplicate clusters in up to 96 dims (float32 or float64 input, some missing, one zero),
    so many pair cosines lie within float32 rounding of each other and of 1."""
    seed = draw(st.integers(min_value=0, max_value=2**32 - 1))
    n = draw(st.integers(min_value=2, max_value=40))
    dim = draw(st.sampled_from([3, 17, 64, 96]))
    spread = draw(st.sampled_from([1e-7, 1e-4, 1e-2, 0.3]))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((max(1, n // 4), dim))
    rows = centres[rng.integers(0, len(centres), n)] + spread * rng.standard_normal((n, dim))
    rows[rng.random(n) < 0.05] = 0.0
    embeddings = [None if rng.random() < 0.1 else row.astype(dtype) for row in rows]
    return embeddings


def _pair_cosines(embeddings):
    return sorted(
        {
            score
            for i in range(len(embeddings))
            for j in range(i + 1, len(embeddings))
            if (score := cosine(embeddings[i], embeddings[j])) is not None
        }
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clustered_vectors(), st.data())
def test_tiled_cosine_join_equals_float64_reference_at_the_threshold(monkeypatch_tiles, embeddings, data):
    """A threshold equal to some pair's exact float64 cosine (so that pair sits exactly on it, and
    its neighbours within float32 rounding): the same pairs and bitwise the same scores as the
    brute-force float64 loop, through many small tiles, diagonal tiles and verify chunks."""
    scores = _pair_cosines(embeddings)
    if not scores:
        return
    at = data.draw(st.sampled_from(scores))
    texts = [""] * len(embeddings)
    if 0.0 < at <= 1.0:
        assert find_duplicate_pairs(texts, embeddings, at) == brute_duplicates(texts, embeddings, at)
    low = max(0.0, at)
    high = data.draw(st.sampled_from([s for s in scores if s >= low] + [1.0]))
    assert find_related_pairs(embeddings, low, high) == brute_related(embeddings, low, high)


@pytest.fixture(scope="module")
def monkeypatch_tiles():
    """Tiny tiles for the whole module's property test (hypothesis reuses one fixture value)."""
    patch = pytest.MonkeyPatch()
    for name, value in [
        ("_PANEL_ROWS", 5),
        ("_TILE_COLS", 7),
        ("_MIN_BLOCK_ROWS", 1),
        ("_COSINE_VERIFY_CHUNK", 4),
        ("_BUILD_CHUNK", 6),
    ]:
        patch.setattr(similarity, name, value)
    yield
    patch.undo()


def test_cosine_slack_covers_float32_rounding_in_high_dimensions():
    """The candidate band grows with the dimension: 4096-d unit rows still keep every exact pair."""
    assert similarity._cosine_slack(384) == similarity._COSINE_SLACK
    assert similarity._cosine_slack(4096) > 4096 * 2.0**-24
    rng = np.random.default_rng(11)
    base = rng.standard_normal(4096)
    emb = [(base + 0.02 * rng.standard_normal(4096)).astype(np.float32) for _ in range(12)]
    scores = _pair_cosines(emb)
    for at in scores[:: max(1, len(scores) // 8)]:
        assert find_related_pairs(emb, at, 1.0) == brute_related(emb, at, 1.0)


def test_no_float64_copy_of_every_vector():
    """The join keeps float32 unit rows (4 bytes a component) and re-reads the caller's vectors."""
    emb = [np.ones(8, dtype=np.float64) * (k + 1) for k in range(10)]
    vectors = similarity._Vectors.build(emb)
    assert vectors.unit32.dtype == np.float32 and vectors.source is emb
    assert not any(
        isinstance(v, np.ndarray) and v.dtype == np.float64 and v.ndim == 2 for v in vars(vectors).values()
    )


def test_only_the_pair_budget_is_over_budget(monkeypatch):
    """A search past ``MEMWORK_MAX_PAIRS`` raises :class:`PairBudgetExceeded`, the one refusal the
    sampling fallbacks catch; a malformed ``MEMWORK_MAX_PAIRS`` is a configuration error, never it."""
    from memwork.defrag.pair_sample import over_budget
    from memwork.errors import ConfigError, PairBudgetExceeded

    texts = ["same words here"] * 6
    monkeypatch.setenv(similarity.MAX_PAIRS_ENV, "3")
    with pytest.raises(PairBudgetExceeded) as refused:
        similarity.find_duplicate_pairs(texts, [None] * 6, 0.5)
    assert over_budget(refused.value)
    monkeypatch.setenv(similarity.MAX_PAIRS_ENV, "many")
    with pytest.raises(ConfigError) as broken:
        similarity.find_duplicate_pairs(texts, [None] * 6, 0.5)
    assert not over_budget(broken.value)
