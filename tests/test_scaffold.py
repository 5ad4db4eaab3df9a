"""``memwork scaffold backend``: renders, refuses to overwrite, passes the gate and its own test."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from memwork.cli import main
from memwork.errors import UsageError
from memwork.facade.scaffold import render_backend, write_scaffold

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
