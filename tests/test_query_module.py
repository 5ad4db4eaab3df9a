"""The hash query module file a canary points ``MEMORY_PGVECTOR_EMBEDDING_MODULE`` at
(:func:`memwork.pgvector.local_hash.write_module`): one file per dimension in the workspace, reused,
written whole even when two processes write it at once."""

from __future__ import annotations

import multiprocessing
import tempfile
from pathlib import Path

import numpy as np

from memwork.embed import HashEmbedder, QueryModuleEmbedder
from memwork.pgvector.local_hash import module_text, write_module


def _temp_entries() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("memwork-embed-*")}


def test_without_a_folder_the_module_is_one_workspace_file_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMWORK_HOME", str(tmp_path / "home"))
    before = _temp_entries()
    first, second = write_module(7), write_module(7)
    assert first == second
    assert Path(first).parent == (tmp_path / "home" / "query-modules").resolve()
    assert _temp_entries() == before  # no temporary folder per call any more
    assert sorted(p.name for p in Path(first).parent.iterdir()) == ["hash_query_7.py"]


def test_the_module_embeds_queries_as_the_hash_embedder(tmp_path):
    path = write_module(5, tmp_path)
    got = QueryModuleEmbedder(path).embed_query("the same words", {})
    want = HashEmbedder(5).embed_one("the same words")
    np.testing.assert_array_equal(np.asarray(got, dtype=np.float32), want)


def test_a_stale_or_torn_file_is_replaced(tmp_path):
    path = Path(write_module(4, tmp_path))
    path.write_text("from memwork.pgvector.local_hash import fun")  # half a file
    assert write_module(4, tmp_path) == str(path)
    assert path.read_text() == module_text(4)


def _write_many(folder: str) -> list[str]:
    """40 rounds, each into a folder of its own that the other process writes in the same round."""
    seen = []
    for round_ in range(40):
        path = Path(write_module(6, Path(folder) / str(round_)))
        seen.append(path.read_text())
    return seen


def test_two_processes_writing_at_once_never_read_half_a_file(tmp_path):
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        results = pool.map(_write_many, [str(tmp_path), str(tmp_path)])
    texts = [text for seen in results for text in seen]
    assert len(texts) == 80
    assert set(texts) == {module_text(6)}
    left = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "hash_query_6.py"]
    assert left == []  # no scratch file left behind
