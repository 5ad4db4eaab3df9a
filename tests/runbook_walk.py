"""Walk a runbook: run the ``bash`` blocks of a runbook file in order, as its reader would type them.

The commands come from the runbook file itself, so the runbook and its test cannot drift. The
convention (also written down in ``runbooks/README.md``):

- Every fenced block tagged ``bash`` is walked, command by command. A command is one line
  (backslash continuations joined); lines starting with ``#`` are comments. Blocks tagged ``sh``,
  ``shell``, ``console`` or ``zsh`` are refused: a command there would escape the walk. Other
  blocks (``text``, ``json``, ``sql``, untagged) are output examples and never run.
- ``<!-- walk: skip REASON -->`` on the line right before a fence: that block is not walked (e.g. the
  production values of the variables; the walk provides its own). A reason is required.
- ``<!-- walk: hook NAME -->`` on a line of its own, outside a fence: the walk calls the test's hook
  ``NAME`` at that point. Hooks stand for what a person or the outside world does between commands
  (a reviewer edits a CSV; production traffic flows for a day).
- ``<!-- walk: file PATH -->`` on the line right before a fence of any tag: the walk writes that block's
  text to PATH (relative to the session's directory), as the reader would with an editor.
- ``# expect: exit N`` as a trailing comment of a command: its expected exit status (default 0).
  ``# expect: exit N, output TEXT`` also requires TEXT in its stdout or stderr.
- One shell session: every variable a command assigns (plain ``X=1`` too) and a ``cd`` carry over to
  the next command and the next block, like a terminal. ``set -u -o pipefail``: a variable the
  runbook uses before it sets it fails the command naming it.
- Only what the runbook sets: a walk runs the runbook as its reader would, so the test may provide
  only the variables the runbook's skipped "production values" blocks assign (their stand-ins: its
  own servers and ports); any other variable the test sets is refused (:class:`RunbookError`), and a
  variable the runbook uses is never inherited from the machine's environment. Before anything runs,
  every ``$NAME`` the walked commands use must be assigned earlier in the runbook (a command, a
  ``for NAME in``, a ``jq --arg NAME``, or a production-values block): a gap is named with its line.
- A service started in the background (``memwork serve ... > serve.log 2>&1 & SERVE_PID=$!``) keeps
  running across commands; whatever a walk started and is still running is stopped when it ends.

Each command runs in ``bash --noprofile --norc`` in its own session, with stdout and stderr in files
(so a background child never holds a pipe open), under a per-command timeout.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

SHELL_TAGS = {"bash"}
REFUSED_TAGS = {"sh", "shell", "console", "zsh"}
_FENCE = re.compile(r"^(\s*)```\s*([A-Za-z0-9_+-]*)\s*$")
_SKIP = re.compile(r"^\s*<!--\s*walk:\s*skip\b\s*(?P<reason>.*?)\s*-->\s*$")
_FILE = re.compile(r"^\s*<!--\s*walk:\s*file\s+(?P<path>[^\s>]+)\s*-->\s*$")
_HOOK = re.compile(r"^\s*<!--\s*walk:\s*hook\s+(?P<name>[A-Za-z0-9_-]+)\s*-->\s*$")
_WALK_COMMENT = re.compile(r"<!--\s*walk:")
_EXPECT = re.compile(r"#\s*expect:\s*(?P<spec>.+?)\s*$")
_EXIT = re.compile(r"^exit\s+(?P<code>\d+)$")
_OUTPUT = re.compile(r"^output\s+(?P<text>.+)$")
_HEADING = re.compile(r"^(#{1,6})\s+(?P<title>.+?)\s*$")
_DROPPED_VARS = {"_", "SHLVL", "PWD", "OLDPWD"}
_REFERENCE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
_ASSIGNMENTS = (
    re.compile(r"(?:^|[\s;&|(])(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)="),  # X=1, export X=1 Y=2
    re.compile(r"\bfor\s+([A-Za-z_][A-Za-z0-9_]*)\s+in\b"),
    re.compile(r"--arg(?:json)?\s+([A-Za-z_][A-Za-z0-9_]*)\s"),  # jq's own $NAME
)
#: what the shell itself (or any login) provides: a reader has these without a runbook setting them
SHELL_NAMES = frozenset(
    {"PWD", "OLDPWD", "HOME", "PATH", "USER", "LOGNAME", "SHELL", "TMPDIR", "RANDOM", "SECONDS", "UID"}
)
_SCRIPT = r"""
trap '__WALK_RC=$?; env -0 > "$__WALK_ENV_OUT"; pwd > "$__WALK_CWD_OUT"; exit $__WALK_RC' EXIT
set -a -u -o pipefail
eval "$__WALK_COMMAND"
"""


@dataclass(frozen=True)
class Command:
    """One command of a runbook: its text, where it is, and what it must do."""

    text: str
    line: int
    section: str
    expect_exit: int = 0
    expect_output: str | None = None


@dataclass(frozen=True)
class Hook:
    """A ``<!-- walk: hook NAME -->`` marker: a person's step the test performs."""

    name: str
    line: int
    section: str


