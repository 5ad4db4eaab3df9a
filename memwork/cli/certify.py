"""CLI command ``verify`` (aliases ``certify`` and ``import-verify``): the migration certificate of any
source's copy in pgvector -- parse, call, print. One command, one options set (:class:`CertifyOptions`),
one result (the certificate) and one ``summary.json``."""

from __future__ import annotations

from pathlib import Path

import click

from memwork.cli.migrate import page_size_option, parse_settings
from memwork.cli.options import emit_verdict, json_option
from memwork.cli.pgvector import pg_url_option, table_option
from memwork.errors import UsageError

SOURCE_URL_ENV = "MEMORY_BACKFILL_MYSQL_URL"


def _tolerances(values: tuple[str, ...]) -> dict[str, int]:
    """``--max missing=3`` -> ``{"missing": 3}``; a kind the gates do not count is bad input (it would
    tolerate nothing, silently)."""
    from memwork.certify.certificate import TOLERABLE_KINDS

    out: dict[str, int] = {}
    for value in values:
        kind, sep, number = value.partition("=")
        if not sep or not number.strip().isdigit():
            raise UsageError("max", value, "must be KIND=N, e.g. missing=3")
        if kind.strip() not in TOLERABLE_KINDS:
            raise UsageError("max", value, f"names no kind; one of {', '.join(TOLERABLE_KINDS)}")
        out[kind.strip()] = int(number)
    return out


def _recall_bars(values: tuple[str, ...]) -> tuple[float, dict[str, float]]:
    """``--min-recall 0.9 --min-recall 1-10=0.99`` -> ``(0.9, {"1-10": 0.99})``: one bar for every
    size bucket and each bucket's own (the bucket names are checked by :class:`CertifyOptions`)."""
    default, by_bucket = 0.95, {}
    for value in values:
        bucket, sep, number = value.rpartition("=")
        try:
            bar = float(number)
        except ValueError:
            raise UsageError("min_recall", value, "must be R or BUCKET=R, e.g. 0.95 or 1-10=0.99") from None
        if sep:
            by_bucket[bucket.strip()] = bar
        else:
            default = bar
    return default, by_bucket


