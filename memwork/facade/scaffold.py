"""Render a plugin and its test -- a disabled-by-default backend adapter, or a migration source -- and
write them only when asked.

The rendered adapter passes the contract gate (``memwork check contracts --adapter FILE``), the rendered
source passes it too (``memwork check contracts --source FILE``), and each rendered test passes as
written. Writing refuses to overwrite any existing file (nothing is written when one of the two exists).
A name memwork ships (a backend's or a source's) is refused: a plugin cannot take it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memwork.contracts import CATEGORIES, NAME_RE, OPERATIONS, Backend
from memwork.errors import UsageError


@dataclass(frozen=True)
class Scaffold:
    """Rendered files: relative path -> text."""

    module_path: str
    test_path: str
    files: dict[str, str]


def _check_name(name: str) -> None:
    if not NAME_RE.match(name or ""):
        raise UsageError("name", name, "must be lowercase kebab-case, e.g. acme-recall or my-store")
    from memwork.plugins import BUILTINS

    if name in {ep.name for eps in BUILTINS.values() for ep in eps} or name.startswith("legacy"):
        raise UsageError("name", name, "is a backend or source memwork ships; choose another name")


def _check(name: str, category: str, role: str, capabilities: list[str]) -> list[str]:
    _check_name(name)
    if category not in CATEGORIES:
        raise UsageError("category", category, f"must be one of {', '.join(CATEGORIES)}")
    if not role or not role.strip() or any(c in role for c in "\n\r\"'\\"):
        raise UsageError("role", role, "must be a one-line description without quotes or backslashes")
    caps = list(dict.fromkeys(capabilities))
    if not caps or any(c not in OPERATIONS for c in caps):
        raise UsageError("capability", capabilities, f"need one or more of {', '.join(OPERATIONS)}")
    return [op for op in OPERATIONS if op in caps]


_MODULE = '''"""{title} memory backend for memwork ({category}: {role}). Disabled by default.

Scaffolded by ``memwork scaffold backend``. It never opens a connection: it stays unavailable until
{flag}=1 and a real client is implemented below. Register it in your package's pyproject.toml::

    [project.entry-points."memwork.backends"]
    {name} = "{module}:from_env"
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memwork.contracts import Availability, BaseBackend, Declaration, flag_var
from memwork.checks import parse_bool
from memwork.errors import BackendError, UsageError

FLAG = "{flag}"

#: everything memwork needs to know about this backend: add its variables here (EnvVar(...))
DECLARATION = Declaration(
    name="{name}",
    category="{category}",
    role="{role}",
    capabilities={capability_tuple},
    variables=(flag_var(FLAG),),
)


class {cls}(BaseBackend):
    """{title} adapter ({capabilities})."""

    declaration = DECLARATION

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        try:
            self.enabled = parse_bool(FLAG, dict(env or {{}}).get(FLAG), default=False)
        except UsageError:
            self.enabled = False

    def availability(self) -> Availability:
        if not self.enabled:
            return Availability.no(f"{{FLAG}} is not enabled")
        return Availability.no("adapter not implemented yet")
{methods}

def from_env(env: Mapping[str, str]) -> {cls}:
    """Registry factory (the ``memwork.backends`` entry point target)."""
    return {cls}(env)
'''

_METHOD = """
    def {op}(self, request: dict[str, Any]) -> dict[str, Any]:
        raise BackendError("{name}: {op} is not implemented yet")
"""

_TEST = '''"""Tests of the scaffolded {name} adapter: dormant by default and within the backend contract."""

import importlib.util
from pathlib import Path

from memwork.backends.base import supports_of
from memwork.facade.contract import validate_backend
from memwork.facade.facade import facade_from_env

_PATH = Path(__file__).with_name("{module}.py")
_SPEC = importlib.util.spec_from_file_location("{module}", _PATH)
adapter = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(adapter)


def test_passes_the_contract_gate():
    assert validate_backend(adapter.from_env({{}})) == []


def test_disabled_by_default_with_a_reason():
    avail = adapter.from_env({{}}).availability()
    assert avail.available is False and avail.reason


def test_declares_its_capabilities():
    assert supports_of(adapter.from_env({{}})) == {supports!r}


