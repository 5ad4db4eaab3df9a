"""Real, human-written text available offline: the Python standard library's docstrings as memories.

Generated text is templates x vocabulary; a gate that passes on it may still fail on what people write
(long and short texts, shared boilerplate, near duplicates across "users", a skewed number of memories
per user). Every Python install carries such text: the docstrings of its standard library, written by
its authors. :func:`stdlib_memories` reads them at run time with :mod:`inspect` -- one module is one
user, the first paragraph of one function's, class's or method's docstring is one memory -- so a test
or the demo can judge a migration on real text without shipping or downloading any.

The text depends on the Python version (docstrings change between releases); for one interpreter the
output is the same on every call. Only the text is real: :func:`stdlib_legacy_items` gives the legacy
rows their ids, timestamps and statuses from a seed, as :func:`memwork.samples.legacy.generate_legacy_items`
does for generated text.
"""

from __future__ import annotations

import importlib
import inspect
import random
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from memwork.entry import utcnow
from memwork.errors import UsageError

#: Pure-library modules present in every CPython >= 3.11 install (no optional system library, no GUI),
#: in a fixed order; sizes differ a lot (``bisect`` has a handful of documented names, ``argparse`` dozens),
#: which gives the skewed users-by-size distribution of a real memory table.
STDLIB_MODULES: tuple[str, ...] = (
    "argparse", "ast", "base64", "bisect", "calendar", "collections", "configparser",
    "contextlib", "copy", "csv", "dataclasses", "datetime", "decimal", "difflib", "email.message",
    "enum", "fnmatch", "fractions", "functools", "glob", "gzip", "hashlib", "heapq", "hmac",
    "html.parser", "http.client", "inspect", "ipaddress", "itertools", "json", "logging", "math",
    "operator", "os", "pathlib", "pickle", "pprint", "queue", "random", "re", "sched", "secrets",
    "shlex", "shutil", "statistics", "string", "struct", "subprocess", "tarfile", "tempfile",
    "textwrap", "threading", "timeit", "urllib.parse", "uuid", "weakref", "zipfile",
)  # fmt: skip
MIN_CHARS = 25  #: shorter first paragraphs ("Return self.") are boilerplate, not a memory
MAX_CHARS = 400  #: a longer paragraph is cut at the last sentence end (or word) before this


@dataclass(frozen=True)
class RealMemory:
    """One memory of real text: whose (the module), where it was read (``module.name``) and the text."""

    user_id: str
    source: str
    content: str


def stdlib_memories(
    modules: tuple[str, ...] | list[str] = STDLIB_MODULES,
    *,
    max_users: int | None = None,
    max_per_user: int = 40,
    min_chars: int = MIN_CHARS,
    max_chars: int = MAX_CHARS,
) -> list[RealMemory]:
    """Memories read from the docstrings of ``modules``: one user per module (``py-<module>``), one memory
    per documented public function, class or method defined in it, in name order.

    A memory is the first paragraph of the docstring, whitespace collapsed, cut to ``max_chars``; texts
    shorter than ``min_chars`` and texts already taken (by any user: inherited boilerplate) are left out,
    so no two memories are equal. ``max_per_user`` caps a module, ``max_users`` the number of modules; a
    module that cannot be imported here is skipped (the list is chosen so that none is)."""
    if max_per_user < 1 or min_chars < 1 or max_chars < min_chars:
        raise UsageError(
            "stdlib_memories", (max_per_user, min_chars, max_chars),
            "max_per_user, min_chars and max_chars must be positive, max_chars >= min_chars",
        )  # fmt: skip
    seen: set[str] = set()
    out: list[RealMemory] = []
    users = 0
    for name in modules:
        if max_users is not None and users >= max_users:
            break
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        mine = _module_memories(module, name, seen, max_per_user, min_chars, max_chars)
        if mine:
            users += 1
            out.extend(mine)
    return out


def _module_memories(
    module: Any, name: str, seen: set[str], cap: int, min_chars: int, max_chars: int
) -> list[RealMemory]:
    user = "py-" + name.replace(".", "-")
    out: list[RealMemory] = []
    for source, obj in _documented(module, name):
        text = first_paragraph(inspect.getdoc(obj) or "", max_chars)
        key = text.casefold()
        if len(text) < min_chars or key in seen:
            continue
        seen.add(key)
        out.append(RealMemory(user, source, text))
        if len(out) >= cap:
            break
    return out


def _documented(module: Any, name: str) -> list[tuple[str, Any]]:
    """The public functions and classes defined in ``module`` (not imported into it), and the public
    methods each class defines itself, as ``(qualified name, object)`` in name order."""
    found: list[tuple[str, Any]] = []
    for attr in sorted(vars(module)):
        obj = getattr(module, attr, None)
        if attr.startswith("_") or not (inspect.isclass(obj) or inspect.isroutine(obj)):
            continue
        if getattr(obj, "__module__", None) not in (name, module.__name__, "_" + name.rsplit(".", 1)[-1]):
            continue
        found.append((f"{name}.{attr}", obj))
        if inspect.isclass(obj):
            for meth in sorted(vars(obj)):
                member = vars(obj)[meth]
                if not meth.startswith("_") and (inspect.isroutine(member) or isinstance(member, property)):
                    found.append((f"{name}.{attr}.{meth}", member))
    return found


_SENTENCE_END = re.compile(r"[.!?](?=\s)")


def first_paragraph(doc: str, max_chars: int = MAX_CHARS) -> str:
    """The first paragraph of ``doc`` on one line, cut at a sentence end (else a word) by ``max_chars``."""
    para = re.split(r"\n\s*\n", doc.strip(), maxsplit=1)[0]
    text = " ".join(para.split())
    if len(text) <= max_chars:
        return text
    head = text[: max_chars + 1]
    ends = [m.end() for m in _SENTENCE_END.finditer(head)]
    if ends and ends[-1] >= max_chars // 3:
        return head[: ends[-1]]
    return head.rsplit(" ", 1)[0]


def stdlib_legacy_items(
    *,
    seed: int = 7,
    now: datetime | None = None,
    active_only: bool = False,
    **options: Any,
) -> list[dict[str, Any]]:
    """Rows for ``h5_user_memory_items`` whose contents are :func:`stdlib_memories` (``options`` go to
    it): the real text, with ids, timestamps, status (mostly active), confidence and metadata drawn from
    ``seed`` like the generated rows'; ``type`` is ``fact`` and the metadata names the docstring read."""
    from memwork.samples.legacy import legacy_row

    rng = random.Random(seed)
    now = (now or utcnow()).astimezone(UTC).replace(tzinfo=None)
    rows: list[dict[str, Any]] = []
    counts: dict[str, int] = {}
    for memory in stdlib_memories(**options):
        k = counts[memory.user_id] = counts.get(memory.user_id, 0) + 1
        row = legacy_row(rng, memory.user_id, k, memory.content, "fact", now)
        row["metadata"] = {"source": "docstring", "docstring": memory.source}
        if active_only:
            row["status"] = "active"
        rows.append(row)
    return rows