@click.command("verify")
@click.option(
    "--from",
    "source",
    default="legacy-mysql",
    show_default=True,
    help="Source: legacy-mysql, qdrant, weaviate, mem0, letta, langgraph, redis-streams, pgvector "
    "(or module:PATH).",
)
@click.option(
    "--source-url",
    envvar=SOURCE_URL_ENV,
    show_envvar=True,
    help="legacy-mysql's database: mysql://... or sqlite:///...",
)
@pg_url_option
@table_option
@page_size_option(200)
@click.option("--embedder", "embedder_spec", default=None, help="hash[:DIM], minilm or module:PATH.")
@click.option("--expected-dimensions", type=int, default=None, help="FAIL unless the column has it.")
@click.option("--expected-model", default=None, help="FAIL unless every row has this model id.")
@click.option(
    "--vector-sample",
    "--sample-size",
    "vector_sample",
    type=int,
    default=200,
    show_default=True,
    help="Rows whose vectors are checked against their model (or source); alias --sample-size.",
)
@click.option("--all-vectors", is_flag=True, help="Check every row's vector.")
@click.option("-k", "k", type=int, default=10, show_default=True, help="Results per retrieval query.")
@click.option("--no-retrieval", is_flag=True, help="Skip the per-bucket recall and underfill measurement.")
@click.option("--users-per-bucket", type=int, default=20, show_default=True, help="Users sampled per bucket.")
@click.option(
    "--min-recall",
    "min_recall",
    multiple=True,
    metavar="[BUCKET=]R",
    help="FAIL below, per size bucket (default 0.95 for each): R for every bucket, BUCKET=R for one "
    "(1-10, 11-100, 101-1000, 1001+), repeatable, e.g. --min-recall 0.9 --min-recall 1-10=0.99.",
)
@click.option("--max-underfill", type=float, default=0.0, show_default=True, help="FAIL above, per bucket.")
@click.option(
    "--max",
    "tolerances",
    multiple=True,
    help="Rows or vectors of a kind tolerated (a warning, not a FAIL), e.g. --max missing=3, --max stale=1.",
)
@click.option("--allow-quarantined", is_flag=True, help="Quarantined rows are listed but not a FAIL.")
@click.option(
    "--leaf",
    "--range-size",
    "leaf",
    type=int,
    default=256,
    show_default=True,
    help="Rows per bucket compared row by row after bisection; alias --range-size.",
)
@click.option(
    "--min-self-retrieval",
    type=float,
    default=None,
    hidden=True,
    help="Accepted for old scripts: self-retrieval is covered by the vectors and retrieval gates.",
)
@click.option(
    "--output", "output_dir", type=click.Path(path_type=Path), default=None, help="Folder for summary.json."
)
@click.option("--run-id", default=None, help="Run id for the failures table (default: generated).")
@click.option(
    "--self-test", is_flag=True, help="Plant every damage kind in a scratch copy and show each caught."
)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="VAR=VALUE",
    help="Override a source variable (repeatable), e.g. --set MEMORY_QDRANT_URL=http://...",
)
@click.option(
    "--queries",
    "queries_file",
    type=click.Path(path_type=Path),
    default=None,
    help="queries.jsonl: user, query text or vector, optional expected ids (default: sampled content).",
)
@click.option("--source-embedder", default=None, help="The source's model, for text queries on its side.")
@click.option("--no-preserved", is_flag=True, help="Skip querying the source's own search.")
@click.option(
    "--preserved-users", type=int, default=30, show_default=True, help="Users sampled for the preservation."
)
@click.option(
    "--min-overlap", type=float, default=0.95, show_default=True, help="Per-user overlap@k to pass."
)
@click.option(
    "--min-user-share",
    type=float,
    default=None,
    help="Fail when the 95 % lower bound of the share of passing users is below this (default: any fail).",
)
@click.option(
    "--source-checksums",
    type=click.Choice(["auto", "sql", "python"]),
    default="auto",
    show_default=True,
    help="legacy-mysql: checksum rows in its database (sql) or stream and hash them here (python); "
    "auto takes sql unless the server has no JSON_NORMALIZE (MySQL 8).",
)
@click.option(
    "--executor",
    "executor_spec",
    default=None,
    metavar="SPEC",
    help="legacy-mysql: run the row checksums as key ranges of users on serial, local, local:N or "
    "dask://HOST:PORT (default: in this process); the certificate is the same.",
)
@click.option(
    "--workers",
    type=int,
    default=None,
    help="Key ranges of users to split the row checksums into (default: the executor's workers; "
    "alone: local:N).",
)
@json_option
def verify_command(
    source: str,
    source_url: str | None,
    database_url: str | None,
    table: str,
    page_size: int,
    embedder_spec: str | None,
    expected_dimensions: int | None,
    expected_model: str | None,
    vector_sample: int,
    all_vectors: bool,
    k: int,
    no_retrieval: bool,
    users_per_bucket: int,
    min_recall: tuple[str, ...],
    max_underfill: float,
    tolerances: tuple[str, ...],
    allow_quarantined: bool,
    leaf: int,
    min_self_retrieval: float | None,
    output_dir: Path | None,
    run_id: str | None,
    self_test: bool,
    settings: tuple[str, ...],
    queries_file: Path | None,
    source_embedder: str | None,
    no_preserved: bool,
    preserved_users: int,
    min_overlap: float,
    min_user_share: float | None,
    source_checksums: str,
    executor_spec: str | None,
    workers: int | None,
    as_json: bool,
) -> None:
    """Verify a migration into pgvector: the certificate of any source's copy -- each bad row by id,
    kind, user and field; vectors against their model (or the source's); the index; retrieval.

    legacy-mysql is checksummed in both databases per user; any other source through its records,
    mapped as the importer writes them. Bad buckets are bisected to single rows; only the rows this
    source owns are compared. Recall@k and underfill are measured per user size; a source that can
    search (qdrant, weaviate, pgvector; letta, sent the query's text) is also queried like the
    destination per sampled user (overlap@k, RBO, a claim). Failures go to the destination's
    ``memwork_certify_failures`` table and ``summary.json``; exit 1 on FAIL, with the repair command.
    --executor / --workers (legacy-mysql) run the row checksums as key ranges of users in worker
    processes or on a Dask cluster; everything else runs once, here.

    \b
    Example:
        memwork verify --source-url mysql://root@127.0.0.1/app --to pg://embedded --output out/
        memwork verify --from qdrant --to postgresql://localhost/memwork --json
        memwork verify --source-url sqlite:///legacy.db --to pg://embedded --self-test
        memwork verify --source-url mysql://root@db/app --to postgresql://pg/memwork \\
            --executor dask://scheduler:8786 --workers 16
        memwork verify --from qdrant --set MEMORY_QDRANT_URL=local:/data/q --to pg://embedded \\
            --queries queries.jsonl
        memwork verify --from pgvector --set MEMORY_PGVECTOR_SOURCE_URL=postgresql://old/db \\
            --table memories_v2 --source-embedder hash:384
    """
    from memwork.certify import CertifyOptions, certify
    from memwork.migrate.run import environment

    overrides = parse_settings(settings)
    if source_url and source == "legacy-mysql":
        overrides.setdefault(SOURCE_URL_ENV, source_url)
    options = CertifyOptions(
        source_url if source == "legacy-mysql" else None,
        database_url,
        table=table,
        source=source,
        env=environment(overrides),
        page_size=page_size,
        embedder=embedder_spec or None,
        expected_dimensions=expected_dimensions,
        expected_model=expected_model,
        vector_sample=None if all_vectors else vector_sample,
        k=k,
        retrieval=not no_retrieval,
        users_per_bucket=users_per_bucket,
        min_recall=_recall_bars(min_recall)[0],
        min_recall_by_bucket=_recall_bars(min_recall)[1],
        max_underfill=max_underfill,
        tolerances=_tolerances(tolerances),
        allow_quarantined=allow_quarantined,
        leaf=leaf,
        run_id=run_id,
        output_dir=output_dir,
        queries=queries_file,
        source_embedder=source_embedder,
        preserved=not no_preserved,
        preserved_users=preserved_users,
        min_overlap=min_overlap,
        min_user_share=min_user_share,
        source_checksums=source_checksums,
        executor=executor_spec,
        workers=workers,
    )
    if self_test and (executor_spec is not None or workers is not None):
        raise UsageError("executor", executor_spec or workers, "--self-test runs in one process")
    if self_test:
        _self_test(options, as_json)
        return
    cert = certify(options)
    if min_self_retrieval is not None:
        cert.notes.append("min-self-retrieval: covered by the vectors and retrieval gates (ignored)")
    summary = cert.summary()
    lines = [
        f"verdict: {cert.verdict_text}  run: {cert.run_id}  source: {cert.source_key}  table: {cert.table}",
        cert.claim(),
    ]
    ranges, executor = cert.execution["ranges"], cert.execution["executor"]
    if ranges:
        lines.append(f"rows: checksummed as {len(ranges)} key range(s) of users on {executor}")
    for gate, reasons in cert.gates.items():
        warned = cert.warnings.get(gate, [])
        state = "FAIL" if reasons else ("PASS with warnings" if warned else "PASS")
        lines.append(f"{gate}: {state}")
        lines += [f"  {reason}" for reason in reasons]
        lines += [f"  warning: {warning}" for warning in warned]
    for bad in cert.failures()[:20]:
        fields = ", ".join(bad["fields"]) if bad["fields"] else ""
        lines.append(f"  {bad['kind']:<16} {bad['key']}  user {bad['user']}  {fields}")
    lines += [f"note: {note}" for note in cert.notes + cert.rows.notes[:20]]
    if cert.preserved is not None:
        lines.append(f"preserved: {cert.preserved.claim()}")
        lines += [f"  note: {note}" for note in cert.preserved.notes]
    failed = [g for g, reasons in cert.gates.items() if reasons]
    repair = cert.repair_command()
    if repair:
        lines.append(f"repair (dry run first): {repair} [--apply]")
    emit_verdict(summary, as_json, lines, f"certificate FAIL: {', '.join(failed)}" if failed else None)


