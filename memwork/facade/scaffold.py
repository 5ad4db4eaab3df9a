"""Render a disabled-by-default backend adapter and its test; write them only when asked.

The rendered adapter passes the contract gate (``memwork check contracts --adapter FILE``) and its
rendered test passes as written. Writing refuses to overwrite any existing file (nothing is written
when one of the two exists).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from memwork.contracts import CATEGORIES, NAME_RE, OPERATIONS, Backend
from memwork.errors import UsageError


@dataclass(frozen=True)
class Scaffold:
    """Rendered files: relative path -> text."""

    module_path: str
    test_path: str
    files: dict[str, str]


def _check(name: str, category: str, role: str, capabilities: list[str]) -> list[str]:
    if not NAME_RE.match(name or ""):
        raise UsageError("name", name, "must be lowercase kebab-case, e.g. acme-recall or my-store")
    from memwork.facade.registry import BUILTIN_ENTRY_POINTS

    if name in {ep.name for ep in BUILTIN_ENTRY_POINTS} or name == "legacy":
        raise UsageError("name", name, "is a backend memwork ships; choose another name")
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
