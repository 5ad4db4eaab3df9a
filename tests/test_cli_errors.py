"""The CLI's single error edge: one line, the right exit code, no traceback, no password."""

from __future__ import annotations

import click
import pytest
import sqlalchemy.exc
from click.testing import CliRunner

from memwork.cli import main
from memwork.errors import (
    CheckFailed,
    EntryNotFound,
    MemworkError,
    ServiceUnavailable,
    UsageError,
    WriteConflict,
)

HINT = "(run with --debug for the traceback)"


@pytest.fixture
def failing_command():
    """Register a throw-away command that raises what the test asks for."""
    holder: dict[str, BaseException] = {}

    @click.command("raise-for-test")
    def raise_for_test() -> None:
        raise holder["exc"]

    main.add_command(raise_for_test)
    yield holder
    main.commands.pop("raise-for-test", None)


@pytest.mark.parametrize(
    ("exc", "code", "text"),
    [
        (UsageError("limit", 0, "must be 1..200"), 2, "Error: limit=0: must be 1..200"),
        (EntryNotFound("notes/a.md", "alice"), 2, "Error: path='notes/a.md': no entry in scope 'alice'"),
        (CheckFailed("verdict FAIL"), 1, "Error: verdict FAIL"),
        (ServiceUnavailable("postgresql://u:pw@db/x: connection refused"), 1, "u:***@db"),
        (WriteConflict("a.md", "default"), 1, "Error: path='a.md': changed by another writer"),
        # a bug is not bad input: exit 1, its type, the hint
        (ValueError("bad value"), 1, f"Error: ValueError: bad value {HINT}"),
        (KeyError("bug"), 1, f"Error: KeyError: 'bug' {HINT}"),
        (OSError(5, "I/O error"), 1, f"Error: OSError: [Errno 5] I/O error {HINT}"),
        (RuntimeError("postgresql://u:pw@db/x failed\nsecond line"), 1, f"u:***@db/x failed {HINT}"),
        (
            sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("lost mysql://u:pw@db/x\nsecond line")),
            1,
            "mysql://u:***@db/x",
        ),
    ],
)
def test_errors_become_one_line_and_an_exit_code(failing_command, exc, code, text):
    failing_command["exc"] = exc
    result = CliRunner().invoke(main, ["raise-for-test"])
    assert result.exit_code == code
    assert text in result.output
    assert "Traceback" not in result.output
    assert "pw@" not in result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("exc", [UsageError("limit", 0, "must be 1..200"), KeyError("bug"), ValueError("x")])
def test_debug_shows_the_traceback(failing_command, exc):
    failing_command["exc"] = exc
    result = CliRunner().invoke(main, ["--debug", "raise-for-test"])
    assert result.exception is exc


def test_only_usage_errors_exit_2():
    """The exit-code table in errors.py: 2 is UsageError's alone, every other memwork error is 1."""

    def subclasses(cls: type) -> list[type]:
        return [cls, *(s for sub in cls.__subclasses__() for s in subclasses(sub))]

    for cls in subclasses(MemworkError):
        if cls.__name__ == "ReportExecutionError":
            continue  # per instance: 2 only when the failing cell raised a UsageError
        assert cls.exit_code == (2 if issubclass(cls, UsageError) else 1), cls


def test_bad_input_exits_2_and_a_bug_in_a_real_command_exits_1(tmp_path, monkeypatch):
    runner = CliRunner()
    unknown_option = runner.invoke(main, ["store", "info", "--no-such-option"])
    assert unknown_option.exit_code == 2 and "No such option" in unknown_option.output
    missing = runner.invoke(main, ["store", "info", "--store", str(tmp_path / "absent")])
    assert missing.exit_code == 2 and "no such directory" in missing.output and HINT not in missing.output

    def broken(*args, **kwargs):
        raise ValueError("an internal mistake")

    monkeypatch.setattr("memwork.cli.store.store_info", broken)
    (tmp_path / "memory").mkdir()
    bug = runner.invoke(main, ["store", "info", "--store", str(tmp_path / "memory")])
    assert bug.exit_code == 1, bug.output
    assert bug.output.strip() == f"Error: ValueError: an internal mistake {HINT}"


def test_a_closed_pipe_ends_quietly():
    """`memwork ... | head` must not print an error when the reader leaves early."""
    import subprocess
    import sys

    script = (
        "import subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-m', 'memwork', 'pgvector', 'schema', '--dimensions', '8'],"
        " stdout=subprocess.PIPE, stderr=subprocess.PIPE)\n"
        "p.stdout.close()\n"
        "err = p.stderr.read().decode()\n"
        "sys.exit(0 if p.wait() == 0 and 'Error' not in err else 1)\n"
    )
    assert subprocess.run([sys.executable, "-c", script], timeout=60).returncode == 0
