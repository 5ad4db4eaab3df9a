"""``memwork canary``: the app canary and the statistical judge of shadow reads: parse, call, print."""

from __future__ import annotations

from typing import Any

import click

from memwork.cli.options import emit_json, emit_verdict, json_option


@click.group("canary")
def canary() -> None:
    """Canary a running memwork service: status and round trip, then judge its shadow reads.

    \b
    Examples:
        memwork canary app --base-url http://127.0.0.1:8081 --require-enabled --expect-backend legacy
        memwork canary judge --log .memwork/shadow/comparisons.jsonl --approver ops
    """


token_option = click.option(
    "--token",
    "token",
    envvar="MEMWORK_API_TOKEN",
    default="",
    show_envvar=True,
    help="Bearer token of the service (default: $MEMWORK_API_TOKEN). Never printed.",
)


@canary.command("app")
@click.option("--base-url", required=True, help="The service, e.g. http://127.0.0.1:8081.")
@token_option
@click.option("--require-enabled", is_flag=True, help="Fail unless Memory V2 is enabled.")
@click.option(
    "--require-target-healthy",
    is_flag=True,
    help="Fail unless the expected backend is available with no reason.",
)
@click.option("--expect-backend", default=None, help="Fail unless MEMORY_BACKEND is this backend.")
@click.option("--expect-selected-backend", default=None, help="Fail unless resolve selects this backend.")
@click.option(
    "--probes",
    type=int,
    default=0,
    show_default=True,
    help="Cross-user probes to send over N/2 distinct user pairs (each pair asks the other's question "
    "once per direction); ~3000 bound 0.1 %.",
)
@click.option(
    "--probe-seed", type=int, default=0, show_default=True, help="Seed of the probe users' memories."
)
@click.option(
    "--max-uninformative",
    type=float,
    default=0.05,
    show_default=True,
    help="Share of probes that may be no evidence (failed, or the asker's own memory not answered).",
)
@click.option(
    "--max-leak-rate",
    type=float,
    default=0.001,
    show_default=True,
    help="Required 95 % upper bound on the cross-user leak rate (with --probes).",
)
@click.option(
    "--plant-pgvector",
    "plant_pgvector",
    default="",
    metavar="URL",
    help="Plant the probe users' memories straight into this pgvector database (the one the service's "
    "MEMORY_BACKEND=pgvector resolves from) instead of the service's write path, and delete them after. "
    "Writes and removes only synthetic memory-v2-canary-* users' rows; the result records planted and "
    "removed counts (a mismatch fails).",
)
@click.option(
    "--plant-table",
    default="",
    help="Table to plant in (default: $MEMORY_PGVECTOR_TABLE, else memory_embeddings).",
)
@click.option(
    "--plant-embedding-module",
    default="",
    help="The service's query module (default: $MEMORY_PGVECTOR_EMBEDDING_MODULE): the probe rows are "
    "embedded with it.",
)
@click.option(
    "--plant-model",
    default="",
    help="embedding_model of the planted rows (default: $MEMORY_PGVECTOR_MODEL, else the module's MODEL_ID).",
)
@click.option(
    "--apply",
    "apply",
    is_flag=True,
    help="With --plant-pgvector: really plant (and remove) the probe rows; without it a dry run checks "
    "the table and module and says what would be written, calling nothing.",
)
@json_option
def app(
    base_url: str,
    token: str,
    require_enabled: bool,
    require_target_healthy: bool,
    expect_backend: str | None,
    expect_selected_backend: str | None,
    probes: int,
    probe_seed: int,
    max_uninformative: float,
    max_leak_rate: float,
    plant_pgvector: str,
    plant_table: str,
    plant_embedding_module: str,
    plant_model: str,
    apply: bool,
    as_json: bool,
) -> None:
    """Status expectations, then remember-recent -> sync -> resolve for a synthetic user, then forget it.
    With ``--probes N``: N cross-user probes, and the 95 % upper bound on the leak rate they show
    (0 leaks in N: about 3/N) against ``--max-leak-rate``. A probe counts only when its answer holds
    the asker's own memory; more than ``--max-uninformative`` probes without it (or failed) is
    INCONCLUSIVE. ``--json`` output is the probe result file the canary_signoff report reads.
    The probe users are written through the service, which writes to legacy only: to bound an instance
    that resolves from pgvector, ``--plant-pgvector URL`` writes them into its table instead (only
    ``memory-v2-canary-*`` rows, removed afterwards even when a probe failed); a dry run unless
    ``--apply``.

    Exit 1 listing every failed expectation or any leak; exit 3 when the probes were too few, or too
    many uninformative, to reach the required bound (INCONCLUSIVE).

    \b
    Example:
        memwork canary app --base-url http://127.0.0.1:8081 --require-enabled \\
            --require-target-healthy --expect-backend pgvector --expect-selected-backend pgvector
    """
    from memwork.errors import UsageError
    from memwork.rollout.app_canary import (
        CANARY_USER_PREFIX,
        PROBE_OWNER,
        PgvectorPlanter,
        run_app_canary,
        run_leak_probes,
    )

    if probes < 0:
        raise UsageError("probes", probes, "must be 0 (no probes) or more")
    if not 0 < max_leak_rate < 1:
        raise UsageError("max_leak_rate", max_leak_rate, "must be between 0 and 1 (0.001 = 0.1 %)")
    if not 0 <= max_uninformative < 1:
        raise UsageError("max_uninformative", max_uninformative, "must be from 0 to below 1 (0.05 = 5 %)")
    planter = None
    if plant_pgvector:
        if not probes:
            raise UsageError("plant_pgvector", "<url>", "plants probe users: give --probes N")
        planter = PgvectorPlanter(
            plant_pgvector, table=plant_table, embedding_module=plant_embedding_module, model=plant_model
        )
        dimensions = planter.check()  # a missing table or another dimension: refused before anything
        if not apply:
            rows = (probes + 1) // 2 * 2
            plan = {"dryRun": True, "wouldPlant": rows, "plantedIn": planter.where, "dimensions": dimensions,
                    "users": f"{CANARY_USER_PREFIX}<run>-p<i><a|b>", "owner": PROBE_OWNER}  # fmt: skip
            line = f"dry run: would plant {rows} rows of synthetic {CANARY_USER_PREFIX}* users in "
            line += f"{planter.where} (vector({dimensions})), probe, then remove them; add --apply"
            lines = [line]
            emit_verdict(plan, as_json, lines, None)
            return
    elif plant_table or plant_embedding_module or plant_model or apply:
        raise UsageError(
            "plant_pgvector", "", "--plant-table/--plant-embedding-module/--plant-model/--apply need it"
        )
    report = run_app_canary(
        base_url,
        token=token,
        require_enabled=require_enabled,
        require_target_healthy=require_target_healthy,
        expect_backend=expect_backend,
        expect_selected_backend=expect_selected_backend,
    )
    lines = [f"{'ok  ' if s.ok else 'FAIL'} {s.name}: {s.detail}" for s in report.steps]
    lines.append(f"canary user {report.userId} at {report.base_url}")
    failures = list(report.failures)
    payload = report.to_dict()
    leak = None
    if probes:
        origin = click.get_current_context().get_parameter_source("max_leak_rate")
        leak = run_leak_probes(
            base_url,
            probes,
            token=token,
            max_leak_rate=max_leak_rate,
            max_leak_rate_origin="default" if origin == click.core.ParameterSource.DEFAULT else "set",
            max_uninformative=max_uninformative,
            seed=probe_seed,
            planter=planter,
        )
        payload["leakProbes"] = leak.to_dict()
        lines.append(
            f"{ {'GO': 'ok  ', 'NO-GO': 'FAIL'}.get(leak.verdict, 'INCONCLUSIVE') } isolation: "
            + leak.sentence()
        )
        if leak.cleanup:
            lines.append(f"{'FAIL' if leak.cleanup_failed else 'ok  '} cleanup: {leak.cleanup}")
        if leak.verdict == "NO-GO":
            failures.append(f"isolation: {leak.sentence()}")
    failure = f"app canary failed: {'; '.join(failures)}" if failures else None
    emit_verdict(payload, as_json, lines, failure)
    if leak is not None and leak.verdict == "INCONCLUSIVE":
        raise click.exceptions.Exit(3)