def test_never_selected_while_unavailable(tmp_path):
    env = {{"MEMORY_BACKEND": "{name}", "MEMORY_LEGACY_DATABASE_URL": f"sqlite:///{{tmp_path / 'l.db'}}"}}
    facade = facade_from_env(env)
    facade.registry.register(adapter.from_env(env))
    status = facade.status()
    assert "{name}" not in status["selectedBackends"].values()
'''


def render_backend(name: str, category: str, role: str, capabilities: list[str]) -> Scaffold:
    """The adapter module and its test for a new backend, as text."""
    ops = _check(name, category, role, capabilities)
    module = f"{name.replace('-', '_')}_backend"
    title = " ".join(part.title() for part in name.split("-"))
    fields = {
        "name": name,
        "category": category,
        "role": role.strip(),
        "module": module,
        "title": title,
        "cls": title.replace(" ", "") + "Backend",
        "flag": f"MEMORY_{name.replace('-', '_').upper()}_ENABLED",
        "capabilities": ", ".join(ops),
        "capability_tuple": repr(tuple(ops)),
    }
    methods = "".join(_METHOD.format(op=op, name=name) for op in ops)
    supports = {op: op in ops for op in OPERATIONS}
    module_path, test_path = f"{module}.py", f"test_{module}.py"
    files = {
        module_path: _MODULE.format(methods=methods, **fields),
        test_path: _TEST.format(supports=supports, **fields),
    }
    return Scaffold(module_path, test_path, files)


_SOURCE = '''"""{title} migration source for memwork: every memory {title} holds, page by page, to the end.

Scaffolded by ``memwork scaffold source``. As rendered it reads an export of JSON lines named by
{var} (one memory per line: ``id``, ``userId``, ``content``, and optionally ``type``,
``metadata``, ``createdAt``, ``updatedAt``, ``sessionId``); replace :meth:`{cls}._lines` with the
service's own listing, keeping the cursor opaque text. Register it in your package's pyproject.toml::

    [project.entry-points."memwork.sources"]
    {name} = "{module}:source_from_env"

then ``memwork check contracts`` checks it and ``memwork import --from {name}`` migrates from it.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memwork.contracts import Page, record_page, require

EXPORT_VAR = "{var}"


class {cls}:
    """Pages of the export; the cursor is the number of the next line, as text."""

    name = "{name}"

    def __init__(self, path: str) -> None:
        self.path = Path(path).expanduser()

    @property
    def key(self) -> str:
        """What is read, without secrets: it keys the import's checkpoint and marks every imported row."""
        return f"{name}:{{self.path.resolve()}}"

    def read_page(self, cursor: str | None, size: int) -> Page:
        """Up to ``size`` memories after ``cursor`` (None: from the first line)."""
        start = int(cursor or 0)
        lines = self._lines(start, size + 1)  # one more: is there a next page?
        fields = [self._fields(start + k, line) for k, line in enumerate(lines[:size]) if line.strip()]
        return record_page(fields, str(start + size) if len(lines) > size else None)  # one call a page

    def _lines(self, start: int, count: int) -> list[str]:
        """Lines ``start`` .. ``start + count - 1`` of the export (replace with the service's listing)."""
        with self.path.open(encoding="utf-8") as handle:
            return list(itertools.islice(handle, start, start + count))

    def _fields(self, number: int, line: str) -> dict[str, Any]:
        """One memory as its SourceRecord fields; a line it cannot read is that record's problem
        (quarantined), never an exception."""
        try:
            item: dict[str, Any] = json.loads(line)
            return {{
                "id": str(item["id"]),
                "user_id": str(item["userId"]),
                "content": str(item["content"]),
                "type": str(item.get("type") or "fact"),
                "metadata": item.get("metadata") or {{}},
                "created_at": _moment(item.get("createdAt")),
                "updated_at": _moment(item.get("updatedAt")),
                "session_id": item.get("sessionId"),
            }}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            problem = f"line {{number + 1}}: {{type(exc).__name__}}: {{exc}}"[:200]
            return {{"id": f"line-{{number + 1}}", "user_id": "", "content": "", "problem": problem}}

    def close(self) -> None:
        """Release the client (the export file needs none)."""


def _moment(text: object) -> datetime | None:
    """ISO 8601 text as an aware UTC datetime (a naive one is taken as UTC)."""
    if text is None:
        return None
    moment = datetime.fromisoformat(str(text))
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def source_from_env(env: Mapping[str, str]) -> {cls}:
    """Registry factory (the ``memwork.sources`` entry point target)."""
    return {cls}(require(env, EXPORT_VAR))
