"""Adding a backend touches only its own module and its registration.

This module *is* such a backend: it declares itself (variables, a secret the name heuristics would
miss, an alias, capabilities, a database-URL variable) and is registered the way a third-party
package registers one -- an installed distribution whose ``entry_points.txt`` names
``memwork.backends`` -- then ``check config``, ``status``, ``check contracts``, the facade's
selection and the canary see it with no other change to memwork.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import pytest
from click.testing import CliRunner

from memwork.backends.base import declaration_of
from memwork.backends.legacy import DECLARATION as LEGACY
from memwork.backends.pgvector import DECLARATION as PGVECTOR
from memwork.checks import parse_bool
from memwork.cli import main
from memwork.contracts import Availability, BaseBackend, Declaration, EnvVar, flag_var
from memwork.errors import UsageError
from memwork.plugins import Registry

FLAG = "MEMORY_ACME_RECALL_ENABLED"
URL = "MEMORY_ACME_RECALL_URL"
PASSPHRASE = "MEMORY_ACME_RECALL_PASSPHRASE"  # not caught by the secret-name pattern: declared secret

DECLARATION = Declaration(
    name="acme-recall",
    category="semantic",
    role="test plugin registered through an entry point",
    capabilities=("resolve",),
    variables=(
        flag_var(FLAG),
        EnvVar(URL, "Acme Recall URL", required=True),
        EnvVar(PASSPHRASE, "Acme Recall passphrase", required=True, secret=True),
        EnvVar("MEMORY_ACME_RECALL_TOP_K", default="5"),
    ),
    aliases=("acme",),
    database_url_var=URL,
)


class AcmeRecall(BaseBackend):
    """Answers resolve with one memory when enabled and configured; never connects anywhere."""

    declaration = DECLARATION

    def __init__(self, env: Mapping[str, str]) -> None:
        try:
            self.enabled = parse_bool(FLAG, env.get(FLAG), default=False)
        except UsageError:
            self.enabled = False
        self.url = (env.get(URL) or "").strip()

    def availability(self) -> Availability:
        if not self.enabled:
            return Availability.no(f"{FLAG} is not 1")
        if not self.url:
            return Availability.no(f"{URL} is not set")
        return Availability.ok()

    def resolve(self, request: Mapping[str, Any]) -> dict[str, Any]:
        return {"memories": [{"content": f"acme says hi to {request['userId']}"}]}


def from_env(env: Mapping[str, str]) -> AcmeRecall:
    return AcmeRecall(env)


SECRET = "correct horse battery staple"


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """Install a distribution whose only content is the entry point naming this module."""
    dist = tmp_path / "site" / "memwork_acme_recall-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: memwork-acme-recall\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[memwork.backends]\nacme-recall = {__name__}:from_env\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    for name in [k for k in os.environ if k.startswith("MEMORY_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("MEMORY_LEGACY_DATABASE_URL", f"sqlite:///{tmp_path / 'legacy.db'}")
    return {FLAG: "1", URL: "https://acme.example/recall", PASSPHRASE: SECRET}


def _run(args: list[str], env: Mapping[str, str] | None = None) -> Any:
    return CliRunner().invoke(main, args, env=dict(env or {}))


def test_the_entry_point_loader_registers_it(installed):
    registry = Registry()
    assert registry.names()[-1] == "acme-recall" and registry.problems() == []
    assert registry.find("acme") is registry.find("acme-recall")
    assert registry.origin("acme").startswith("entry point")


def test_check_config_reads_its_declaration(installed):
    result = _run(["check", "config", "--backend", "acme", "--json"], installed)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["backend"] == "acme-recall" and report["ready"] is True
    assert report["select"] == "MEMORY_BACKEND=acme"
    rows = {row["name"]: row for row in report["variables"]}
    assert list(rows) == [v.name for v in DECLARATION.variables]
    assert rows[PASSPHRASE]["secret"] is True and rows[PASSPHRASE]["value"] != SECRET
    assert rows["MEMORY_ACME_RECALL_TOP_K"]["default"] == "5"
    assert SECRET not in result.output

    missing = _run(["check", "config", "--backend", "acme-recall", "--json"], {FLAG: "1"})
    assert missing.exit_code == 1
    assert json.loads(missing.stdout)["missing"] == [URL, PASSPHRASE]
    shell = _run(["check", "config", "--backend", "acme", "--format", "shell"], installed)
    assert f"export {PASSPHRASE}='<secret>'" in shell.output and SECRET not in shell.output


def test_status_lists_it_and_the_facade_selects_it_by_alias(installed):
    result = _run(["status", "--json"], {**installed, "MEMORY_BACKEND": "acme"})
    assert result.exit_code == 0, result.output
    status = json.loads(result.output)
    row = next(b for b in status["backends"] if b["name"] == "acme-recall")
    assert row["flag"] == FLAG and row["category"] == "semantic" and row["available"] is True
    assert row["supports"] == {"resolve": True, "write": False, "compact": False}
    assert row["origin"].startswith("entry point")
    assert status["selectedBackends"]["resolve"] == "acme-recall"
    assert status["selectedBackends"]["write"] == "legacy-conversation-memory"
    assert SECRET not in result.output


def test_check_contracts_sees_it_and_checks_it_is_dormant(installed):
    result = _run(["check", "contracts", "--include-pgvector-adapter", "--json"], installed)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert "acme-recall" in report["checked"] and "acme-recall adapter" in report["checked"]
    assert report["violations"] == []


def test_the_canary_reads_its_database_url_variable(installed):
    from memwork.rollout.gates import registered_name, target_url

    assert target_url(installed, "acme") == installed[URL]
    assert registered_name(installed, "acme") == "acme-recall"


def test_built_in_declarations_live_with_their_backends():
    registry = Registry({}, plugins=[])
    assert declaration_of(registry.get("legacy")) is LEGACY and LEGACY.selector == "legacy"
    assert declaration_of(registry.get("pgvector")) is PGVECTOR
    assert PGVECTOR.flag == "MEMORY_VECTOR_ENABLED"
    assert PGVECTOR.database_url_var == "MEMORY_PGVECTOR_DATABASE_URL"
    import importlib

    from seed_variables import SEED_REQUIRED, SEED_VARIABLES

    for name, variables in SEED_VARIABLES.items():
        module = importlib.import_module(f"memwork.backends.{name.replace('-', '_')}")
        decl = declaration_of(registry.get(name))
        assert decl is module.DECLARATION  # declared in the backend's own module, nowhere else
        assert decl.flag == f"MEMORY_{name.replace('-', '_').upper()}_ENABLED"
        assert set(variables) <= {v.name for v in decl.variables}  # the seed's names, exactly
        assert [v.name for v in decl.variables if v.required or v.flag] == SEED_REQUIRED[name]
        assert all(v.secret for v in decl.variables if v.name.endswith(("_API_KEY", "_PASSWORD")))
        assert decl.mapping, f"{name} documents how its answers fill the payload"


def test_backends_import_nothing_from_the_facade():
    import ast
    from pathlib import Path

    import memwork.backends

    for path in Path(memwork.backends.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom | ast.Import):
                names = (
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                )
                assert not any(n.startswith("memwork.facade") for n in names), f"{path.name} imports {names}"
