"""A generated sample's vectors are cached per machine: the same batch is never embedded twice, and a
damaged or foreign cache file costs only speed, never a wrong vector."""

from __future__ import annotations

import numpy as np
import pytest

from memwork.embed import HashEmbedder
from memwork.samples.cache import batch_key, cache_dir, embed_cached
from memwork.samples.entries import generate_entries


class CountingEmbedder(HashEmbedder):
    """The hash embedder, counting the texts it was asked to embed."""

    def __init__(self, dimension: int = 16) -> None:
        super().__init__(dimension)
        self.texts = 0

    def embed(self, texts):
        self.texts += len(texts)
        return super().embed(texts)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMWORK_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_the_same_sample_is_embedded_once_and_comes_back_identical(cache):
    embedder = CountingEmbedder()
    first = generate_entries(60, seed=3, embedder=embedder)
    embedded = embedder.texts
    again = generate_entries(60, seed=3, embedder=embedder)
    assert embedded > 0 and embedder.texts == embedded  # the second build embedded nothing
    assert len(list((cache / "sample-vectors").glob("*.npz"))) == 1
    for a, b in zip(first, again, strict=True):
        assert a.content == b.content and a.metadata == b.metadata
        assert (a.embedding is None) == (b.embedding is None)
        if a.embedding is not None:
            np.testing.assert_array_equal(a.embedding, b.embedding)


def test_another_model_or_other_texts_miss_the_cache(cache):
    small, large = CountingEmbedder(16), CountingEmbedder(32)
    embed_cached(small, ["a", "b"])
    vectors, _ = embed_cached(large, ["a", "b"])
    assert large.texts == 2 and vectors.shape == (2, 32)
    embed_cached(small, ["a", "c"])
    assert small.texts == 4
    # texts are length-prefixed in the key: no two batches share one by concatenation
    assert batch_key("m", ["ab", "c"]) != batch_key("m", ["a", "bc"])


def test_a_damaged_cache_file_is_recomputed_and_replaced(cache):
    embedder = CountingEmbedder()
    expected, _ = embed_cached(embedder, ["x", "y"])
    (path,) = (cache / "sample-vectors").glob("*.npz")
    path.write_bytes(b"not a numpy file")
    vectors, scores = embed_cached(embedder, ["x", "y"])
    np.testing.assert_array_equal(vectors, expected)
    assert embedder.texts == 4 and scores.tolist() == [1.0, 1.0]
    embed_cached(embedder, ["x", "y"])
    assert embedder.texts == 4  # the rewritten file serves


def test_off_turns_the_cache_off(monkeypatch, tmp_path):
    monkeypatch.setenv("MEMWORK_CACHE_DIR", "off")
    assert cache_dir() is None
    embedder = CountingEmbedder()
    embed_cached(embedder, ["x"])
    embed_cached(embedder, ["x"])
    assert embedder.texts == 2


def test_an_unwritable_cache_only_costs_speed(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder would be")
    monkeypatch.setenv("MEMWORK_CACHE_DIR", str(blocker))
    embedder = CountingEmbedder()
    vectors, _ = embed_cached(embedder, ["x"])
    assert vectors.shape == (1, 16) and embedder.texts == 1


def test_a_sample_store_takes_its_embedders_dimension(cache):
    """A 64-d hash sample is stored as 64-d vectors (the store was created at the default 384 and
    refused every vector)."""
    from memwork.samples.store import sample_store
    from memwork.stores import open_store

    with open_store(sample_store(30, seed=3, embedder="hash:64")) as store:
        vectors = [e.embedding for e in store.iter_entries() if e.embedding is not None]
    assert vectors and {len(v) for v in vectors} == {64}