@dataclass(frozen=True)
class WriteFile:
    """A ``<!-- walk: file PATH -->`` block: a file the reader writes (a config, a pyproject)."""

    path: str
    text: str
    line: int
    section: str


@dataclass(frozen=True)
class Skipped:
    """A ``bash`` block marked ``<!-- walk: skip REASON -->``."""

    line: int
    reason: str
    text: str


@dataclass
class Runbook:
    """A parsed runbook: the steps to walk (commands and hooks, in order) and the skipped blocks."""

    path: Path
    steps: list[Command | Hook | WriteFile] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    @property
    def commands(self) -> list[Command]:
        return [s for s in self.steps if isinstance(s, Command)]

    @property
    def production_names(self) -> set[str]:
        """Variables the skipped production-values blocks assign: the only ones a walk may provide."""
        return {name for block in self.skipped for name in assigned_names(block.text)}

    def unset_variables(self) -> list[tuple[str, int]]:
        """``(NAME, line)`` of every variable a walked command uses before the runbook sets it (in an
        earlier command, the same one, or a production-values block)."""
        assigned = self.production_names | SHELL_NAMES
        gaps: dict[str, int] = {}
        for command in self.commands:
            assigned |= assigned_names(command.text)
            for name in _REFERENCE.findall(command.text):
                if name not in assigned:
                    gaps.setdefault(name, command.line)
        return sorted(gaps.items(), key=lambda item: item[1])

    @property
    def hooks(self) -> list[str]:
        return [s.name for s in self.steps if isinstance(s, Hook)]


class RunbookError(AssertionError):
    """The runbook breaks the walk convention, or one of its commands did not do what it says."""


