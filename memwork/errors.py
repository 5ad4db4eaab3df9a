"""Small domain exceptions. The CLI maps them to exit codes once, in ``memwork.cli``.

Exit codes: 0 ok, 1 a check or verdict failed (:class:`CheckFailed`) or any other failure, 2 usage
or input error -- only :class:`UsageError` and its subclasses, so a bug never looks like bad input --
and 3 an undecided verdict (:class:`VerdictInconclusive`: INCONCLUSIVE, a person decides).
Every domain exception memwork raises on purpose is defined here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol


class _Run(Protocol):
    """What an error needs of the run it carries (a report run): its JSON form."""

    def to_dict(self) -> dict[str, Any]: ...


class MemworkError(Exception):
    """Base of every error memwork raises on purpose."""

    exit_code = 1


class UsageError(MemworkError):
    """Bad input: names the field and the value. Exit code 2, nothing written."""

    exit_code = 2

    def __init__(self, field: str, value: object, problem: str) -> None:
        self.field = field
        self.value = value
        self.problem = problem
        super().__init__(f"{field}={value!r}: {problem}")


class PairBudgetExceeded(UsageError):
    """A pair search past its budget (``MEMWORK_MAX_PAIRS``): callers that can fall back to a stated
    sample, or to a narrower search, catch this and nothing else."""


class InvalidPath(UsageError):
    """An entry path that is absolute, empty, escapes with ``..`` or holds a forbidden character."""

    def __init__(self, value: object, problem: str) -> None:
        super().__init__("path", value, problem)


class ContentTooLarge(UsageError):
    """Entry content over the store's size limit."""


class InvalidIdentifier(UsageError):
    """A SQL identifier (table, index, column) that is not a plain name."""


class ConfigError(UsageError):
    """A configuration value (usually an environment variable) that cannot be understood."""


class UnknownBackend(UsageError):
    """A backend name the registry does not know."""


class EntryNotFound(UsageError):
    """No entry at this path in this scope (the path the caller named does not exist)."""

    def __init__(self, path: str, scope: str = "default") -> None:
        self.path = path
        self.scope = scope
        super().__init__("path", path, f"no entry in scope {scope!r}")


class StubChainError(UsageError):
    """Following stub redirects from the path the caller named hit a cycle or went deeper than the
    hop limit."""

    def __init__(self, chain: list[str], problem: str) -> None:
        self.chain = chain
        super().__init__("path", chain[0], f"{problem}: {' -> '.join(chain)}")


class ServiceUnavailable(MemworkError):
    """A server memwork needs (PostgreSQL, MySQL, Redis, ...) cannot be reached."""

    exit_code = 1


class CheckFailed(MemworkError):
    """A check, gate or verdict failed. Exit code 1."""

    exit_code = 1


class VerdictError(CheckFailed):
    """A report's verdict failed (FAIL / NO-GO): raised by the last cell so papermill exits non-zero."""

    def __init__(self, verdict: str, reasons: list[str]) -> None:
        self.verdict = verdict
        self.reasons = reasons
        super().__init__(f"verdict {verdict}: {'; '.join(reasons) or 'no reason recorded'}")


class VerdictInconclusive(VerdictError):
    """A report could not decide (INCONCLUSIVE: too little data, a marginal result): a person decides.

    Raised by the last cell instead of :class:`VerdictError`, so a scheduler running papermill can tell
    it from a NO-GO by the exception name (``PapermillExecutionError.ename``, the last line papermill
    prints) and map it to :data:`exit_code` 3, the code ``memwork report`` exits with.
    """

    exit_code = 3


class BackendError(MemworkError):
    """A memory backend failed (raised only when fail-open is off)."""

    exit_code = 1


class BackendTimeout(BackendError):
    """A memory backend did not answer within its per-call timeout (a write's outcome is unknown)."""


class NotStored(BackendError):
    """A write known not to have been applied: rolled back, refused before its commit, or never run."""


