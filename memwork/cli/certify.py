"""CLI command ``certify``: the migration certificate of a legacy -> pgvector copy -- parse, call, print."""

from __future__ import annotations

from pathlib import Path

import click

from memwork.cli.options import emit_verdict, json_option
from memwork.cli.pgvector import pg_url_option, table_option
from memwork.errors import UsageError

SOURCE_URL_ENV = "MEMORY_BACKFILL_MYSQL_URL"


def _tolerances(values: tuple[str, ...]) -> dict[str, int]:
    """``--max missing=3`` -> ``{"missing": 3}``."""
    out: dict[str, int] = {}
    for value in values:
        kind, sep, number = value.partition("=")
        if not sep or not number.strip().isdigit():
            raise UsageError("max", value, "must be KIND=N, e.g. missing=3")
        out[kind.strip()] = int(number)
    return out


@click.command("certify")
@click.option(
    "--source-url",
    envvar=SOURCE_URL_ENV,
    show_envvar=True,
    help="Source legacy table: mysql://... or sqlite:///...",
)
@pg_url_option
@table_option
@click.option("--embedder", "embedder_spec", default=None, help="hash[:DIM], minilm or module:PATH.")
@click.option(
    "--vector-sample", type=int, default=200, show_default=True, help="Rows whose vectors are re-embedded."
)
@click.option("--all-vectors", is_flag=True, help="Re-embed and compare every row's vector.")
@click.option("-k", "k", type=int, default=10, show_default=True, help="Results per retrieval query.")
@click.option("--no-retrieval", is_flag=True, help="Skip the per-bucket recall and underfill measurement.")
@click.option("--max", "tolerances", multiple=True, help="Rows of a kind tolerated, e.g. --max missing=3.")
@click.option(
    "--output", "output_dir", type=click.Path(path_type=Path), default=None, help="Folder for summary.json."
)
@click.option("--run-id", default=None, help="Run id for the failures table (default: generated).")
@click.option(
    "--from",
    "source_name",
    default=None,
    help="Certify a copy of this migration source (qdrant, ...; its own variables) instead of --source-url.",
)
@click.option("--set", "settings", multiple=True, metavar="VAR=VALUE", help="Override a source variable.")
@click.option(
    "--queries",
    "queries_file",
    type=click.Path(path_type=Path),
    default=None,
    help="queries.jsonl: user, query text or vector, optional expected ids (default: sampled content).",
)
@click.option("--source-embedder", default=None, help="The source's model, for text queries on its side.")
@click.option("--no-preserved", is_flag=True, help="Skip querying the source's own search (--from).")
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
    "--self-test", is_flag=True, help="Plant every damage kind in a scratch copy and show each caught."
)
@json_option
def certify_command(
    source_url: str | None,
    database_url: str | None,
    table: str,
    embedder_spec: str | None,
    vector_sample: int,
    all_vectors: bool,
    k: int,
    no_retrieval: bool,
    tolerances: tuple[str, ...],
    output_dir: Path | None,
    run_id: str | None,
    source_name: str | None,
    settings: tuple[str, ...],
    queries_file: Path | None,
    source_embedder: str | None,
    no_preserved: bool,
    preserved_users: int,
    min_overlap: float,
    min_user_share: float | None,
    self_test: bool,
    as_json: bool,
) -> None:
    """Certify a legacy -> pgvector copy: each bad row by id, kind and field; vectors; index; retrieval.

    Checksums are computed in both databases per user and bad buckets bisected to single rows;
    vectors are re-embedded with their model; the ANN index is checked against the resolve query;
    recall@k and underfill are measured per user size. With --from, the source is any migration
    source, checksummed through its listing; one that can search (qdrant) is also queried like the
    destination per sampled user (overlap@k, RBO, and a stated claim). Failures go to the
    destination's ``memwork_certify_failures`` table and ``summary.json``; exit 1 on FAIL.

    \b
    Example:
        memwork certify --source-url mysql://root@127.0.0.1/app --database-url pg://embedded --output out/
        memwork certify --source-url sqlite:///legacy.db --database-url pg://embedded --self-test
        memwork certify --from qdrant --set MEMORY_QDRANT_URL=local:/data/q --to pg://embedded \\
            --queries queries.jsonl
    """
    from memwork.certify import CertifyOptions, certify

    if not source_url and not source_name:
        raise UsageError("source_url", source_url, f"is required (--source-url, {SOURCE_URL_ENV} or --from)")
    if not database_url:
        raise UsageError("database_url", database_url, "is required (--database-url)")
    if self_test:
        if not source_url:
            raise UsageError("source_url", source_url, "--self-test plants damage in a legacy table copy")
        from memwork.certify.selftest import self_test as run_self_test

        result = run_self_test(source_url, database_url, table=table)
        failure = (
            None
            if result.passed
            else f"self-test FAIL: missed {result.missed}, unexpected {result.unexpected}"
        )
        payload = {
            "planted": result.planted,
            "named": result.named,
            "verdict": result.verdict,
            "passed": result.passed,
        }
        emit_verdict(payload, as_json, result.lines(), failure)
        return
    cert = certify(
        CertifyOptions(
            source_url or "",
            database_url,
            table=table,
            embedder=embedder_spec,
            vector_sample=None if all_vectors else vector_sample,
            k=k,
            retrieval=not no_retrieval,
            tolerances=_tolerances(tolerances),
            run_id=run_id,
            output_dir=output_dir,
            source=source_name,
            source_env=_source_env(source_name, settings),
            queries=queries_file,
            source_embedder=source_embedder,
            preserved=not no_preserved,
            preserved_users=preserved_users,
            min_overlap=min_overlap,
            min_user_share=min_user_share,
        )
    )
    summary = cert.summary()
    lines = [f"verdict: {cert.verdict}  run: {cert.run_id}  table: {cert.table}", cert.claim()]
    for gate, reasons in cert.gates.items():
        lines.append(f"{gate}: {'FAIL' if reasons else 'PASS'}")
        lines += [f"  {reason}" for reason in reasons]
    for bad in cert.failures()[:20]:
        fields = ", ".join(bad["fields"]) if bad["fields"] else ""
        lines.append(f"  {bad['kind']:<16} {bad['key']}  user {bad['user']}  {fields}")
    failed = [g for g, reasons in cert.gates.items() if reasons]
    if cert.preserved is not None:
        lines.append(f"preserved: {cert.preserved.claim()}")
        lines += [f"  note: {note}" for note in cert.preserved.notes]
    if cert.failures():
        again = f"import --from {source_name}" if source_name else "backfill"
        lines.append(f"repair (dry run first): memwork {again} --repair {cert.run_id} [--apply]")
    emit_verdict(summary, as_json, lines, f"certificate FAIL: {', '.join(failed)}" if failed else None)


def _source_env(source_name: str | None, settings: tuple[str, ...]) -> dict[str, str]:
    """The source's variables: the environment, ``--set`` over it (only with ``--from``)."""
    if not source_name:
        if settings:
            raise UsageError("set", settings[0], "only with --from (the source's own variables)")
        return {}
    from memwork.cli.migrate import parse_settings
    from memwork.migrate.run import environment

    return environment(parse_settings(settings))


commands: list = [certify_command]
