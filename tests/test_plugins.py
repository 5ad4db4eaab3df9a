"""One plugin registry for both entry-point groups: a broken source plugin is reported exactly like a
broken backend plugin, and ``check contracts`` holds every source to the source contract.

The end-to-end tests install stub distributions the way pip leaves them (a ``.dist-info`` folder with
``entry_points.txt``) on the ``PYTHONPATH`` of a fresh ``memwork`` process, so discovery runs through
``importlib.metadata`` exactly as for a real plugin. The stub imports the contract from the module
paths plugins were written against (``memwork.backends.base``, ``memwork.migrate.source``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from memwork.contracts import BaseBackend, Page, SourceRecord
from memwork.errors import BackendError, UsageError
from memwork.facade.contract import check_all, validate_source
from memwork.plugins import BACKENDS, BUILTIN_SOURCES, SOURCES, Plugins, Registry, open_source

TOY = """
from memwork.backends.base import BaseBackend
from memwork.migrate.source import Page, SourceRecord

class Toy(BaseBackend):
    name = "toy"
    category = "semantic"

    def resolve(self, request):
        return {"memories": []}

def from_env(env):
    return Toy()

class ToySource:
    name = "toy"
    key = "toy:memory"

    def read_page(self, cursor, size):
        start = int(cursor or 0)
        stop = min(start + size, 25)
        records = [SourceRecord(f"m{k}", f"u{k % 3}", f"memory {k}") for k in range(start, stop)]
        return Page(records, str(stop) if stop < 25 else None)

    def close(self):
        pass

def source_from_env(env):
    return ToySource()
"""


def _distribution(site: Path, name: str, backend: str, source: str) -> None:
    dist = site / f"{name}-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[{BACKENDS}]\n{backend}\n\n[{SOURCES}]\n{source}\n")


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A folder holding the working ``toy`` plugin (a backend and a source)."""
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "memwork_toy.py").write_text(TOY)
    _distribution(folder, "memwork_toy", "toy = memwork_toy:from_env", "toy = memwork_toy:source_from_env")
    return folder


