"""The real-text sample: the standard library's docstrings as memories (memwork.samples.real_text)."""

from __future__ import annotations

import importlib
import inspect
from collections import Counter
from datetime import UTC, datetime

import pytest

from memwork.errors import UsageError
from memwork.samples.legacy import generate_legacy_items
from memwork.samples.migration import build_migration
from memwork.samples.real_text import (
    MAX_CHARS,
    MIN_CHARS,
    STDLIB_MODULES,
    first_paragraph,
    stdlib_legacy_items,
    stdlib_memories,
)


def _resolve(source: str):
    """The object a memory was read from, by its dotted name (module, class, member)."""
    for cut in range(source.count("."), 0, -1):
        head, *rest = source.rsplit(".", cut)
        try:
            obj = importlib.import_module(head)
        except ImportError:
            continue
        for name in rest:
            obj = vars(obj)[name] if inspect.isclass(obj) else getattr(obj, name)
        return obj
    raise AssertionError(source)


def test_every_module_gives_a_user_of_real_distinct_one_line_memories():
    memories = stdlib_memories()
    assert memories == stdlib_memories()  # the same text on every call
    users = Counter(m.user_id for m in memories)
    assert len(users) == len(STDLIB_MODULES)  # the list holds only modules that document something
    assert max(users.values()) == 40 and min(users.values()) <= 5  # skewed, capped
    assert len({m.content.casefold() for m in memories}) == len(memories)
    assert all(MIN_CHARS <= len(m.content) <= MAX_CHARS and "\n" not in m.content for m in memories)
    for memory in memories[::37]:  # the text is the docstring's, not made up
        doc = " ".join((inspect.getdoc(_resolve(memory.source)) or "").split())
        assert doc.startswith(memory.content.rstrip(".")[:60]), memory


def test_caps_and_first_paragraph():
    few = stdlib_memories(max_users=3, max_per_user=4)
    assert len({m.user_id for m in few}) == 3 and len(few) <= 12
    assert first_paragraph("Return x.\n\nMore.") == "Return x."
    assert first_paragraph("Join\n   the lines.") == "Join the lines."
    long = "First sentence here. " * 30
    cut = first_paragraph(long, 100)
    assert len(cut) <= 100 and cut.endswith(".")
    with pytest.raises(UsageError, match="max_per_user"):
        stdlib_memories(max_per_user=0)


def test_legacy_rows_carry_the_real_text_in_the_generated_rows_shape():
    now = datetime(2026, 1, 1, tzinfo=UTC)
    rows = stdlib_legacy_items(seed=3, now=now, max_users=4, max_per_user=6)
    assert rows == stdlib_legacy_items(seed=3, now=now, max_users=4, max_per_user=6)  # byte-identical
    assert set(rows[0]) == set(generate_legacy_items(1, 1, seed=3)[0])
    assert all(r["metadata"]["source"] == "docstring" for r in rows)
    assert {r["user_id"] for r in rows} == {m.user_id for m in stdlib_memories(max_users=4, max_per_user=6)}
    assert all(r["status"] == "active" for r in stdlib_legacy_items(max_users=2, active_only=True))


def test_build_migration_refuses_an_unknown_dataset_before_any_io(tmp_path):
    url = f"sqlite:///{tmp_path / 'legacy.db'}"
    with pytest.raises(UsageError, match="dataset='wiki'"):
        build_migration(url, "pg://embedded/never", dataset="wiki")  # type: ignore[arg-type]
    assert not (tmp_path / "legacy.db").exists()
