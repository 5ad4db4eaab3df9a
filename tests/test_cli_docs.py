"""The CLI reference cannot drift: every command's help has an example, every command that reports
something has ``--json``, docs/cli.md is the generated ``--help``, and README and the reference pages split
out of it name only real commands and options (docs/usage.md lists every command, generated the same way)."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from memwork.cli import main
from memwork.cli.docs import (
    DEFAULT_BACKENDS,
    DEFAULT_USAGE,
    backend_reference,
    command_list,
    iter_commands,
    render,
    with_backend_reference,
    with_command_list,
)
from memwork.errors import UsageError as MemworkUsageError

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {doc.name: doc for doc in iter_commands()}
LEAVES = [name for name, doc in COMMANDS.items() if not doc.is_group]

#: the only commands without ``--json``, and why: they report nothing (a file's content, a running server)
NO_JSON = {
    "memwork scaffold backend": "prints (or writes) the generated Python source of an adapter and its test",
    "memwork scaffold source": "prints (or writes) the generated Python source of a source and its test",
    "memwork serve": "runs the HTTP service until stopped; its answers are the JSON API itself",
}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_and_group_shows_an_example(name):
    assert re.search(r"^\s*Examples?:\s*$", COMMANDS[name].help, re.MULTILINE), COMMANDS[name].help


@pytest.mark.parametrize("name", LEAVES)
def test_every_reporting_command_has_json(name):
    options = {opt for param in COMMANDS[name].command.params for opt in getattr(param, "opts", [])}
    if name in NO_JSON:
        assert "--json" not in options, f"{name} has --json now: remove it from NO_JSON"
    else:
        assert "--json" in options, f"{name} reports something but has no --json"


def test_no_json_names_real_commands():
    assert set(NO_JSON) <= set(LEAVES)


def test_the_tree_has_every_group():
    groups = {name.split()[1] for name in COMMANDS if len(name.split()) > 1}
    assert {"store", "defrag", "status", "check", "scaffold", "legacy", "pgvector", "backfill"} <= groups
    assert {"smoke", "report", "demo"} <= groups


def test_docs_cli_md_is_the_generated_help():
    path = ROOT / "docs" / "cli.md"
    assert path.read_text(encoding="utf-8") == render(), "docs/cli.md is stale: run `make docs`"


def test_usage_command_list_is_generated():
    usage = (ROOT / DEFAULT_USAGE).read_text(encoding="utf-8")
    assert usage == with_command_list(usage), "docs/usage.md's command list is stale: run `make docs`"
    for name in LEAVES:
        assert f"[`{name}`]" in command_list()
    # its links point at docs/cli.md's sections from docs/usage.md, its neighbour
    anchors = {f"{doc.anchor}" for doc in COMMANDS.values()}
    for target in re.findall(r"\]\(([^)]+)\)", command_list()):
        page, _, anchor = target.partition("#")
        assert (ROOT / DEFAULT_USAGE).parent.joinpath(page).is_file() and anchor in anchors, target


def test_backend_tables_are_generated():
    backends = (ROOT / DEFAULT_BACKENDS).read_text(encoding="utf-8")
    assert backends == with_backend_reference(backends), "docs/backends.md is stale: run `make docs`"
    assert "`MEMORY_QDRANT_URL`" in backend_reference()


def test_the_generated_help_is_what_the_command_prints():
    from click.testing import CliRunner

    result = CliRunner().invoke(main, ["store", "info", "--help"], prog_name="memwork", terminal_width=100)
    assert result.exit_code == 0
    assert result.output.strip() == COMMANDS["memwork store info"].help.strip()


def _readme_mentions() -> list[str]:
    """Every ``memwork ...`` command line in the shell blocks and inline code spans of README and the
    reference pages split out of it (tests/readme_examples.py's PAGES)."""
    from readme_examples import PAGES

    mentions, prose, fence = [], [], None
    text = "\n".join(page.read_text(encoding="utf-8") for page in PAGES)
    lines = text.replace("\\\n", " ").splitlines()
    for line in lines:
        if line.startswith("```"):
            fence = None if fence is not None else (line[3:].strip() or "text")
        elif fence in ("bash", "sh", "shell", "console"):
            code = "" if line.lstrip().startswith("#") else line.split(" #", 1)[0]
            mentions += re.findall(r"(?:^|[\s;|&(])(memwork\s[^;|&)`]*)", code)
        elif fence is None:
            prose.append(line)
    spans = re.findall(r"`([^`\n]+)`", "\n".join(prose))
    mentions += [span for span in spans if span.startswith("memwork ")]
    return [m.strip().replace("\\|", "|") for m in mentions]


def _resolve(words: list[str]) -> tuple[click.Command, list[str]]:
    """The command ``memwork WORDS...`` runs and the words left for it, as click resolves them."""
    command: click.Command = main
    ctx = click.Context(main, info_name="memwork")
    # an upper-case word is a placeholder (``memwork defrag ACTION``): the group is what is named
    while (
        isinstance(command, click.Group) and words and not words[0].startswith("-") and not words[0].isupper()
    ):
        _, sub, words = command.resolve_command(ctx, words)
        assert sub is not None
        command, ctx = sub, click.Context(sub, info_name=sub.name, parent=ctx)
    return command, words


def test_readme_names_only_real_commands_and_options():
    mentions = _readme_mentions()
    assert len(mentions) > 20
    wrong = []
    for mention in mentions:
        words = mention.split()[1:]
        if not words or not re.fullmatch(r"[a-z][a-z0-9_-]*", words[0]):
            continue  # prose such as "memwork moves", not a command line
        try:
            command, rest = _resolve(words)
        except (click.UsageError, MemworkUsageError, AssertionError):
            wrong.append(f"{mention}: no such command")
            continue
        if isinstance(command, click.Group):
            continue  # a group named on its own ("the `memwork defrag` group")
        known = {opt for param in command.params for opt in getattr(param, "opts", [])} | {"-h", "--help"}
        for option in re.findall(r"(?<![\w-])(--?[a-z][a-z0-9-]*)", " ".join(rest)):
            if option not in known:
                wrong.append(f"{mention}: {command.name} has no {option}")
    assert not wrong, "\n".join(wrong)


def test_check_config_json_is_the_documented_spelling_of_format_json():
    from click.testing import CliRunner

    runner = CliRunner()
    as_json = runner.invoke(main, ["check", "config", "--backend", "legacy", "--json"])
    as_format = runner.invoke(main, ["check", "config", "--backend", "legacy", "--format", "json"])
    assert as_json.exit_code == as_format.exit_code and as_json.stdout == as_format.stdout
    both = runner.invoke(main, ["check", "config", "--backend", "legacy", "--json", "--format", "shell"])
    assert both.exit_code == 2 and "exclude each other" in both.output


def test_legacy_init_json(tmp_path):
    import json

    from click.testing import CliRunner

    url = f"sqlite:///{tmp_path / 'legacy.db'}"
    dry = json.loads(CliRunner().invoke(main, ["legacy", "init", "--database-url", url, "--json"]).stdout)
    assert dry["applied"] is False and dry["created"] == [] and dry["statements"]
    result = CliRunner().invoke(main, ["legacy", "init", "--database-url", url, "--apply", "--json"])
    applied = json.loads(result.stdout)
    assert applied["applied"] is True
    assert sorted(applied["created"]) == ["h5_conversation_messages", "h5_user_memory_items"]


@pytest.mark.services
def test_pgvector_url_json(pg_server):
    import json
    import os
    import shutil
    import subprocess
    import sys
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="mwjs-", dir="/tmp"))  # short: Unix socket path limit
    env = {**os.environ, "MEMWORK_PGDATA": str(root / "pgdata"), "MEMWORK_HOME": str(root / "home")}

    def memwork(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "memwork", "pgvector", "url", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)

    try:
        started = memwork("--name", "jsoncheck", "--json")
        assert started.returncode == 0, started.stderr
        data = json.loads(started.stdout)
        assert data["url"].startswith("postgresql://") and data["database"] == "jsoncheck"
        assert data["embedded"] == "pg://embedded/jsoncheck"
        stopped = memwork("--stop", "--json")
        assert stopped.returncode == 0 and json.loads(stopped.stdout) == {"stopped": True, "wasRunning": True}
    finally:
        memwork("--stop")
        shutil.rmtree(root, ignore_errors=True)