def _self_test(options: object, as_json: bool) -> None:
    """``--self-test``: plant each damage kind in a scratch copy of the legacy table's migration."""
    from memwork.certify import CertifyOptions
    from memwork.certify.selftest import self_test as run_self_test

    assert isinstance(options, CertifyOptions)
    if not options.legacy:
        raise UsageError("from", options.source, "--self-test plants damage in a legacy-mysql copy only")
    result = run_self_test(options.resolved_source_url(), options.resolved_dest_url(), table=options.table)
    failure = (
        None if result.passed else f"self-test FAIL: missed {result.missed}, unexpected {result.unexpected}"
    )
    payload = {
        "planted": result.planted,
        "named": result.named,
        "verdict": result.verdict,
        "passed": result.passed,
    }
    emit_verdict(payload, as_json, result.lines(), failure)


def _alias(name: str) -> click.Command:
    return click.Command(
        name,
        params=verify_command.params,
        callback=verify_command.callback,
        help="Alias of `memwork verify`. " + (verify_command.help or ""),
        short_help="Alias of `memwork verify`.",
    )


#: ``certify`` and ``import-verify``: the names of the two verifications this one replaced
certify_command = _alias("certify")
import_verify_command = _alias("import-verify")

commands: list = [verify_command, certify_command, import_verify_command]
