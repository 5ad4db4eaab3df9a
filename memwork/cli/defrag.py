"""``memwork defrag``: the ten defrag actions, ``undo`` and ``journal`` (thin: parse, call, print).

One command per action in :data:`memwork.defrag.table.ACTIONS`, each with only its own options: its
parameters, plus ``--apply``/``--lock-timeout`` for a modifying action and ``--embedder`` for one
that rewrites content. Any other action's option is a click usage error (exit 2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from memwork.cli.defrag_calibrate import calibrate_command, review_command
from memwork.cli.options import (
    apply_option,
    emit_json,
    json_option,
    scope_option,
    stage_progress,
    store_option,
)
from memwork.defrag.params import Param
from memwork.defrag.table import ACTIONS, Action
from memwork.errors import UsageError

if TYPE_CHECKING:
    from memwork.stores.base import Store


class ActionGroup(click.Group):
    """Accepts ``find_duplicates`` as well as ``find-duplicates``; unknown actions name themselves."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, cmd_name.replace("_", "-"))

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if self.get_command(ctx, name) is None and not name.startswith("-"):
            known = ", ".join(self.list_commands(ctx))
            raise UsageError("action", name, f"unknown action; known: {known}")
        return super().resolve_command(ctx, args)


@click.group("defrag", cls=ActionGroup)
def defrag() -> None:
    """Analyse and optimise a memory store (duplicates, links, stubs, stale entries).

    Modifying actions are a dry run that prints the plan unless --apply; an applied run is journaled
    and can be undone.

    \b
    Example:
        memwork defrag full --store ./memory
        memwork defrag merge-duplicates --store ./memory --strategy combine --apply
        memwork defrag undo RUN_ID --store ./memory
    """


#: help examples of the actions that need more than ``--store``
EXAMPLES: dict[str, tuple[str, ...]] = {
    "find_duplicates": (
        "memwork defrag find-duplicates --store ./memory --json",
        "memwork defrag find-duplicates --store pg://embedded --executor local:4",
        "memwork defrag find-duplicates --store postgresql://db/mem --executor dask://sched:8786",
    ),
    "supersede": (
        "memwork defrag supersede --store ./memory",
        "memwork defrag supersede --store ./memory --apply",
        "memwork defrag supersede --store ./memory --scope alice --pair fact/a.md fact/b.md --apply",
        "memwork defrag undo RUN_ID --store ./memory",
    ),
}


def _open(store_spec: str) -> Store:
    from memwork.stores import open_store

    return open_store(store_spec)


#: the actions that run as scope partitions on ``--executor`` (:mod:`memwork.defrag.partitioned`)
PARTITIONED = ("find_duplicates", "find_related")


def _partition_options(command: Any) -> Any:
    """``--executor`` and ``--checkpoint`` of the actions that split by scope."""
    command = click.option(
        "--checkpoint",
        "checkpoint",
        default=None,
        help="Folder of the per-partition checkpoints a re-run resumes from (default: the workspace's "
        "defrag-partitions); without --executor, partitions run in this process.",
    )(command)
    return click.option(
        "--executor",
        "executor_spec",
        default=None,
        help="Run scope partitions on serial, local, local:N or dask://HOST:PORT; resumable. "
        "Default: one process, no partitions.",
    )(command)


def _run_partitioned(
    action: Action,
    store_spec: str,
    scope: str | None,
    executor_spec: str | None,
    checkpoint: str | None,
    as_json: bool,
    params: dict[str, Any],
) -> Any:
    """The action as checkpointed scope partitions; how many were resumed goes to stderr."""
    from memwork.defrag.partitioned import run_partitioned
    from memwork.executor import parse_executor

    executor = parse_executor(executor_spec)  # a bad value is one line, exit 2, before anything runs
    with stage_progress(quiet=as_json) as bar:
        run = run_partitioned(
            store_spec, action.name, scope=scope, executor=str(executor), checkpoint=checkpoint,
            progress=bar, **params,
        )  # fmt: skip
    click.echo(f"defrag {action.cli_name}: {run.describe()}", err=True)
    return run.result


