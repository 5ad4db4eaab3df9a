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
    """The exit-code table in errors.py: 2 is UsageError's alone, 3 an undecided verdict's, every other
    memwork error is 1."""

    def subclasses(cls: type) -> list[type]:
        return [cls, *(s for sub in cls.__subclasses__() for s in subclasses(sub))]

    for cls in subclasses(MemworkError):
        if cls.__name__ == "ReportExecutionError":
            continue  # per instance: 2 only when the failing cell raised a UsageError
        if cls.__name__ == "VerdictInconclusive":
            assert cls.exit_code == 3
            continue
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


# ---- bad input writes nothing (F-16): exit 2, one line, no workspace, no reports folder -------------
#: each is refused as bad input; ``DIR`` becomes an existing folder of the test's own
BAD_INPUTS = [
    ["serve", "--host", "999.1.1.1", "--port", "0"],  # a dotted quad out of range: no DNS lookup
    ["serve", "--host", "bad host", "--port", "0"],
    ["serve", "--host", "192.0.2.1", "--port", "0"],  # TEST-NET-1: an address of no machine here
    ["smoke", "external", "--backend", "nonexistent"],
    ["check", "config", "--backend", "nonexistent"],
    ["pgvector", "url", "--name", "bad;name"],  # refused before a server starts
    ["import", "--from", "nonexistent"],
    ["backfill", "--table", "bad;x"],
    ["canary", "judge", "--log", "missing.jsonl"],
    ["defrag", "analyze", "--store", "absent"],
    ["store", "info", "--store", "absent"],
    ["report", "run", "nonexistent"],
    ["report", "run", "canary_signoff", "-p", "min_samples", "abc"],  # the runner's type check
]
#: refused by the notebook's own library checks, in a kernel: the run folder is removed again
REFUSED_BY_A_REPORT = [
    ["report", "run", "canary_signoff", "-p", "comparison_log", "missing.jsonl"],
    ["report", "run", "canary_signoff", "-p", "comparison_log", "DIR"],
    ["report", "run", "health_report", "-p", "age_days", "0"],
]
#: commands that only read or report: they leave no workspace behind either
READERS = [
    ["status", "--json"],
    ["defrag", "journal"],
    ["check", "config", "--backend", "legacy"],
    ["pgvector", "url", "--stop"],
    ["report", "list"],
]


def _person_env(folder):
    """The environment of a person in an empty ``folder``: none of the test session's MEMORY_* /
    MEMWORK_* settings, a fresh MEMWORK_HOME inside the folder, and a folder ``DIR`` to point at."""
    import os

    (folder / "DIR").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMORY_", "MEMWORK_"))}
    env["MEMWORK_HOME"] = str(folder / "home")
    env["MEMWORK_CACHE_DIR"] = os.environ["MEMWORK_CACHE_DIR"]  # the machine's, not a memory setting
    return env


def _left_behind(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.name != "DIR")


def _memwork_in_empty_folder(folder, args, monkeypatch):
    """``memwork ARGS`` in process, as a person would run it in an empty folder; the result (exit
    code, stdout, stderr) and what it left there."""
    import os

    env = _person_env(folder)
    for key in list(os.environ):
        if key not in env:
            monkeypatch.delenv(key)
    monkeypatch.setenv("MEMWORK_HOME", env["MEMWORK_HOME"])
    monkeypatch.chdir(folder)
    real = [str(folder / "DIR") if a == "DIR" else a for a in args]
    result = CliRunner().invoke(main, real)
    return (result.exit_code, result.stdout, result.stderr), _left_behind(folder)


def _memwork_process_in_empty_folder(folder, args):
    """The same in a real process (a report's kernel, exit hooks)."""
    import subprocess
    import sys

    env = _person_env(folder)
    real = [str(folder / "DIR") if a == "DIR" else a for a in args]
    done = subprocess.run(
        [sys.executable, "-m", "memwork", *real],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    return (done.returncode, done.stdout, done.stderr), _left_behind(folder)


def _assert_refused(done, left):
    code, stdout, stderr = done
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2, stderr
    assert len(lines) == 1 and lines[0].startswith("Error: ") and stdout == "", stderr
    assert "Traceback" not in stderr
    assert left == []  # no workspace (MEMWORK_HOME), no reports/ folder, nothing


@pytest.mark.parametrize("args", BAD_INPUTS, ids=" ".join)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, monkeypatch, args):
    _assert_refused(*_memwork_in_empty_folder(tmp_path, args, monkeypatch))


@pytest.mark.slow
@pytest.mark.parametrize("args", REFUSED_BY_A_REPORT, ids=" ".join)
def test_input_a_report_refuses_leaves_no_run_folder(tmp_path, args):
    """Artifacts are for a run that started; input the notebook's checks refuse is not one."""
    done, left = _memwork_process_in_empty_folder(tmp_path, args)
    _assert_refused(done, left)
    assert "(nothing written)" in done[2]


def test_serve_refuses_a_bad_host_in_a_real_process_before_uvicorn_logs_a_line(tmp_path):
    done, left = _memwork_process_in_empty_folder(tmp_path, ["serve", "--host", "999.1.1.1", "--port", "0"])
    _assert_refused(done, left)


@pytest.mark.parametrize("args", READERS, ids=" ".join)
def test_reading_commands_leave_no_workspace(tmp_path, monkeypatch, args):
    (code, _stdout, stderr), left = _memwork_in_empty_folder(tmp_path, args, monkeypatch)
    assert code == 0, stderr
    assert left == []


def test_the_first_write_creates_the_workspace(tmp_path, monkeypatch):
    """Lazily, not never: the default legacy store's SQLite file is made in a new workspace folder
    (SQLite creates a file, not its folder) by the first command that writes there."""
    (code, _stdout, stderr), left = _memwork_in_empty_folder(tmp_path, ["check", "health"], monkeypatch)
    assert code == 0, stderr
    assert "home/legacy.db" in left