def _memwork(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    env["MEMWORK_HOME"] = str(site.parent / "home")
    return subprocess.run(
        [sys.executable, "-m", "memwork", *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_a_missing_module_fails_the_gate_for_both_groups_alike(site):
    _distribution(
        site, "memwork_broken", "broken = memwork_gone:from_env", "broken = memwork_gone:source_from_env"
    )
    run = _memwork(site, "check", "contracts", "--json")
    assert run.returncode == 1, run.stdout + run.stderr
    report = json.loads(run.stdout)
    missing = "failed to load: ModuleNotFoundError: No module named 'memwork_gone'"
    assert report["violations"] == [f"broken: plugin: {missing}", f"broken source: plugin: {missing}"]
    assert "toy" in report["checked"] and "toy" in report["sources"]
    assert "toy source" not in report["unchecked"]  # built and one page read


def test_a_working_source_plugin_passes_the_gate_and_is_imported_from(site):
    run = _memwork(site, "check", "contracts")
    assert run.returncode == 0, run.stdout + run.stderr
    # 8 built-in sources (legacy-mysql and pgvector among them) and the plugin's
    assert "10 backends and 9 sources checked" in run.stdout and "0 violations" in run.stdout
    listed = _memwork(site, "import", "--from", "toy", "--json")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert json.loads(listed.stdout)["rowsRead"] == 25


def test_importing_from_a_broken_source_plugin_is_one_line(site):
    _distribution(
        site, "memwork_broken", "broken = memwork_gone:from_env", "broken = memwork_gone:source_from_env"
    )
    run = _memwork(site, "import", "--from", "broken")
    assert run.returncode == 1, run.stdout + run.stderr
    assert run.stderr == (
        "Error: source broken (entry point memwork_gone:source_from_env): failed to load: "
        "ModuleNotFoundError: No module named 'memwork_gone'\n"
    )


def test_a_plugin_cannot_take_a_shipped_source_name():
    plugins = Plugins(SOURCES, plugins=[EntryPoint("qdrant", f"{__name__}:make_good", SOURCES)])
    assert plugins.names() == [ep.name for ep in BUILTIN_SOURCES]
    [problem] = plugins.problems()
    assert (problem.name, problem.group) == ("qdrant", SOURCES)
    assert problem.problem == "already registered by builtin; refused"


def test_both_groups_report_the_same_problems_for_the_same_fault():
    """Same entry point target, one registry per group: the same problem text."""
    gone = [EntryPoint("gone", "memwork_gone:x", group) for group in (BACKENDS, SOURCES)]
    backend_problems = Registry({}, plugins=gone).problems()
    source_plugins = Plugins(SOURCES, plugins=gone)
    assert "gone" not in [plugin.name for plugin, _ in source_plugins.load_all()]
    assert [(p.name, p.origin, p.problem) for p in backend_problems] == [
        (p.name, p.origin, p.problem) for p in source_plugins.problems()
    ]
    assert [p.group for p in backend_problems + source_plugins.problems()] == [BACKENDS, SOURCES]


def test_open_source_names_an_unknown_source_and_a_broken_one():
    with pytest.raises(UsageError, match=r"unknown source; known: .*qdrant"):
        open_source("nope", {}, plugins=[])
    with pytest.raises(BackendError, match=r"source gone .*failed to load: ModuleNotFoundError"):
        open_source("gone", {}, plugins=[EntryPoint("gone", "memwork_gone:x", SOURCES)])


# ---- the source contract -------------------------------------------------------------------------
class GoodSource:
    name = "good"
    key = "good:somewhere"

    def read_page(self, cursor: str | None, size: int) -> Page:
        return Page([SourceRecord("1", "u", "hello")], None)

    def close(self) -> None:
        pass


def make_good(env):
    return GoodSource()


def _source(**attrs):
    return type("Odd", (GoodSource,), attrs)()


def _rules(source, env=None):
    found, _ = validate_source(source, env)
    return [(v.rule, v.problem) for v in found]


def test_a_good_source_passes():
    assert validate_source(GoodSource(), registered_as="good") == ([], None)


@pytest.mark.parametrize(
    ("attrs", "rule"),
    [
        ({"name": "Not Kebab"}, "name"),
        ({"key": ""}, "key"),
        ({"key": "good:postgresql://bob:hunter2@db/x"}, "key"),
        ({"key": "good:https://h/x?api_key=s3cret-token"}, "key"),
        ({"read_page": lambda self, cursor, size: [SourceRecord("1", "u", "x")]}, "read_page"),
        ({"read_page": lambda self, cursor, size: Page([{"id": "1"}], None)}, "read_page"),
        ({"read_page": lambda self, cursor, size: Page([], 7)}, "read_page"),
        (
            {"read_page": lambda self, cursor, size: Page([SourceRecord("1", "u", "x")] * 2, None)},
            "read_page",
        ),
        ({"read_page": lambda self, cursor, size: 1 / 0}, "read_page"),
        ({"close": None}, "methods"),
    ],
)
def test_each_broken_rule_is_named(attrs, rule):
    assert [r for r, _ in _rules(_source(**attrs))] == [rule]


def test_a_key_holding_a_secret_variables_value_is_refused():
    env = {"MEMORY_GOOD_API_KEY": "abcdef123456"}
    assert _rules(_source(key="good:abcdef123456/x"), env) == [
        ("key", "holds the value of MEMORY_GOOD_API_KEY")
    ]
    assert _rules(_source(key="good:plain"), env) == []


def test_a_source_registered_under_another_name_is_refused():
    found, _ = validate_source(GoodSource(), registered_as="other")
    assert [v.problem for v in found] == ["registered as 'other' but named 'good'"]


def test_a_service_that_refuses_the_read_is_unchecked_not_a_violation():
    def refused(self, cursor, size):
        raise BackendError("good: connection refused")

    assert validate_source(_source(read_page=refused)) == (
        [],
        "not read: BackendError: good: connection refused",
    )


def make_unconfigured(env):
    raise UsageError("MEMORY_GOOD_URL", "", "is not set")


def make_exploding(env):
    raise RuntimeError("boom")


def make_leaky(env):
    return _source(key="good:postgresql://bob:hunter2@db/x")


def test_check_all_covers_sources_from_the_registry():
    plugins = [
        EntryPoint(name, f"{__name__}:make_{name}", SOURCES)
        for name in ("good", "unconfigured", "exploding", "leaky")
    ]
    report = check_all({}, plugins=plugins)
    assert report.sources[-4:] == ["good", "unconfigured", "exploding", "leaky"]
    assert report.unchecked["unconfigured source"].startswith("not configured: MEMORY_GOOD_URL")
    assert [str(v) for v in report.violations] == [
        "exploding source: factory: raised RuntimeError: boom",
        "leaky source: name: registered as 'leaky' but named 'good'",
        "leaky source: key: holds a secret (shown redacted: 'good:postgresql://bob:***@db/x')",
    ]


def test_a_backend_plugin_in_the_source_group_is_not_a_source():
    """A backend factory registered as a source: what it builds is held to the source contract."""
    report = check_all({}, plugins=[EntryPoint("echo", f"{__name__}:make_echo", SOURCES)])
    assert {v.rule for v in report.violations if v.backend == "echo source"} == {"methods", "key"}


class Echo(BaseBackend):
    name = "echo"
    category = "policy"

    def resolve(self, request):
        return {}


def make_echo(env):
    return Echo()