def parse_runbook(path: Path | str) -> Runbook:
    """Read ``path`` into its walked steps; a convention error names the file and line."""
    path = Path(path)
    runbook = Runbook(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    section = ""
    skip_reason: str | None = None
    write_to: str | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        where = f"{path}:{i + 1}"
        heading = _HEADING.match(line)
        fence = _FENCE.match(line)
        if heading:
            section = heading.group("title")
        elif (skip := _SKIP.match(line)) is not None:
            if not skip.group("reason"):
                raise RunbookError(f"{where}: 'walk: skip' needs a reason")
            skip_reason = skip.group("reason")
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            if not _FENCE.match(nxt):
                raise RunbookError(f"{where}: 'walk: skip' must be right before a fence")
        elif (target := _FILE.match(line)) is not None:
            write_to = target.group("path")
            if Path(write_to).is_absolute() or ".." in Path(write_to).parts:
                raise RunbookError(f"{where}: 'walk: file' takes a relative path inside the session")
            if not _FENCE.match(lines[i + 1] if i + 1 < len(lines) else ""):
                raise RunbookError(f"{where}: 'walk: file' must be right before a fence")
        elif (hook := _HOOK.match(line)) is not None:
            runbook.steps.append(Hook(hook.group("name"), i + 1, section))
        elif _WALK_COMMENT.search(line):
            raise RunbookError(f"{where}: unknown walk marker {line.strip()!r}")
        elif fence:
            tag = fence.group(2).lower()
            end = i + 1
            while end < len(lines) and not lines[end].strip().startswith("```"):
                end += 1
            if end == len(lines):
                raise RunbookError(f"{where}: unclosed fence")
            body = lines[i + 1 : end]
            if tag in REFUSED_TAGS:
                raise RunbookError(f"{where}: a ```{tag} block would escape the walk: tag commands bash")
            if write_to is not None:
                runbook.steps.append(WriteFile(write_to, "\n".join(body) + "\n", i + 1, section))
            elif tag in SHELL_TAGS:
                if skip_reason is not None:
                    runbook.skipped.append(Skipped(i + 1, skip_reason, "\n".join(body)))
                else:
                    runbook.steps.extend(_commands(body, i + 2, section, path))
            elif skip_reason is not None:
                raise RunbookError(f"{where}: 'walk: skip' before a ```{tag or 'untagged'} block")
            skip_reason = write_to = None
            i = end
        i += 1
    return runbook


def assigned_names(text: str) -> set[str]:
    """Variable names a shell text assigns (``X=``, ``export X= Y=``, ``for X in``, ``jq --arg X``);
    comment lines are not read."""
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    return {name for pattern in _ASSIGNMENTS for name in pattern.findall(code)}


def _commands(body: list[str], first_line: int, section: str, path: Path) -> Iterator[Command]:
    """The commands of one bash block: continuations joined, comments dropped, expectations read."""
    j = 0
    while j < len(body):
        start = j
        text = body[j]
        while text.rstrip().endswith("\\") and j + 1 < len(body):
            j += 1
            text = text.rstrip()[:-1] + " " + body[j].strip()
        j += 1
        stripped = text.strip()
        if not stripped or stripped.startswith("#"):
            continue
        yield _command(stripped, first_line + start, section, path)


def _command(text: str, line: int, section: str, path: Path) -> Command:
    expect_exit, expect_output = 0, None
    match = _EXPECT.search(text)
    if match:
        for clause in (c.strip() for c in match.group("spec").split(",")):
            if (code := _EXIT.match(clause)) is not None:
                expect_exit = int(code.group("code"))
            elif (out := _OUTPUT.match(clause)) is not None:
                expect_output = out.group("text").strip()
            else:
                raise RunbookError(f"{path}:{line}: unknown expectation {clause!r} (exit N | output TEXT)")
    return Command(text, line, section, expect_exit, expect_output)


@dataclass
class Result:
    """What one walked command did."""

    command: Command
    returncode: int
    stdout: str
    stderr: str
    seconds: float


HookFn = Callable[["Walk"], None]


class Walk:
    """One walk-through: a shell session (variables, working directory) and what it started.

    Use as a context manager so every process the walk started is stopped at the end::

        with Walk(workdir, env) as walk:
            walk.run(parse_runbook("runbooks/defrag_maintenance.md"), hooks={"review": approve_all})
    """

    def __init__(
        self,
        workdir: Path,
        env: Mapping[str, str],
        *,
        timeout_s: float = 180.0,
        bin_dir: Path | None = None,
    ) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.cwd = self.workdir
        self.marker = f"runbook-walk-{uuid.uuid4().hex}"
        bin_dir = bin_dir or Path(sys.executable).parent  # the venv's `memwork`
        self.env = dict(env)
        self.env["PATH"] = f"{bin_dir}{os.pathsep}{self.env.get('PATH', os.defpath)}"
        self.terminal = dict(self.env)  # the reader's own terminal, before the test provides anything
        self.timeout_s = timeout_s
        self.results: list[Result] = []
        self.hooks_called: list[str] = []
        self._logs = self.workdir / ".walk"
        self._logs.mkdir(exist_ok=True)

    def __enter__(self) -> Walk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()

    # ---- walking ----------------------------------------------------------------------------
    def run(self, runbook: Runbook, hooks: Mapping[str, HookFn] | None = None) -> list[Result]:
        """Walk every step of ``runbook``; the first command that breaks its expectation raises.

        Every hook the runbook names must be given, and every hook given must be named by it. Before
        anything runs: every variable the runbook uses is set by the runbook, and the test provided
        only what the runbook's production-values blocks set (see the module docstring)."""
        self._only_what_the_runbook_sets(runbook)
        hooks = dict(hooks or {})
        named = set(runbook.hooks)
        if missing := named - set(hooks):
            raise RunbookError(f"{runbook.path}: the test gives no hook for {sorted(missing)}")
        if unused := set(hooks) - named:
            raise RunbookError(f"{runbook.path}: no 'walk: hook' marker for {sorted(unused)}")
        done: list[Result] = []
        for step in runbook.steps:
            if isinstance(step, Hook):
                hooks[step.name](self)
                self.hooks_called.append(step.name)
            elif isinstance(step, WriteFile):
                target = self.cwd / step.path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(step.text, encoding="utf-8")
            else:
                done.append(self.execute(step, runbook.path))
        return done

    def _only_what_the_runbook_sets(self, runbook: Runbook) -> None:
        if gaps := runbook.unset_variables():
            named = ", ".join(f"${name} (line {line})" for name, line in gaps)
            raise RunbookError(f"{runbook.path}: uses {named}, which the runbook never sets")
        provided = {name for name, value in self.env.items() if self.terminal.get(name) != value}
        if crutches := sorted(provided - runbook.production_names):
            raise RunbookError(
                f"{runbook.path}: the walk provides {crutches}, which the runbook never sets: its reader "
                "would not have them (set them in the runbook, e.g. its production-values block)"
            )
        used = {name for c in runbook.commands for name in _REFERENCE.findall(c.text)}
        for name in used - runbook.production_names - SHELL_NAMES:
            if name in self.env and self.terminal.get(name) == self.env[name]:
                del self.env[name]  # the machine's value, not the runbook's: set -u must see the gap

    def execute(self, command: Command, source: Path | str = "<walk>") -> Result:
        """Run one command in the session; raise :class:`RunbookError` unless it did as expected."""
        n = len(self.results)
        out, err = self._logs / f"{n:03d}.out", self._logs / f"{n:03d}.err"
        env_out, cwd_out = self._logs / f"{n:03d}.env", self._logs / f"{n:03d}.cwd"
        env = {
            **self.env,
            "__WALK_COMMAND": command.text,
            "__WALK_ENV_OUT": str(env_out),
            "__WALK_CWD_OUT": str(cwd_out),
            "__WALK_MARKER": self.marker,
        }
        started = time.monotonic()
        with out.open("wb") as fout, err.open("wb") as ferr:
            proc = subprocess.Popen(
                ["bash", "--noprofile", "--norc", "-c", _SCRIPT],
                cwd=self.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=fout,
                stderr=ferr,
                start_new_session=True,
            )
            try:
                returncode = proc.wait(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                returncode = -9
        seconds = time.monotonic() - started
        result = Result(command, returncode, _read(out), _read(err), seconds)
        self.results.append(result)
        self._keep_state(env_out, cwd_out)
        where = f"{source}:{command.line} ({command.section})"
        if returncode == -9:
            raise RunbookError(
                f"{where}: timed out after {self.timeout_s:.0f} s: {command.text}\n" + _tails(result)
            )
        if returncode != command.expect_exit:
            raise RunbookError(
                f"{where}: exit {returncode}, the runbook expects {command.expect_exit}: {command.text}\n"
                + _tails(result)
            )
        if command.expect_output and command.expect_output not in result.stdout + result.stderr:
            raise RunbookError(
                f"{where}: output lacks {command.expect_output!r}: {command.text}\n{_tails(result)}"
            )
        return result

    def sh(self, text: str, expect_exit: int = 0) -> Result:
        """Run a command that is not in a runbook (hooks use it), in the same session."""
        return self.execute(Command(text, 0, "hook", expect_exit))

    def _keep_state(self, env_out: Path, cwd_out: Path) -> None:
        """The variables and working directory the command left become the session's."""
        if env_out.exists():
            env: dict[str, str] = {}
            for item in env_out.read_bytes().split(b"\0"):
                name, sep, value = item.decode("utf-8", "surrogateescape").partition("=")
                if sep and name not in _DROPPED_VARS and not name.startswith("__WALK_"):
                    env[name] = value
            self.env = env
        if cwd_out.exists() and (cwd := cwd_out.read_text().strip()):
            self.cwd = Path(cwd)

    # ---- what the walk left behind ------------------------------------------------------------
    def var(self, name: str) -> str:
        """A variable of the session (what ``echo "$NAME"`` would print)."""
        return self.env[name]

    def output_of(self, prefix: str) -> str:
        """stdout of the last walked command starting with ``prefix``."""
        for result in reversed(self.results):
            if result.command.text.startswith(prefix):
                return result.stdout
        raise KeyError(prefix)

    def running(self) -> list[int]:
        """Pids of the processes this walk started that are still alive (found by their marker)."""
        needle = f"__WALK_MARKER={self.marker}".encode()
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                environ = (entry / "environ").read_bytes()
            except OSError:
                continue
            if needle in environ.split(b"\0"):
                pids.append(int(entry.name))
        return pids

    def stop_all(self, grace_s: float = 10.0) -> None:
        """SIGTERM whatever the walk started and is still running, SIGKILL what outlives ``grace_s``."""
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            pids = self.running()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and self.running():
                time.sleep(0.1)

    def summary(self) -> str:
        """One line per walked command: seconds, exit status, text (for the test log)."""
        return "\n".join(
            f"{r.seconds:6.2f}s exit {r.returncode}  {r.command.text[:120]}" for r in self.results
        )


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def _tails(result: Result, chars: int = 3000) -> str:
    return f"--- stdout (tail) ---\n{result.stdout[-chars:]}\n--- stderr (tail) ---\n{result.stderr[-chars:]}"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (for a service a runbook starts)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
