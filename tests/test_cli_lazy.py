"""The top-level command table: each command's module is imported only when that command runs, and the
table names exactly what the command modules export."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from memwork.cli import COMMAND_MODULES, COMMANDS, load_all_commands, main


def test_the_table_names_exactly_the_commands_each_module_exports():
    exported = {}
    for module in COMMAND_MODULES:
        for command in importlib.import_module(f"memwork.cli.{module}").commands:
            exported[command.name] = module
    assert exported == COMMANDS
    assert set(load_all_commands()) >= set(COMMANDS)
    assert main.list_commands(None) == sorted(COMMANDS)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("argv", "never"),
    [
        (["status", "--help"], ["fastapi", "papermill", "scipy", "memwork.migrate", "memwork.defrag"]),
        (["report", "list", "--help"], ["fastapi", "scipy", "memwork.defrag", "memwork.certify"]),
        (["backfill", "--help"], ["fastapi", "papermill", "memwork.defrag", "memwork.service"]),
    ],
)
def test_a_command_imports_only_what_it_needs(argv, never):
    """A fresh interpreter, as a shell runs ``memwork``: the heavy features of other commands stay out."""
    probe = (
        "import sys\nfrom memwork.cli import main\n"
        f"try:\n    main({argv!r}, standalone_mode=False)\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in {never!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_an_unknown_command_is_still_a_usage_error():
    from click.testing import CliRunner

    result = CliRunner().invoke(main, ["no-such-command"])
    assert result.exit_code == 2 and "No such command" in result.output
