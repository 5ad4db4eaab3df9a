"""The backend contract gate, as a library and as ``memwork check contracts``."""

import pytest
from click.testing import CliRunner

from memwork.backends.base import availability_of
from memwork.cli import main
from memwork.contracts import Availability, BaseBackend, Declaration, EnvVar
from memwork.facade.contract import check_all, check_registry, validate_backend
from memwork.plugins import Registry


class Good(BaseBackend):
    name = "good-one"
    category = "behavior"
    flag = "MEMORY_GOOD_ONE_ENABLED"

    def write(self, request):
        return {}


class Minimal:
    """Not a BaseBackend subclass: a name and one operation; no availability() means available."""

    name = "minimal"

    def resolve(self, request):
        return {}


class Declared(BaseBackend):
    declaration = Declaration(
        "declared",
        category="semantic",
        capabilities=("resolve",),
        variables=(EnvVar("MEMORY_DECLARED_URL", required=True),),
        database_url_var="MEMORY_DECLARED_URL",
    )

    def resolve(self, request):
        return {}


def _bad(**attrs):
    return type("Bad", (Good,), attrs)()


def test_good_backends_pass():
    assert validate_backend(Good()) == []
    assert validate_backend(Minimal()) == [] and availability_of(Minimal()).available
    assert validate_backend(Declared()) == [] and Declared().name == "declared"


@pytest.mark.parametrize(
    ("attrs", "rule"),
    [
        ({"name": "Bad_Name"}, "name"),
        ({"name": ""}, "name"),
        ({"category": "vector"}, "category"),
        ({"flag": "memory-good"}, "flag"),
        ({"write": None}, "operations"),
        ({"availability": lambda self: Availability(False, None)}, "availability"),
        ({"availability": lambda self: 1 / 0}, "availability"),
        ({"availability": lambda self: False}, "availability"),  # not an Availability
    ],
)
def test_each_rule(attrs, rule):
    assert [v.rule for v in validate_backend(_bad(**attrs))] == [rule]


def test_registry_passes_and_broken_plugins_are_violations():
    assert check_registry(Registry({}, plugins=[])) == []
    registry = Registry({})
    registry.register(_bad(name="Wrong"))
    assert [str(v) for v in check_registry(registry)] == [
        "Wrong: name: 'Wrong' is not stable lowercase kebab-case"
    ]


def test_real_pgvector_adapter_is_dormant_and_valid():
    report = check_all({}, adapters=True, plugins=[])
    assert report.ok and "pgvector adapter" in report.checked


@pytest.mark.parametrize(
    ("declaration", "rule"),
    [
        (Declaration("declared", capabilities=("resolve", "write")), "capabilities"),
        (Declaration("declared", capabilities=("resolve",), variables=(EnvVar("memory_url"),)), "variables"),
        (Declaration("declared", capabilities=("resolve",), database_url_var="MEMORY_X_URL"), "variables"),
        (Declaration("declared", capabilities=("resolve",), aliases=("Bad Alias",)), "aliases"),
    ],
)
def test_declarations_are_checked(declaration, rule):
    backend = type("D", (Declared,), {"declaration": declaration})()
    assert [v.rule for v in validate_backend(backend)] == [rule]


def test_cli_gate_exit_codes():
    runner = CliRunner()
    ok = runner.invoke(main, ["check", "contracts", "--include-pgvector-adapter"])
    assert ok.exit_code == 0, ok.output
    assert "0 violations" in ok.output


def test_cli_gate_fails_listing_the_backend(tmp_path):
    bad = tmp_path / "bad_backend.py"
    bad.write_text(
        "from memwork.backends.base import Backend\n"
        "class B(Backend):\n    name = 'Bad'\n    category = 'vector'\n"
        "def from_env(env):\n    return B()\n"
    )
    result = CliRunner().invoke(main, ["check", "contracts", "--adapter", str(bad)])
    assert result.exit_code == 1
    assert "FAIL Bad: name" in result.output and "FAIL Bad: category" in result.output
    assert "FAIL Bad: operations" in result.output
