"""CLI group ``report NAME|index|list|rollout`` -- parse, call memwork, print, exit."""

from __future__ import annotations

from pathlib import Path

import click

from memwork.cli.options import emit_json, json_option
from memwork.errors import ReportExecutionError


class _ReportGroup(click.Group):
    """``memwork report NAME`` runs report NAME; ``index``, ``list`` and ``rollout`` are subcommands."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["run", *args]
        return super().resolve_command(ctx, args)


@click.group("report", cls=_ReportGroup)
def report() -> None:
    """Run a report notebook, list the reports, rebuild reports/index.html or the rollout page.

    \b
    Examples:
        memwork report health_report -p store sqlite:///memory.db -p scope alice
        memwork report backfill_verification -p k 10 --out reports/
        memwork report index
        memwork report rollout --from .
    """


@report.command("run")
@click.argument("name")
@click.option("-p", "--param", "params", nargs=2, multiple=True, metavar="KEY VALUE", help="A parameter.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None, help="Reports folder.")
@click.option("--show-code", is_flag=True, help="Show code cells in the HTML (hidden by default).")
@json_option
def run_cmd(
    name: str, params: tuple[tuple[str, str], ...], out_dir: str | None, show_code: bool, as_json: bool
) -> None:
    """Execute report NAME with papermill; write notebook, HTML, summary.json and manifest.

    Exit code 1 when the verdict is FAIL or NO-GO or a cell fails, 2 for a bad parameter.

    \b
    Example:
        memwork report duplicate_review -p threshold 0.9 --json
    """
    from memwork.reports import run_report

    try:
        run = run_report(name, dict(params), out_dir, show_code=show_code)
    except ReportExecutionError as exc:
        if as_json and exc.run is not None:
            emit_json(exc.run.to_dict())
        raise
    if as_json:
        emit_json({**run.to_dict(), "summary": run.summary})
    else:
        click.echo(f"{run.name}: {run.verdict} in {run.duration_s:.1f} s")
        for reason in run.summary.get("reasons", [])[:10]:
            click.echo(f"  - {reason}")
        click.echo(f"HTML: {run.html_path}")
    raise SystemExit(run.exit_code)


@report.command("index")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None, help="Reports folder.")
@json_option
def index_cmd(out_dir: str | None, as_json: bool) -> None:
    """Rebuild reports/index.html listing every run with its verdict.

    \b
    Example:
        memwork report index --out reports/
    """
    from memwork.reports.index import build_index, scan_runs

    path = build_index(out_dir)
    runs, skipped = scan_runs(Path(path).parent)
    if as_json:
        emit_json({"index": str(path), "runs": runs, "skipped": skipped})
        return
    for damaged in skipped:
        click.echo(f"skipped {damaged['run_id']}: {damaged['problem']}", err=True)
    click.echo(str(path))


@report.command("list")
@json_option
def list_cmd(as_json: bool) -> None:
    """List the report notebooks and their parameters.

    \b
    Example:
        memwork report list --json
    """
    from memwork.reports import find_notebook, list_reports, read_parameters

    reports = {
        name: [p.to_dict() for p in read_parameters(find_notebook(name)).values()] for name in list_reports()
    }
    if as_json:
        emit_json(reports)
        return
    for name, params in reports.items():
        click.echo(name)
        for p in params:
            click.echo(f"  {p['name']}: {p['type']} = {p['default']!r}  {p['help']}")


@report.command("rollout")
@click.option(
    "--from",
    "folder",
    type=click.Path(file_okay=False),
    default=".",
    show_default=True,
    help="The folder holding the rollout runbook's artifacts (shadow-*pct.jsonl, judge-*pct.json, ...).",
)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None, help="Reports folder.")
@json_option
def rollout_cmd(folder: str, out_dir: str | None, as_json: bool) -> None:
    """Write reports/rollout.html: each stage of a staged rollout (1 % -> 10 % -> 100 %) with its
    sample rate, verdict, reasons and links to its artifacts, read from the files the rollout
    runbook names. Nothing is judged again; exit 0 whatever the verdicts (the judge's exit was
    the decision), 2 when the folder holds no shadow log.

    \b
    Example:
        memwork report rollout --from . --json
    """
    from memwork.reports.rollout_page import build_rollout_page

    page, rollout = build_rollout_page(folder, out_dir)
    if as_json:
        emit_json({"page": str(page), **rollout.to_dict()})
        return
    for stage in rollout.stages:
        click.echo(f"{stage.name}: {stage.verdict}")
    click.echo(str(page))


commands = [report]
