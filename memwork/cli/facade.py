"""CLI of the Memory V2 facade: ``status``, ``check``, ``scaffold``, ``legacy`` -- parse, call, print."""

from __future__ import annotations

import os

import click

from memwork.cli.options import apply_option, database_url_option, emit_json, json_option
from memwork.errors import CheckFailed


def _facade():  # type: ignore[no-untyped-def]
    from memwork.facade.facade import facade_from_env

    return facade_from_env()


@click.command("status")
@json_option
def status(as_json: bool) -> None:
    """Show the Memory V2 policy, backend selections and every backend's availability.

    \b
    Example:
        MEMORY_BACKEND=pgvector memwork status --json
    """
    payload = _facade().status()
    if as_json:
        emit_json(payload)
        return
    for key in (
        "enabled",
        "backend",
        "selectedBackend",
        "profileEnabled",
        "eventLogEnabled",
        "vectorEnabled",
        "failOpen",
        "timeoutMs",
    ):
        click.echo(f"{key}: {payload[key]}")
    for op, name in payload["selectedBackends"].items():
        click.echo(
            f"{op}: {name}" + (f"  ({payload['fallbacks'][op]})" if op in payload["fallbacks"] else "")
        )
    for b in payload["backends"]:
        ops = ",".join(op for op, yes in b["supports"].items() if yes)
        state = "available" if b["available"] else f"unavailable: {b['reason']}"
        click.echo(f"  {b['name']:<28} {b['category'] or '-':<11} {ops:<22} {state}")
    for issue in payload["configErrors"]:
        click.echo(f"config error: {issue['field']}={issue['value']!r}: {issue['problem']}", err=True)
    for problem in payload["pluginErrors"]:
        click.echo(f"plugin error: {problem['name']} ({problem['origin']}): {problem['problem']}", err=True)


@click.group("check")
def check() -> None:
    """Gates for the Memory V2 facade: backend contracts, per-backend config, synthetic health."""


@check.command("contracts")
@click.option("--include-pgvector-adapter", is_flag=True, help="Also validate memwork.backends.pgvector.")
@click.option(
    "--adapter",
    "adapters",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="Also validate an adapter module file (e.g. one written by scaffold). Repeatable.",
)
@json_option
def contracts(include_pgvector_adapter: bool, adapters: tuple[str, ...], as_json: bool) -> None:
    """Validate every registered backend against the contract; exit 1 listing each violation.

    \b
    Example:
        memwork check contracts --include-pgvector-adapter
    """
    from memwork.facade.contract import check_pgvector_adapter, check_registry, validate_backend
    from memwork.facade.registry import Registry
    from memwork.facade.scaffold import load_adapter_file

    registry = Registry()
    violations = check_registry(registry)
    if include_pgvector_adapter:
        violations += check_pgvector_adapter()
    for path in adapters:
        violations += validate_backend(load_adapter_file(path))
    checked = registry.names() + (["pgvector adapter"] if include_pgvector_adapter else []) + list(adapters)
    if as_json:
        emit_json({"ok": not violations, "checked": checked, "violations": [str(v) for v in violations]})
    else:
        for v in violations:
            click.echo(f"FAIL {v}")
        click.echo(f"{len(checked)} backends checked, {len(violations)} violations")
    if violations:
        raise CheckFailed(f"{len(violations)} contract violation(s)")


@check.command("config")
@click.option("--backend", "backend", required=True, help="Backend name, e.g. qdrant, letta, legacy.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "shell"]),
    default="json",
    show_default=True,
    help="json: missing keys and readiness; shell: a copy-paste export template.",
)
def config(backend: str, fmt: str) -> None:
    """Which variables BACKEND still needs and whether it is ready (exit 1 when not). Secrets never shown.

    \b
    Example:
        memwork check config --backend letta --format shell
    """
    from memwork.facade.configcheck import check_config, shell_template
    from memwork.facade.registry import Registry

    result = check_config(Registry(), backend, os.environ)
    if fmt == "shell":
        click.echo(shell_template(result))
    else:
        emit_json(result)
    if not result["ready"]:
        problems = result["missing"] + result["invalid"]
        if not result["available"]:
            problems.append(f"unavailable ({result['reason']})")
        raise CheckFailed(f"backend {result['backend']} is not ready: {', '.join(problems)}")


