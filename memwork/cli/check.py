"""``memwork check``: the facade's gates (contracts, config, the synthetic self-check): parse, call, print."""

from __future__ import annotations

import os

import click

from memwork.cli.options import emit_json, emit_verdict, json_option
from memwork.errors import CheckFailed


@click.group("check")
def check() -> None:
    """Gates for the Memory V2 facade: backend and source contracts, per-backend config, the self-check.

    \b
    Examples:
        memwork check contracts --json
        memwork check config --backend pgvector --json
        memwork check health --require-enabled
        memwork check stack --base-url http://127.0.0.1:8081 --expect-backend legacy
    """


@check.command("contracts")
@click.option(
    "--include-pgvector-adapter",
    is_flag=True,
    help="Also validate the shipped adapters (pgvector) and plugins built from an empty environment: "
    "each must pass the gate and stay dormant.",
)
@click.option(
    "--adapter",
    "adapters",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="Also validate an adapter module file (e.g. one written by scaffold). Repeatable.",
)
@click.option(
    "--source",
    "sources",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="Also validate a source module file (e.g. one written by scaffold source), built from the "
    "environment. Repeatable.",
)
@json_option
def contracts(
    include_pgvector_adapter: bool, adapters: tuple[str, ...], sources: tuple[str, ...], as_json: bool
) -> None:
    """Validate every registered backend and source against its contract; exit 1 listing each violation.

    A plugin of either group that fails to load is a violation. A source is built from the environment
    and reads one page of one record; one the environment does not configure is listed as unchecked.

    \b
    Example:
        memwork check contracts --include-pgvector-adapter
    """
    from memwork.facade.contract import check_all

    report = check_all(os.environ, adapters=include_pgvector_adapter, files=adapters, source_files=sources)
    lines = [f"FAIL {v}" for v in report.violations]
    lines.append(
        f"{len(report.checked)} backends and {len(report.sources)} sources checked "
        f"({len(report.unchecked)} of them not configured or unreadable), {len(report.violations)} violations"
    )
    failure = f"{len(report.violations)} contract violation(s)" if report.violations else None
    emit_verdict(report.to_dict(), as_json, lines, failure)


@check.command("config")
@click.option("--backend", "backend", required=True, help="Backend name, e.g. qdrant, letta, legacy.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "shell"]),
    default="json",
    show_default=True,
    help="json: missing keys and readiness (same as --json); shell: a copy-paste export template.",
)
@json_option
def config(backend: str, fmt: str, as_json: bool) -> None:
    """Which variables BACKEND still needs and whether it is ready (exit 1 when not). Secrets never shown.

    \b
    Examples:
        memwork check config --backend letta --json
        memwork check config --backend letta --format shell
    """
    from memwork.facade.configcheck import check_config, shell_template
    from memwork.plugins import Registry

    if as_json and fmt == "shell":
        raise click.UsageError("--json and --format shell exclude each other")

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
    from memwork.facade.facade import facade_from_env
    from memwork.rollout.selfcheck import run_selfcheck

    report = run_selfcheck(
        facade_from_env(),
        require_enabled=require_enabled,
        expect_backend=expect_backend,
        expect_selected_backend=expect_selected_backend,
    )
    lines = [f"{'ok  ' if c.ok else 'FAIL'} {c.name}: {c.detail}" for c in report.checks]
    lines.append(f"cleanup: {report.cleanup}")
    failed = [c.name for c in report.checks if not c.ok]
    failure = None if report.ok else f"health check failed: {', '.join(failed)}"
    emit_verdict(report.to_dict(), as_json, lines, failure)


@check.command("stack")
@click.option("--base-url", required=True, help="The running service, e.g. http://127.0.0.1:8081.")
@click.option("--expect-backend", default=None, help="Fail unless MEMORY_BACKEND is this backend.")
@click.option("--expect-selected-backend", default=None, help="Fail unless resolve selects this backend.")
@click.option("--require-enabled", is_flag=True, help="Fail unless Memory V2 is enabled.")
@click.option(
    "--require-target-healthy", is_flag=True, help="Fail unless the expected backend is available, no reason."
)
@click.option(
    "--token", envvar="MEMWORK_API_TOKEN", default="", show_envvar=True, help="Bearer token of the service."
)
@json_option
def stack(
    base_url: str,
    expect_backend: str | None,
    expect_selected_backend: str | None,
    require_enabled: bool,
    require_target_healthy: bool,
    token: str,
    as_json: bool,
) -> None:
    """Contracts, facade health, app canary, a smoke of every non-legacy backend; exit 1 on any failure.

    Unconfigured backends are reported not_configured, not failed.

    \b
    Example:
        memwork check stack --base-url http://127.0.0.1:18081 --expect-backend pgvector \\
            --expect-selected-backend pgvector
    """
    from memwork.rollout.stack import run_stack

    report = run_stack(
        base_url,
        os.environ,
        token=token,
        require_enabled=require_enabled,
        require_target_healthy=require_target_healthy,
        expect_backend=expect_backend,
        expect_selected_backend=expect_selected_backend,
    )
    lines = [f"{r.status:<15} {r.check:<24} {r.detail}" for r in report.rows]
    failure = None if report.ok else f"stack check failed: {'; '.join(report.failures)}"
    emit_verdict(report.to_dict(), as_json, lines, failure)


commands = [check]
