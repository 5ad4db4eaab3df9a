"""Embedders: hash (deterministic, vectorised), spec parsing, module embedders (file and dotted)."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from memwork.embed import (
    BadVector,
    HashEmbedder,
    MemoryModuleEmbedder,
    QueryModuleEmbedder,
    embed_memories,
    load_embedder,
    load_module,
)
from memwork.errors import UsageError
from memwork.migrate.quarantine import probe_embedder


def test_hash_embedder_shape_norm_and_model_id():
    emb = HashEmbedder(16)
    vectors = emb.embed(["hello world", "", "数据库索引 需要维护"])
    assert vectors.shape == (3, 16) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    assert emb.model_id == "hash-16"
    assert np.array_equal(emb.embed_one("hello world"), vectors[0])
    assert emb.embed([]).shape == (0, 16)


def test_hash_embedder_is_deterministic_and_similar_texts_are_close():
    a, b = HashEmbedder(64), HashEmbedder(64)
    texts = ["the user prefers dark mode", "the user prefers dark mode at night", "green tea is nice"]
    va, vb = a.embed(texts), b.embed(texts)
    assert np.array_equal(va, vb)
    assert va[0] @ va[1] > va[0] @ va[2]


@pytest.mark.parametrize("bad", [0, -3, 20000, "3"])
def test_hash_embedder_rejects_bad_dimension(bad):
    with pytest.raises(UsageError, match="dimensions"):
        HashEmbedder(bad)


def test_load_embedder_specs():
    assert load_embedder(None) is None and load_embedder("none") is None
    assert load_embedder("hash").dimension == 384
    assert load_embedder("hash:8").model_id == "hash-8"
    with pytest.raises(UsageError, match="embedder='hash:x'"):
        load_embedder("hash:x")
    with pytest.raises(UsageError, match="unknown embedder"):
        load_embedder("word2vec")


def _write_module(tmp_path, body: str, name: str = "my_embed.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


def test_memory_module_from_file_with_model_id_and_dimensions(tmp_path):
    path = _write_module(
        tmp_path,
        """
        MODEL_ID = "toy-2"
        DIMENSIONS = 2
        def embed_memory(memory):
            return [len(memory["content"]), 1.0]
        """,
    )
    emb = load_embedder(f"module:{path}")
    assert isinstance(emb, MemoryModuleEmbedder)
    assert (emb.model_id, emb.dimension) == ("toy-2", 2)
    vectors = embed_memories(emb, [{"content": "abc"}, {"content": "a"}])
    assert vectors.tolist() == [[3.0, 1.0], [1.0, 1.0]]


def test_memory_module_default_callable_async_and_probed_dimension(tmp_path):
    path = _write_module(
        tmp_path,
        """
        async def default(memory):
            return [0.5, 0.5, 0.5]
        """,
        name="async_embed.py",
    )
    emb = MemoryModuleEmbedder(str(path))
    assert emb.dimension == 3  # probed: no DIMENSIONS attribute
    assert emb.model_id == "async_embed"  # no MODEL_ID: the module name
    assert emb.embed(["x"]).shape == (1, 3)


def test_query_module_from_dotted_name():
    emb = QueryModuleEmbedder("memwork.pgvector.local_hash")
    vec = emb.embed_query("dark mode", {"userId": "u"})
    assert vec.shape == (3,) and emb.model_id == "hash-3"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("./missing_module.py", "no such file"),
        ("memwork.no_such_module_here", "import failed"),
        ("", "must name a Python module"),
    ],
)
def test_load_module_errors_name_the_field(spec, message):
    with pytest.raises(UsageError, match=message):
        load_module(spec)


def test_module_without_function_is_refused(tmp_path):
    path = _write_module(tmp_path, "VALUE = 1\n", name="empty_embed.py")
    with pytest.raises(UsageError, match="neither embed_memory"):
        MemoryModuleEmbedder(str(path))
    with pytest.raises(UsageError, match="neither embed_query"):
        QueryModuleEmbedder(str(path))


def test_module_returning_garbage_is_refused(tmp_path):
    """Garbage for one memory is that memory's problem (BadVector, quarantined by a run); garbage
    for the probe text is the module's (a usage error before a run reads anything)."""
    path = _write_module(tmp_path, "DIMENSIONS = 2\ndef embed_memory(m):\n    return ['a', 'b']\n", "bad.py")
    emb = MemoryModuleEmbedder(str(path))
    with pytest.raises(BadVector, match="list of numbers"):
        emb.embed(["x"])
    with pytest.raises(UsageError, match=r"probe text: BadVector: .*list of numbers"):
        probe_embedder(emb)


@pytest.mark.parametrize(
    ("returned", "problem"),
    [
        ("[float('nan')] * 4", "non-finite"),
        ("[float('inf')] * 4", "non-finite"),
        ("[1e39] * 4", "non-finite"),  # beyond float32: inf once cast
        ("[0.5] * 3", "3 numbers, not 4"),
        ("[]", "empty"),
        ("'abcd'", "list of numbers"),
    ],
)
def test_one_bad_vector_from_a_module_is_that_memorys_problem_not_a_usage_error(tmp_path, returned, problem):
    """F-19: a module's bad answer for one memory raised UsageError (exit 2, the whole run ended)."""
    source = (
        "import math\nDIMENSIONS = 4\n"
        f"def embed_memory(m):\n    return {returned} if 'POISON' in m['content'] else [0.5] * 4\n"
    )
    emb = MemoryModuleEmbedder(str(_write_module(tmp_path, source, "poison.py")))
    assert emb.embed(["fine"]).shape == (1, 4)
    with pytest.raises(BadVector, match=problem) as err:
        emb.embed(["POISON here"])
    assert not isinstance(err.value, UsageError)
    probe_embedder(emb)  # the embedder itself is fine


def test_minilm_st_without_the_extra_fails_with_an_install_hint(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(UsageError, match=r"pip install -e '\.\[st\]'"):
        load_embedder("minilm:st")


def test_minilm_without_onnxruntime_names_what_is_missing(monkeypatch):
    import sys

    from memwork.embed import MiniLMEmbedder

    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(UsageError, match="needs onnxruntime: reinstall memwork"):
        MiniLMEmbedder(threads=7)  # a thread count no other test loaded: not served from the cache