def _make_action(action: Action) -> click.Command:
    """The click command of ``action``: its own options only, generated from its parameters."""
    name = action.cli_name

    def command(
        store_spec: str,
        scope: str | None,
        as_json: bool,
        apply: bool = False,
        embedder: str | None = None,
        lock_timeout: float | None = None,
        executor_spec: str | None = None,
        checkpoint: str | None = None,
        **opts: Any,
    ) -> None:
        from memwork.defrag import run_action
        from memwork.defrag.actions import stopped_run_dict
        from memwork.errors import RunStopped

        params = {k: v for k, v in opts.items() if v is not None}
        try:
            if executor_spec is not None or checkpoint is not None:
                result = _run_partitioned(
                    action, store_spec, scope, executor_spec, checkpoint, as_json, params
                )
            else:
                with _open(store_spec) as store, stage_progress(quiet=as_json) as bar:
                    result = run_action(
                        store,
                        action.name,
                        scope=scope,
                        apply=apply,
                        embedder=embedder,
                        progress=bar,
                        lock_timeout=lock_timeout,
                        **params,
                    )
        except RunStopped as stopped:
            if as_json:  # what was applied and how to undo it, on stdout too; the error line on stderr
                emit_json(stopped_run_dict(stopped))
            raise
        if as_json:
            emit_json(result.to_dict())
        else:
            from memwork.cli.defrag_view import show_result

            show_result(result)

    examples = EXAMPLES.get(action.name, (f"memwork defrag {name} --store ./memory",))
    command.__doc__ = f"{action.help}\n\n\b\nExample:\n" + "\n".join(f"    {e}" for e in examples)
    for param_name, param in reversed(list(action.params.items())):
        command = click.option(
            Param.option(param_name), param_name, type=param.cli_type, nargs=param.nargs, help=param.help
        )(command)
    if action.reembeds:
        command = click.option("--embedder", help="Re-embed merged entries: hash[:DIM] or a model spec.")(
            command
        )
    if not action.read_only:
        command = click.option(
            "--lock-timeout",
            type=float,
            help="With --apply: seconds to wait for another run on this store/scope (default 60), then fail.",
        )(command)
    if action.name in PARTITIONED:
        command = _partition_options(command)
    command = scope_option(store_option()(command))
    if not action.read_only:
        command = apply_option(command)
    return click.command(name)(json_option(command))


for _action in ACTIONS.values():
    defrag.add_command(_make_action(_action))


@defrag.command("undo")
@click.argument("run_id")
@store_option()
@click.option(
    "--force", is_flag=True, help="Undo even if entries changed after the run (never into another store)."
)
@click.option(
    "--lock-timeout", type=float, help="Seconds to wait for another run on this store/scope (default 60)."
)
@json_option
def undo_command(
    run_id: str, store_spec: str, force: bool, lock_timeout: float | None, as_json: bool
) -> None:
    """Restore every entry an applied run touched, exactly as it was (itself journaled).

    \b
    Example:
        memwork defrag undo 20250101T120000Z-1a2b3c --store ./memory
    """
    from memwork.defrag import undo

    with _open(store_spec) as store, stage_progress(quiet=as_json) as bar:
        new_run, changes = undo(run_id, store, force=force, progress=bar, lock_timeout=lock_timeout)
    data = {"undone": run_id, "run_id": new_run, "changes": [c.to_dict() for c in changes]}
    if as_json:
        emit_json(data)
    else:
        click.echo(f"Undid {run_id}: {len(changes)} entries restored (journaled as {new_run}).")


@defrag.command("journal")
@json_option
def journal_command(as_json: bool) -> None:
    """List journaled runs (applied actions and undos), oldest first.

    \b
    Example:
        memwork defrag journal --json
    """
    from memwork.defrag.journal import scan_journal

    scan = scan_journal()
    for bad in scan.damaged:  # skipped, never fatal: one bad file must not hide every other run
        click.echo(f"Warning: skipped damaged journal file {bad['file']}: {bad['problem']}", err=True)
    if as_json:
        emit_json({"runs": scan.runs, "damaged": scan.damaged})
        return
    from memwork.cli.defrag_view import show_runs

    show_runs(scan.runs)


defrag.add_command(review_command)
defrag.add_command(calibrate_command)

commands = [defrag]