@check.command("health")
@click.option("--require-enabled", is_flag=True, help="Fail unless Memory V2 is enabled.")
@click.option("--expect-backend", default=None, help="Fail unless MEMORY_BACKEND is this backend.")
@click.option("--expect-selected-backend", default=None, help="Fail unless resolve selects this backend.")
@json_option
def health(
    require_enabled: bool, expect_backend: str | None, expect_selected_backend: str | None, as_json: bool
) -> None:
    """Synthetic write -> compact -> resolve round trip through the configured facade, then cleanup.

    \b
    Example:
        memwork check health --require-enabled --expect-backend legacy
    """
    from memwork.facade.health import run_health

    facade = _facade()
    report = run_health(
        facade,
        require_enabled=require_enabled,
        expect_backend=expect_backend,
        expect_selected_backend=expect_selected_backend,
    )
    if as_json:
        emit_json(report.to_dict())
    else:
        for c in report.checks:
            click.echo(f"{'ok  ' if c.ok else 'FAIL'} {c.name}: {c.detail}")
        click.echo(f"cleanup: {report.cleanup}")
    if not report.ok:
        failed = [c.name for c in report.checks if not c.ok]
        raise CheckFailed(f"health check failed: {', '.join(failed)}")


@click.group("scaffold")
def scaffold() -> None:
    """Generate code skeletons."""


@scaffold.command("backend")
@click.option("--name", required=True, help="Kebab-case backend name (what MEMORY_BACKEND selects).")
@click.option("--category", required=True, help="semantic | extraction | lifecycle | behavior | policy.")
@click.option("--role", required=True, help="One-line role, e.g. scale-out-vector-store.")
@click.option(
    "--capability",
    "capabilities",
    multiple=True,
    required=True,
    help="resolve | write | compact; repeat for several.",
)
@click.option("--write", "write", is_flag=True, help="Write the files (default: print them).")
@click.option(
    "--dir",
    "directory",
    default=".",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Where --write puts the adapter and its test.",
)
def scaffold_backend(
    name: str, category: str, role: str, capabilities: tuple[str, ...], write: bool, directory: str
) -> None:
    """Render a disabled-by-default adapter module and its test; --write writes them (never overwrites).

    \b
    Example:
        memwork scaffold backend --name mem0 --category extraction \\
            --role automatic-memory-generation --capability write --capability compact --write
    """
    from memwork.facade.scaffold import render_backend, write_scaffold

    rendered = render_backend(name, category, role, list(capabilities))
    if not write:
        for path, text in rendered.files.items():
            click.echo(f"# ---- {path} ----\n{text}")
        return
    for path in write_scaffold(rendered, directory):
        click.echo(f"wrote {path}")
    click.echo(f"next: memwork check contracts --adapter {os.path.join(directory, rendered.module_path)}")


@click.group("legacy")
def legacy() -> None:
    """The legacy conversation-memory tables (h5_conversation_messages, h5_user_memory_items)."""


@legacy.command("init")
@database_url_option(
    envvar="MEMORY_LEGACY_DATABASE_URL",
    required=True,
    help="Legacy database URL (mysql://..., sqlite:///...). Env: MEMORY_LEGACY_DATABASE_URL.",
)
@apply_option
def legacy_init(database_url: str, apply: bool) -> None:
    """Print the DDL of the two legacy tables; --apply creates the missing ones.

    \b
    Example:
        memwork legacy init --database-url mysql://root@127.0.0.1:3306/memind --apply
    """
    from memwork.legacy.schema import init_schema
    from memwork.redaction import redact_url

    result = init_schema(database_url, apply=apply)
    if not apply:
        click.echo("\n\n".join(result.statements))
        click.echo("-- dry run: nothing executed; add --apply to create", err=True)
        return
    target = redact_url(database_url)
    for name in result.created:
        click.echo(f"created {name} in {target}")
    for name in result.existing:
        click.echo(f"exists  {name} in {target}")
    for column, collation in result.inexact_ids.items():
        click.echo(f"note    {column} is {collation}: memwork compares ids exactly (binary) anyway", err=True)


commands = [status, check, scaffold, legacy]
