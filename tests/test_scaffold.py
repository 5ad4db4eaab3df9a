"""``memwork scaffold backend``: renders, refuses to overwrite, passes the gate and its own test."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from memwork.cli import main
from memwork.errors import UsageError
from memwork.facade.scaffold import render_backend, render_source, write_scaffold

ARGS = [
    "scaffold",
    "backend",
    "--name",
    "zep",
    "--category",
    "extraction",
    "--role",
    "automatic-memory-generation",
]
CAPS = ["--capability", "write", "--capability", "compact"]


def test_dry_run_prints_both_files_and_writes_nothing(tmp_path):
    result = CliRunner().invoke(main, [*ARGS, *CAPS, "--dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (
        "# ---- zep_backend.py ----" in result.output and "# ---- test_zep_backend.py ----" in result.output
    )
    assert 'FLAG = "MEMORY_ZEP_ENABLED"' in result.output
    assert list(tmp_path.iterdir()) == []


def test_written_adapter_passes_gate_and_its_test_and_is_never_overwritten(tmp_path):
    runner = CliRunner()
    written = runner.invoke(main, [*ARGS, *CAPS, "--write", "--dir", str(tmp_path)])
    assert written.exit_code == 0, written.output
    module, test = tmp_path / "zep_backend.py", tmp_path / "test_zep_backend.py"
    assert module.exists() and test.exists()
    gate = runner.invoke(main, ["check", "contracts", "--adapter", str(module)])
    assert gate.exit_code == 0, gate.output
    env = {**os.environ, "MEMWORK_HOME": str(tmp_path / "home")}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            str(test),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "4 passed" in run.stdout
    before = module.read_text()
    again = runner.invoke(main, [*ARGS, *CAPS, "--write", "--dir", str(tmp_path)])
    assert again.exit_code == 2 and "refusing to overwrite" in again.output
    assert module.read_text() == before


def test_refuses_when_only_the_test_exists(tmp_path):
    scaffold = render_backend("milvus", "semantic", "scale-out-vector-store", ["resolve"])
    (tmp_path / scaffold.test_path).write_text("keep me")
    with pytest.raises(UsageError, match="refusing to overwrite"):
        write_scaffold(scaffold, tmp_path)
    assert not (tmp_path / scaffold.module_path).exists()
    assert (tmp_path / scaffold.test_path).read_text() == "keep me"


def test_kebab_name_becomes_module_and_class():
    scaffold = render_backend("kafka-events", "behavior", "event tracking", ["write", "write"])
    text = scaffold.files["kafka_events_backend.py"]
    assert "class KafkaEventsBackend(BaseBackend)" in text and "MEMORY_KAFKA_EVENTS_ENABLED" in text
    assert "def write(" in text and "def resolve(" not in text


@pytest.mark.parametrize(
    ("name", "category", "role", "caps", "field"),
    [
        ("Milvus", "semantic", "r", ["resolve"], "name"),
        ("qdrant", "semantic", "r", ["resolve"], "name"),  # memwork ships qdrant: its name is taken
        ("legacy", "semantic", "r", ["resolve"], "name"),
        ("milvus", "vector", "r", ["resolve"], "category"),
        ("milvus", "semantic", 'bad"role', ["resolve"], "role"),
        ("milvus", "semantic", "r", [], "capability"),
        ("milvus", "semantic", "r", ["delete"], "capability"),
    ],
)
def test_bad_arguments(name, category, role, caps, field):
    with pytest.raises(UsageError) as err:
        render_backend(name, category, role, caps)
    assert err.value.field == field


def test_cli_bad_argument_exit_2(tmp_path):
    result = CliRunner().invoke(main, [*ARGS[:3], "Bad", *ARGS[4:], "--capability", "write"])
    assert result.exit_code == 2 and "name=" in result.output
    assert not Path("bad_backend.py").exists()


# ---- scaffold source --------------------------------------------------------------------------------
def _pytest(test: Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MEMWORK_HOME": str(home)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(test.parent)]
    return subprocess.run(
        [*command, str(test)], capture_output=True, text=True, env=env, cwd=test.parent, timeout=120
    )


def test_written_source_passes_the_gate_and_its_test_and_is_never_overwritten(tmp_path):
    runner = CliRunner()
    written = runner.invoke(main, ["scaffold", "source", "--name", "zep", "--write", "--dir", str(tmp_path)])
    assert written.exit_code == 0, written.output
    module, test = tmp_path / "zep_source.py", tmp_path / "test_zep_source.py"
    assert f"next: memwork check contracts --source {module}" in written.output
    export = tmp_path / "export.jsonl"
    export.write_text('{"id": "1", "userId": "u", "content": "hello", "createdAt": "2024-01-02T03:04:05Z"}\n')
    gate = runner.invoke(
        main,
        ["check", "contracts", "--source", str(module), "--json"],
        env={"MEMORY_ZEP_EXPORT": str(export)},
    )
    assert gate.exit_code == 0, gate.output
    report = json.loads(gate.output)
    assert str(module) in report["sources"] and str(module) not in report["unchecked"]  # built and read
    unconfigured = runner.invoke(main, ["check", "contracts", "--source", str(module), "--json"])
    assert unconfigured.exit_code == 0, unconfigured.output
    assert json.loads(unconfigured.output)["unchecked"][str(module)].startswith("not configured: MEMORY_ZEP")
    run = _pytest(test, tmp_path / "home")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "4 passed" in run.stdout
    before = module.read_text()
    again = runner.invoke(main, ["scaffold", "source", "--name", "zep", "--write", "--dir", str(tmp_path)])
    assert again.exit_code == 2 and "refusing to overwrite" in again.output
    assert module.read_text() == before


def test_the_rendered_source_imports_through_the_pipeline(tmp_path):
    """What the scaffold renders is a working source: a dry-run import reads every line of the export."""
    write_scaffold(render_source("acme-notes"), tmp_path)
    export = tmp_path / "export.jsonl"
    lines = [{"id": f"n{k}", "userId": f"u{k % 2}", "content": f"note {k}"} for k in range(5)]
    export.write_text("".join(json.dumps(line) + "\n" for line in lines) + "{broken\n")
    module = tmp_path / "acme_notes_source.py"
    result = CliRunner().invoke(
        main,
        ["import", "--from", f"module:{module}", "--page-size", "2", "--json"],
        env={"MEMORY_ACME_NOTES_EXPORT": str(export)},
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert (report["rowsRead"], report["rowsQuarantined"]) == (6, 1)  # the line it cannot read
    assert (report["users"]["u0"], report["users"]["u1"]) == (3, 2)


@pytest.mark.parametrize("name", ["qdrant", "redis-streams", "legacy", "legacy-mysql", "pgvector", "Zep"])
def test_source_names_memwork_ships_or_that_are_not_kebab_are_refused(name):
    with pytest.raises(UsageError) as err:
        render_source(name)
    assert err.value.field == "name"
