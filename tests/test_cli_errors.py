"""The CLI's single error edge: one line, the right exit code, no traceback, no password."""

from __future__ import annotations

import click
import pytest
import sqlalchemy.exc
from click.testing import CliRunner

from memwork.cli import main
from memwork.errors import CheckFailed, UsageError


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
        (CheckFailed("verdict FAIL"), 1, "Error: verdict FAIL"),
        (ValueError("bad value"), 2, "Error: ValueError: bad value"),
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


def test_debug_shows_the_traceback(failing_command):
    failing_command["exc"] = UsageError("limit", 0, "must be 1..200")
    result = CliRunner().invoke(main, ["--debug", "raise-for-test"])
    assert isinstance(result.exception, UsageError)


def test_a_programming_error_is_not_hidden(failing_command):
    failing_command["exc"] = KeyError("bug")
    result = CliRunner().invoke(main, ["raise-for-test"])
    assert isinstance(result.exception, KeyError)


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
