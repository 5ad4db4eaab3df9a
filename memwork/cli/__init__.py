"""The ``memwork`` command line: a thin shell over the library.

Each command group lives in its own module and only parses options, calls one memwork function and
prints its result. Errors are turned into one-line messages and exit codes here, once: 0 ok, 1 a
check or verdict failed (or anything unexpected: a bug is never reported as bad input), 2 usage or
input error (:class:`~memwork.errors.UsageError`). ``--debug`` shows tracebacks.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from memwork.errors import MemworkError
from memwork.redaction import first_line, redact_text

#: every top-level command and the module that defines it (each module exports ``commands``). A command's
#: module is imported only when that command runs, so ``memwork status`` does not pay for FastAPI,
#: papermill or the migration; ``tests/test_cli_lazy.py`` keeps this table equal to what the modules export.
COMMANDS = {
    "store": "store",
    "defrag": "defrag",
    "status": "status",
    "check": "check",
    "scaffold": "scaffold",
    "legacy": "legacy",
    "pgvector": "pgvector",
    "backfill": "backfill",
    "import": "migrate",
    "verify": "certify",
    "certify": "certify",
    "import-verify": "certify",
    "smoke": "smoke",
    "canary": "canary",
    "report": "report",
    "demo": "demo",
    "serve": "serve",
}
COMMAND_MODULES = sorted(set(COMMANDS.values()))


class MemworkGroup(click.Group):
    """Root group that converts errors into one clear line and an exit code.

    2 only for bad input (:class:`~memwork.errors.UsageError`, click's own usage errors); a memwork
    error otherwise carries its code (1 for a failed check, an unreachable service, a conflict); a
    database driver failing mid-run is one line and 1; anything else is a bug, and a bug must not
    look like bad input: one line naming its type, a hint to rerun with ``--debug``, exit 1.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMANDS) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command, its module imported on first use (and the command kept, as click keeps
        commands added with ``add_command``)."""
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            module = importlib.import_module(f"memwork.cli.{COMMANDS[cmd_name]}")
            for command in getattr(module, "commands", []):
                self.commands.setdefault(command.name or "", command)
        return self.commands.get(cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        from memwork.cli.options import tolerant_stdout

        tolerant_stdout()
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise  # click's usage errors (exit 2), ctx.exit() and Ctrl-C keep click's handling
        except MemworkError as exc:
            if _debug(ctx):
                raise
            click.echo(f"Error: {_redacted(exc)}", err=True)
            ctx.exit(exc.exit_code)
        except BrokenPipeError:
            # `memwork ... | head`: the reader left; stop quietly like other Unix tools
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            ctx.exit(0)
        except Exception as exc:
            if _debug(ctx):
                raise
            message = f"Error: {type(exc).__name__}: {first_line(exc)}"
            if not _is_service_error(exc):
                message += " (run with --debug for the traceback)"
            click.echo(message, err=True)
            ctx.exit(1)


def _debug(ctx: click.Context) -> bool:
    """``--debug`` was given (read after the root callback ran, which stores it)."""
    return bool(ctx.obj and ctx.obj.get("debug"))


def _is_service_error(exc: BaseException) -> bool:
    """Errors raised by database drivers and clients (SQLAlchemy, psycopg, PyMySQL, redis, httpx)."""
    module = type(exc).__module__.split(".", 1)[0]
    return module in {"sqlalchemy", "psycopg", "psycopg_pool", "pymysql", "sqlite3", "redis", "httpx"}


def _redacted(exc: BaseException) -> str:
    """The error's message with every URL password hidden (values in messages are quoted URLs too)."""
    return redact_text(str(exc))


@click.group(cls=MemworkGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="memwork")
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """memwork: analysis and migration workbench for AI-agent long-term memory.

    \b
    Example:
        memwork defrag analyze --store ./memory
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


def load_all_commands() -> dict[str, click.Command]:
    """Every command, each module imported (what the generated reference and the tests walk)."""
    ctx = click.Context(main)
    for name in main.list_commands(ctx):
        main.get_command(ctx, name)
    return dict(main.commands)


def run() -> None:  # pragma: no cover - console entry convenience
    sys.exit(main())
