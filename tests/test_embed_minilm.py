"""The real sentence embedder (all-MiniLM-L6-v2, offline). Skips when the ``embed`` extra is absent."""

from __future__ import annotations

import numpy as np
import pytest

from memwork.embed import MINILM_DIMENSION, MINILM_MODEL_ID, load_embedder

pytestmark = pytest.mark.usefixtures("require_minilm")


@pytest.fixture(scope="module")
def minilm():
    return load_embedder("minilm")


def test_minilm_shape_and_model_id(minilm):
    vectors = minilm.embed(["The cat sits on the mat.", "A dog plays outside.", ""])
    assert vectors.shape == (3, MINILM_DIMENSION) and vectors.dtype == np.float32
    assert minilm.model_id == MINILM_MODEL_ID and minilm.dimension == 384
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)


def test_minilm_ranks_paraphrases_above_unrelated(minilm):
    a, b, c = minilm.embed(
        [
            "The user prefers dark mode in the editor.",
            "In the editor the user likes a dark theme.",
            "Rust compiles to native code.",
        ]
    )
    assert a @ b > 0.6 > a @ c


def test_minilm_is_deterministic_in_batches(minilm):
    texts = [f"memory number {i} about postgres indexes" for i in range(10)]
    together = minilm.embed(texts)
    alone = np.vstack([minilm.embed([t]) for t in texts[:3]])
    assert np.allclose(together[:3], alone, atol=1e-5)


def test_minilm_module_for_runtime_queries():
    from memwork.embed import QueryModuleEmbedder

    emb = QueryModuleEmbedder("memwork.pgvector.minilm")
    assert emb.model_id == MINILM_MODEL_ID
    assert emb.embed_query("dark mode").shape == (384,)


def test_loading_the_model_draws_no_progress_bar_on_stderr():
    """A backfill's stderr carries its own progress bar; the model load must not add one."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    code = "from memwork.embed import SentenceEmbedder; print(SentenceEmbedder().embed(['x']).shape)"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "(1, 384)"
    assert "Loading weights" not in done.stderr and "it/s" not in done.stderr, done.stderr