@canary.command("judge")
@click.option(
    "--log",
    "log",
    default="",
    help="Comparison log (JSON lines). Default: <workspace>/shadow/comparisons.jsonl.",
)
@click.option("--base-url", default="", help="The service whose status the sign-off records.")
@token_option
@click.option(
    "--band",
    type=float,
    default=0.25,
    show_default=True,
    help="Practical-significance band, a fraction of the baseline.",
)
@click.option(
    "--confidence", type=float, default=0.95, show_default=True, help="Confidence of tests and CIs."
)
@click.option("--min-samples", type=int, default=20, show_default=True, help="Fewer usable values: NODATA.")
@click.option(
    "--max-error-rate",
    type=float,
    default=0.01,
    show_default=True,
    help="Shadow error budget (fraction of shadow calls).",
)
@click.option(
    "--max-damaged-share",
    type=float,
    default=0.01,
    show_default=True,
    help="Share of damaged lines (and requestIds reused with other content) allowed; past it INCONCLUSIVE.",
)
@click.option(
    "--primary-backend", default="", help="Judge only comparisons with this primary (a log of several pairs)."
)
@click.option(
    "--shadow-backend", default="", help="Judge only comparisons with this shadow (a log of several pairs)."
)
@click.option(
    "--max-underfill-rate",
    type=float,
    default=0.01,
    show_default=True,
    help="Share of shadow answers with fewer items than the baseline's allowed.",
)
@click.option(
    "--max-p95-ms", type=float, default=250.0, show_default=True, help="Shadow p95 SLO in ms (0: off)."
)
@click.option(
    "--max-p99-ms", type=float, default=1000.0, show_default=True, help="Shadow p99 SLO in ms (0: off)."
)
@click.option(
    "--latency-band",
    type=float,
    default=0.0,
    show_default=True,
    help="Relative latency band; 0: --band when the backends rank alike, shown only when they differ.",
)
@click.option(
    "--warmup-s",
    type=float,
    default=30.0,
    show_default=True,
    help="Seconds after a (re)start reported as warm-up, apart from the steady state.",
)
@click.option(
    "--primary-ranking",
    default="",
    help="How the primary ranks (recency, semantic, policy); default: declared.",
)
@click.option("--shadow-ranking", default="", help="How the shadow ranks; default: as its backend declares.")
@click.option(
    "--certificate",
    default="",
    help="Migration certificate summary.json (default: --verification-summary): the quality gate when the "
    "backends rank differently.",
)
@click.option(
    "--certificate-waiver", default="", help="Why the certificate is waived (recorded in the sign-off)."
)
@click.option(
    "--aa-log", default="", help="Comparison log of the baseline against itself (A/A): the noise floor."
)
@click.option("--approver", default="", help="Who signs off.")
@click.option(
    "--health-summary", default="", help="summary.json (or run folder) of the health report relied on."
)
@click.option(
    "--verification-summary",
    default="",
    help="summary.json (or run folder) of the backfill verification relied on.",
)
@click.option(
    "--leak-probes",
    default="",
    help="The --json output of `memwork canary app --probes N`: its leak bound in the sign-off "
    "(a NO-GO unless the probes' verdict is GO).",
)
@json_option
def judge(log: str, as_json: bool, **options: Any) -> None:
    """Judge shadow reads: GO (exit 0), NO-GO (exit 1) or INCONCLUSIVE (exit 3: a person decides).

    Mann-Whitney U per metric in its bad direction with a +/-band practical-significance band, and
    only when the sample could detect a shift of the band (else NODATA); the latency tail (p95, p99)
    by exact order-statistic bounds; cross-user memories, dimension mismatches, shadow errors and
    underfill over budget and a p95 / p99 past the SLO fail on their own. Between backends that rank
    differently (legacy newest first -> pgvector nearest first) agreement is shown, never decides, and
    the migration certificate is required unless waived. Each line is read strictly: a repeated
    requestId counts once, damaged lines past --max-damaged-share make it INCONCLUSIVE, and each
    primary/shadow backend pair is judged on its own (a log of several pairs is never GO unless one
    is selected).

    \b
    Example:
        memwork canary judge --log comparisons.jsonl --band 0.25 --confidence 0.95 --approver ops --json
    """
    from memwork.reports.signoff_view import metric_rows
    from memwork.rollout.run import judge_shadow_reads
    from memwork.rollout.signoff import SignoffParameters

    # every other option is named as the sign-off parameter it sets
    result = judge_shadow_reads(SignoffParameters(comparison_log=log, **options))
    if as_json:
        emit_json(result.to_dict())
    else:
        for row in metric_rows(result):
            pair = f"[{row['pair']}] " if "pair" in row else ""
            click.echo(
                f"{row['class']:<8} {pair}{row['metric']:<18} n={row['n (baseline/target)']:<10} "
                f"estimate={'-' if row['estimate'] is None else row['estimate']} "
                f"CI={row['CI'] or '-'}  {row['detail']}"
            )
        log_read = result.log
        pairs = ", ".join(p.label for p in result.pairs if p.label) or "no backend pair"
        click.echo(
            f"verdict {result.verdict} ({result.records} comparisons of {pairs}; "
            f"{log_read['duplicates']} repeats counted once, {log_read['damaged']} damaged lines; "
            f"log sha256 {result.signoff['comparison_log_sha256'][:12]})"
        )
        for reason in result.reasons:
            click.echo(f"  - {reason}")
    if result.exit_code:
        raise click.exceptions.Exit(result.exit_code)


commands = [canary]