class CutOff(BackendTimeout, NotStored):
    """The call ran into its deadline and its write path was refused the commit: nothing stored."""


class Shed(BackendTimeout, NotStored):
    """No worker could start the call before its deadline (overload): it never ran."""


class MissingStore(UsageError):
    """The store a reading command names does not exist (nothing was created)."""


class ImportLineError(UsageError):
    """A line of an import file that cannot be loaded; nothing was written."""

    def __init__(self, line: int, error: UsageError) -> None:
        super().__init__(error.field, error.value, error.problem)
        self.line = line
        self.args = (f"line {line}: {error}",)


class ImportWriteError(UsageError):
    """The store refused an entry the line check could not know about (a constraint, a trigger)."""


class DuplicateBackend(UsageError):
    """A second backend under a name (or alias) that is already registered."""


class DamagedJournal(UsageError):
    """A journal file that cannot be read as a run (names the file and what is wrong)."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__("journal", path.name, problem)
        self.path = path


class DamagedRun(MemworkError):
    """A report run folder whose summary.json or manifest.json cannot be listed (the message says
    what is wrong; the index skips the folder and names it)."""


class StoreLocked(MemworkError):
    """Another modifying run holds the store's (or scope's) run lock for longer than we may wait."""

    exit_code = 1

    def __init__(self, store: str, scope: str | None, timeout: float) -> None:
        self.store, self.scope, self.timeout = store, scope, timeout
        what = "every scope" if scope is None else f"scope={scope!r}"
        super().__init__(
            f"store={store!r} {what}: another defrag run or undo holds its lock; gave up after "
            f"{timeout:g} s (try again when it has finished, or raise --lock-timeout)"
        )


class WriteConflict(MemworkError):
    """A compare-and-set write found the entry changed since the caller read it; nothing written."""

    exit_code = 1

    def __init__(
        self, path: str, scope: str, problem: str = "changed by another writer since it was read"
    ) -> None:
        self.path, self.scope, self.problem = path, scope, problem
        super().__init__(f"path={path!r}: {problem} (scope {scope!r})")


class PlanConflict(MemworkError):
    """The store no longer matches the snapshot a plan was computed from.

    ``applied`` holds the changes (:class:`memwork.defrag.apply.Change`) this ``execute`` call had
    already written (and journaled) when the conflict was found (empty when it was found before the
    first write), ``planned`` how many it meant to write; ``detail`` is appended to the message."""

    exit_code = 1

    def __init__(
        self,
        path: str,
        scope: str,
        problem: str,
        *,
        applied: Sequence[Any] = (),
        planned: int | None = None,
        detail: str = "",
    ) -> None:
        self.path, self.scope, self.problem = path, scope, problem
        self.applied: list[Any] = list(applied)
        self.planned = planned
        super().__init__(f"path={path!r}: {problem} (scope {scope!r})" + (f"; {detail}" if detail else ""))


class ApplyConflict(PlanConflict):
    """A write found its entry changed by another writer during the run (compare-and-set failed)."""


class RunStopped(PlanConflict):
    """An applied run stopped on a conflict after writing ``steps``; ``detail`` says what was already
    written and how to undo it, in the words of the feature that raised it
    (:func:`memwork.defrag.actions.stopped_run`)."""

    def __init__(
        self,
        conflict: PlanConflict,
        *,
        action: str,
        run_id: str,
        steps: list[dict[str, Any]],
        detail: str,
    ) -> None:
        self.action, self.run_id, self.steps = action, run_id, steps
        self.changes_applied = sum(step["changes"] for step in steps)
        super().__init__(
            conflict.path,
            conflict.scope,
            conflict.problem,
            applied=conflict.applied,
            planned=conflict.planned,
            detail=detail,
        )


#: the ``cell_index`` of a run whose kernel died: no cell failed, the process running them did
KERNEL_DIED = -1


def cell_name(cell_index: int, exec_count: int | None) -> str:
    """A failing cell as a reader finds it: ``cell 3`` (its execution count), ``cell #2`` (its
    position, when it never ran) or ``the kernel`` (:data:`KERNEL_DIED`)."""
    if cell_index == KERNEL_DIED:
        return "the kernel"
    return f"cell {exec_count}" if exec_count else f"cell #{cell_index}"


class ReportExecutionError(MemworkError):
    """A report notebook failed in a cell, after every artifact of the run was written.

    Modelled on papermill's ``PapermillExecutionError``: ``cell_index`` (0-based position in the
    notebook), ``exec_count`` (the ``[n]`` shown beside the cell, None if it never ran), ``ename`` and
    ``evalue`` (the exception's type name and message, passwords already hidden), ``run_dir`` (the
    run folder holding notebook, HTML, summary.json and manifest) and ``run`` (the
    :class:`~memwork.reports.runner.ReportRun`). Exit code 1 for a failed ``assert`` check (the
    report's invariants do not hold) or a broken cell, 2 when the cell raised a
    :class:`UsageError` (a parameter the library's checks refuse).
    """

    def __init__(
        self,
        report: str,
        cell_index: int,
        ename: str,
        evalue: str,
        run_dir: Path,
        *,
        exec_count: int | None = None,
        run: _Run | None = None,
    ) -> None:
        self.report = report
        self.cell_index = cell_index
        self.exec_count = exec_count
        self.ename = ename
        self.evalue = evalue
        self.run_dir = Path(run_dir)
        self.run = run
        self.exit_code = 2 if is_usage_error_name(ename) else 1
        super().__init__(f"report {report} failed at {self.cell}: {ename}: {evalue} (artifacts: {run_dir})")

    @property
    def cell(self) -> str:
        """The failing cell as a reader finds it (:func:`cell_name`)."""
        return cell_name(self.cell_index, self.exec_count)


class ReportInputRefused(UsageError):
    """A report's own checks refused its input (a cell raised a :class:`UsageError` subclass named
    ``ename``): bad input, exit 2, and the run folder was removed -- a refused run writes nothing.
    Artifacts are for a run that started, whose input was accepted (:class:`ReportExecutionError`)."""

    def __init__(self, report: str, ename: str, evalue: str) -> None:
        self.report = report
        self.ename = ename
        self.evalue = evalue
        self.field, self.value, self.problem = "report", report, evalue
        MemworkError.__init__(self, f"report {report}: {ename}: {evalue} (nothing written)")


def is_usage_error_name(ename: str) -> bool:
    """Whether ``ename`` (an exception's class name, as a notebook kernel reports it) is
    :class:`UsageError` or one of its subclasses -- bad input, exit 2. Every such class is defined
    in this module, so the name is enough."""
    pending: list[type[BaseException]] = [UsageError]
    while pending:
        cls = pending.pop()
        if cls.__name__ == ename:
            return True
        pending.extend(cls.__subclasses__())
    return False


class ImportRunning(MemworkError):
    """Another ``memwork import`` of the same source into the same table holds its lock (exit 1):
    two runs at once would race on one checkpoint."""

    exit_code = 1

    def __init__(self, table: str, source_key: str) -> None:
        self.table, self.source_key = table, source_key
        super().__init__(
            f"table={table!r} source={source_key!r}: another import of this source into this table is "
            "running; try again when it has finished"
        )


class RangesLost(MemworkError):
    """A worker died before every key range of a verification finished (exit 1); a verification
    writes nothing before its end, so it keeps no partial result: it is run again."""

    exit_code = 1

    def __init__(self, done: int, total: int, cause: BaseException) -> None:
        self.done, self.total = done, total
        super().__init__(
            f"verify key ranges: {done} of {total} finished before a worker died "
            f"({type(cause).__name__}); a verification keeps no partial result: run it again"
        )
