"""README's examples, and those of the reference pages split out of it into docs/, are commands memwork
accepts as written: every subcommand, option and value type, and every ``-p`` a report declares. (That
the examples reading demo output find it after ``make demo`` is checked in tests/test_demo.py, which runs
the demo.)"""

from __future__ import annotations

import click
import pytest
from readme_examples import demo_paths, readme_commands

from memwork.cli import main
from memwork.reports import find_notebook, read_parameters

EXAMPLES = [e for e in readme_commands() if e.is_memwork]


def _parse(argv: list[str]) -> tuple[click.Command, click.Context]:
    """Parse ``memwork ARGV`` as click would, down to the leaf command, without running anything."""
    command: click.Command = main
    ctx = command.make_context("memwork", list(argv))
    while isinstance(command, click.Group):
        rest = [*ctx._protected_args, *ctx.args]
        name, sub, rest = command.resolve_command(ctx, rest)
        assert sub is not None and name is not None
        ctx = sub.make_context(name, rest, parent=ctx)
        command = sub
    return command, ctx


def test_readme_has_examples_to_check():
    assert len(EXAMPLES) >= 20
    assert any(demo_paths(e) for e in EXAMPLES)  # at least one reads what `make demo` wrote


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.where)
def test_readme_example_is_accepted_by_the_cli(example):
    try:
        command, ctx = _parse(example.argv[1:])
    except click.UsageError as exc:
        pytest.fail(f"{example.where}: {example.text}\n  {exc.format_message()}")
    if command.name == "run" and ctx.parent is not None and ctx.parent.info_name == "report":
        declared = read_parameters(find_notebook(ctx.params["name"]))
        unknown = sorted({key for key, _ in ctx.params["params"]} - set(declared))
        assert not unknown, f"{example.where}: not parameters of {ctx.params['name']}: {unknown}"
