"""The ``memwork`` command line: a thin shell over the library.

Each command group lives in its own module and only parses options, calls one memwork function and
prints its result. Domain errors are turned into one-line messages and exit codes here, once:
0 ok, 1 a check or verdict failed, 2 usage or input error. ``--debug`` shows tracebacks.
"""

from __future__ import annotations

import importlib
import sys

import click

from memwork.errors import MemworkError

#: command modules, each exporting ``commands`` (a list of click commands or groups)
COMMAND_MODULES = [
    "store",
    "defrag",
    "status",
    "check",
    "scaffold",
    "legacy",
    "pgvector",
    "backfill",
    "smoke",
    "report",
    "demo",
]


class MemworkGroup(click.Group):
    """Root group that converts memwork errors into one clear line and an exit code."""

    def invoke(self, ctx: click.Context):  # type: ignore[no-untyped-def]
        try:
            return super().invoke(ctx)
        except MemworkError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"Error: {_redacted(exc)}", err=True)
            ctx.exit(exc.exit_code)
        except BrokenPipeError:
            # `memwork ... | head`: the reader left; stop quietly like other Unix tools
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            ctx.exit(0)
        except (OSError, ValueError) as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"Error: {type(exc).__name__}: {_one_line(exc)}", err=True)
            ctx.exit(2)
        except Exception as exc:
            # a database or server failing mid-run: one line (passwords hidden), exit 1, no traceback
            if not _is_service_error(exc) or (ctx.obj and ctx.obj.get("debug")):
                raise
            click.echo(f"Error: {type(exc).__name__}: {_one_line(exc)}", err=True)
            ctx.exit(1)


def _is_service_error(exc: BaseException) -> bool:
    """Errors raised by database drivers and clients (SQLAlchemy, psycopg, PyMySQL, redis, httpx)."""
    module = type(exc).__module__.split(".", 1)[0]
    return module in {"sqlalchemy", "psycopg", "psycopg_pool", "pymysql", "sqlite3", "redis", "httpx"}


def _redacted(exc: BaseException) -> str:
    """The error's message with every URL password hidden (values in messages are quoted URLs too)."""
    from memwork.redaction import redact_text

    return redact_text(str(exc))


def _one_line(exc: BaseException) -> str:
    """The first line of an error message, with any URL password hidden."""
    from memwork.redaction import redact_text

    return redact_text((str(exc).strip().splitlines() or [""])[0])


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


def _load_commands() -> None:
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"memwork.cli.{name}")
        for command in getattr(module, "commands", []):
            main.add_command(command)


_load_commands()


def run() -> None:  # pragma: no cover - console entry convenience
    sys.exit(main())