'''

_SOURCE_TEST = '''"""Tests of the scaffolded {name} source: it keeps the contract and pages to the end."""

import importlib.util
import json
from pathlib import Path

import pytest

from memwork.contracts import SourceRecord
from memwork.errors import UsageError
from memwork.facade.contract import validate_source
from memwork.migrate.source import iter_pages

_PATH = Path(__file__).with_name("{module}.py")
_SPEC = importlib.util.spec_from_file_location("{module}", _PATH)
source_module = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(source_module)


def _open(tmp_path, count, extra=""):
    export = tmp_path / "export.jsonl"
    stamp = "2024-05-01T12:00:00"
    lines = [
        {{"id": f"m{{k}}", "userId": f"u{{k % 3}}", "content": f"memory {{k}}", "updatedAt": stamp}}
        for k in range(count)
    ]
    export.write_text("".join(json.dumps(line) + "\\n" for line in lines) + extra, encoding="utf-8")
    return source_module.source_from_env({{source_module.EXPORT_VAR: str(export)}})


def test_needs_its_variable():
    with pytest.raises(UsageError, match=source_module.EXPORT_VAR):
        source_module.source_from_env({{}})


def test_passes_the_contract_gate(tmp_path):
    assert validate_source(_open(tmp_path, 3), registered_as="{name}") == ([], None)


def test_pages_to_the_end_once(tmp_path):
    records = [r for page, _ in iter_pages(_open(tmp_path, 7), None, 3) for r in page.records]
    assert [r.id for r in records] == [f"m{{k}}" for k in range(7)]
    assert all(isinstance(r, SourceRecord) and r.updated_at.tzinfo is not None for r in records)


def test_a_line_it_cannot_read_is_that_records_problem(tmp_path):
    page = _open(tmp_path, 2, extra="not json\\n").read_page(None, 10)
    assert page.next_cursor is None and [r.problem is not None for r in page.records] == [False, False, True]
'''


def render_source(name: str) -> Scaffold:
    """A source module (``source_from_env``, reading a JSON-lines export) and its test, as text."""
    _check_name(name)
    module = f"{name.replace('-', '_')}_source"
    title = " ".join(part.title() for part in name.split("-"))
    fields = {
        "name": name,
        "module": module,
        "title": title,
        "cls": title.replace(" ", "") + "Source",
        "var": f"MEMORY_{name.replace('-', '_').upper()}_EXPORT",
    }
    module_path, test_path = f"{module}.py", f"test_{module}.py"
    files = {module_path: _SOURCE.format(**fields), test_path: _SOURCE_TEST.format(**fields)}
    return Scaffold(module_path, test_path, files)


def write_scaffold(scaffold: Scaffold, directory: str | Path) -> list[Path]:
    """Write both files into ``directory``; refuses (writing nothing) if either exists."""
    root = Path(directory)
    targets = [root / rel for rel in scaffold.files]
    for target in targets:
        if target.exists():
            raise UsageError("path", str(target), "already exists; refusing to overwrite")
    root.mkdir(parents=True, exist_ok=True)
    for target, text in zip(targets, scaffold.files.values(), strict=True):
        with target.open("x", encoding="utf-8") as handle:  # "x": never clobber a racing writer
            handle.write(text)
    return targets


def load_adapter_file(path: str | Path) -> Backend:
    """Import an adapter module from a file and return its backend built from an empty env."""
    from memwork.embed import load_file_module

    file = Path(path)
    module = load_file_module(file, file.stem, field="adapter", value=str(file), register=False)
    factory = getattr(module, "from_env", None)
    if not callable(factory):
        raise UsageError("adapter", str(file), "has no from_env(env) factory")
    return factory({})


def load_source_factory(path: str | Path) -> Callable[[Mapping[str, str]], Any]:
    """Import a source module from a file and return its ``source_from_env`` factory."""
    from memwork.embed import load_file_module

    file = Path(path)
    module = load_file_module(file, file.stem, field="source", value=str(file), register=False)
    factory = getattr(module, "source_from_env", None)
    if not callable(factory):
        raise UsageError("source", str(file), "has no source_from_env(env) factory")
    return factory
