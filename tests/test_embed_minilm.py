"""The real sentence embedder: all-MiniLM-L6-v2 on onnxruntime + tokenizers (default install, no torch)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from memwork.embed import MINILM_DIMENSION, MINILM_MODEL_ID, MiniLMEmbedder, embed_threads, load_embedder
from memwork.errors import UsageError

pytestmark = pytest.mark.usefixtures("require_minilm")

MIXED = [
    "The cat sits on the mat.",
    "",
    "ok",
    "数据库索引需要定期维护，否则查询会变慢。",
    "Deployments must go through the staging cluster first, then production after a one-hour soak. " * 6,
    "Café au lait, naïve résumé — ünïcödé ✓ 🚀",
    "def f(x): return x ** 2  # code",
]


@pytest.fixture(scope="module")
def minilm():
    return load_embedder("minilm")


def test_minilm_is_the_onnx_embedder_with_the_models_id(minilm):
    assert isinstance(minilm, MiniLMEmbedder)
    assert load_embedder("minilm:onnx").model_id == minilm.model_id == MINILM_MODEL_ID
    assert minilm.dimension == MINILM_DIMENSION == 384


def test_minilm_gives_384_dim_unit_float32_vectors(minilm):
    vectors = minilm.embed(MIXED)
    assert vectors.shape == (len(MIXED), 384) and vectors.dtype == np.float32
    assert np.all(np.isfinite(vectors))
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert minilm.embed([]).shape == (0, 384)


def test_minilm_is_deterministic_across_instances_and_batch_sizes(minilm):
    again = MiniLMEmbedder(batch_size=3)
    assert np.array_equal(minilm.embed(MIXED), again.embed(MIXED))


def test_a_batch_equals_each_text_alone_in_any_order(minilm):
    together = minilm.embed(MIXED)
    alone = np.vstack([minilm.embed([t]) for t in MIXED])
    assert np.allclose(together, alone, atol=1e-6)
    reversed_batch = minilm.embed(MIXED[::-1])[::-1]
    assert np.allclose(together, reversed_batch, atol=1e-6)


def test_minilm_ranks_paraphrases_above_unrelated(minilm):
    a, b, c = minilm.embed(
        [
            "The user prefers dark mode in the editor.",
            "In the editor the user likes a dark theme.",
            "Rust compiles to native code.",
        ]
    )
    assert a @ b > 0.6 > a @ c


def test_minilm_handles_chinese(minilm):
    a, b, c = minilm.embed(["她对花生过敏", "她对花生过敏，不能吃花生", "明天下午三点开会"])
    assert a @ b > a @ c and a @ b > 0.8
    assert not np.allclose(a, c)


def test_texts_are_truncated_at_256_tokens_like_sentence_transformers(minilm):
    words_200, words_300 = "memory " * 200, "memory " * 300  # "memory" is one token
    (a, b, c, d) = minilm.embed(
        [words_200 + "apples", words_200 + "pears", words_300 + "apples", words_300 + "pears"]
    )
    assert not np.allclose(a, b, atol=1e-3)  # token 201 still counts: not cut at 128
    assert np.array_equal(c, d)  # token 301 does not: cut at 256 (with [CLS] and [SEP])


def test_the_runtime_query_module_uses_the_onnx_model(minilm):
    from memwork.embed import QueryModuleEmbedder

    emb = QueryModuleEmbedder("memwork.pgvector.minilm")
    assert emb.model_id == MINILM_MODEL_ID
    vector = emb.embed_query("dark mode")
    assert vector.shape == (384,)
    assert np.allclose(vector, minilm.embed(["dark mode"])[0], atol=1e-6)


def test_minilm_needs_neither_torch_nor_sentence_transformers(monkeypatch):
    for blocked in ("torch", "sentence_transformers", "transformers", "huggingface_hub"):
        monkeypatch.setitem(sys.modules, blocked, None)  # an import of it now raises ImportError
    vectors = load_embedder("minilm").embed(["still works"])
    assert vectors.shape == (1, 384)


def test_loading_offline_imports_no_hub_and_prints_nothing():
    """A fresh process with HF_HUB_OFFLINE=1: the model loads from the installed package, silently."""
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    env["HF_HUB_OFFLINE"] = "1"
    code = (
        "import sys\n"
        "from memwork.embed import load_embedder\n"
        "print(load_embedder('minilm').embed(['x', '猫']).shape)\n"
        "print(sorted(m for m in ('torch', 'huggingface_hub', 'transformers') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["(2, 384)", "[]"]
    assert done.stderr == ""


def test_thread_count_defaults_to_the_usable_cpus_and_can_be_set(monkeypatch):
    monkeypatch.delenv("MEMWORK_EMBED_THREADS", raising=False)
    assert 1 <= embed_threads() <= min(4, len(os.sched_getaffinity(0)))
    monkeypatch.setenv("MEMWORK_EMBED_THREADS", "1")
    assert embed_threads() == 1 and MiniLMEmbedder().threads == 1
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("MEMWORK_EMBED_THREADS", bad)
        with pytest.raises(UsageError, match="MEMWORK_EMBED_THREADS"):
            embed_threads()


def test_unknown_minilm_runtime_is_refused():
    with pytest.raises(UsageError, match="minilm runs on onnx"):
        load_embedder("minilm:gpu")


def test_the_notebooks_sample_store_carries_the_real_models_vectors(minilm):
    """A report notebook given no store reviews one embedded by minilm, not by the hash embedder."""
    from memwork.samples.store import sample_store
    from memwork.stores import open_store

    store = open_store(sample_store(30, seed=3))
    try:
        embedded = [e for e in store.iter_entries() if e.embedding is not None]
    finally:
        store.close()
    assert embedded
    vectors = np.vstack([e.embedding for e in embedded])
    assert np.allclose(vectors, minilm.embed([e.content for e in embedded]), atol=1e-5)
