"""The ``backfill_verification`` report's one call: its parameters, checked, as a certificate.

The notebook declares :class:`VerifyParameters` (empty text and 0 mean "not given") and hands them to
:func:`verify_from_parameters`, which checks them before any database is touched and runs
:func:`~memwork.certify.certificate.certify` -- the same verification as ``memwork verify``, for any
source.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memwork.certify.certificate import Certificate, CertifyOptions, certify
from memwork.checks import both_or_neither
from memwork.errors import UsageError
from memwork.migrate.legacy_mysql import MYSQL_URL_ENV
from memwork.migrate.legacy_mysql import SOURCE_NAME as LEGACY_SOURCE
from memwork.migrate.run import environment
from memwork.redaction import redact_assignments


@dataclass
class VerifyParameters:
    """The ``backfill_verification`` notebook's parameters as declared (each documented there)."""

    source: str = LEGACY_SOURCE
    source_url: str = ""
    pgvector_url: str = ""
    table: str = "memory_embeddings"
    expected_dimensions: int = 0
    expected_model: str = ""
    embedder: str = ""
    sample_size: int = 200
    k: int = 10
    range_size: int = 256
    retrieval: bool = True
    users_per_bucket: int = 20
    min_recall: float = 0.95
    min_recall_by_bucket: str = ""
    max_underfill: float = 0.0
    tolerances: str = ""
    allow_quarantined: bool = False
    settings: str = ""


#: the variable each built-in source reads its location from: ``source_url`` sets it (the legacy
#: table's is ``MEMORY_BACKFILL_MYSQL_URL``); a source's other variables go in ``settings``
SOURCE_URL_VARIABLES = {
    LEGACY_SOURCE: MYSQL_URL_ENV,
    "qdrant": "MEMORY_QDRANT_URL",
    "weaviate": "MEMORY_WEAVIATE_URL",
    "letta": "MEMORY_LETTA_BASE_URL",
    "mem0": "MEMORY_MEM0_BASE_URL",
    "langgraph": "MEMORY_LANGGRAPH_URL",
    "redis-streams": "MEMORY_REDIS_STREAMS_URL",
    "pgvector": "MEMORY_PGVECTOR_SOURCE_URL",
}


#: builds a sample legacy migration: ``() -> object`` with ``source_url``, ``dest_url``, ``table``, ``active``
SampleMigration = Callable[[], Any]


def parse_tolerances(text: str) -> dict[str, int]:
    """``"missing:3, changed:1"`` (or ``missing=3``) -> ``{"missing": 3, "changed": 1}`` (empty: none
    tolerated)."""
    out: dict[str, int] = {}
    for part in (p.strip() for p in text.replace(";", ",").split(",")):
        if not part:
            continue
        kind, sep, number = part.replace(":", "=", 1).partition("=")
        if not sep or not number.strip().isdigit() or not kind.strip():
            raise UsageError("tolerances", text, "must be KIND:N[, KIND:N ...], e.g. missing:3")
        out[kind.strip()] = int(number)
    return out


#: one ``BUCKET=R`` (or ``BUCKET:R``) of ``min_recall_by_bucket`` and the comma or semicolon after it
_BAR = re.compile(r"\s*([^=:,;][^=:]*?)\s*[=:]\s*([0-9.eE+-]+)\s*(?:[,;]|$)")


def parse_recall_bars(text: str) -> dict[str, float]:
    """``"1-10=0.99, 1001+=0.9"`` (or ``1-10:0.99``) -> ``{"1-10": 0.99, "1001+": 0.9}``: each size
    bucket's own recall bar (empty: every bucket has ``min_recall``). The bucket names are checked by
    :class:`CertifyOptions`; ``101-1,000`` may be written with or without its comma."""
    out: dict[str, float] = {}
    position, text = 0, text.strip()
    while position < len(text):
        found = _BAR.match(text, position)
        bar = _number(found.group(2)) if found else None
        if found is None or bar is None:
            raise UsageError("min_recall_by_bucket", text, "must be BUCKET=R[, BUCKET=R ...], e.g. 1-10=0.99")
        out[found.group(1).strip()] = bar
        position = found.end()
    return out


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def parse_settings(text: str) -> dict[str, str]:
    """``"MEMORY_QDRANT_COLLECTION=notes; MEMORY_QDRANT_EMBEDDING_MODEL=m"`` -> the source's variables
    (``;`` or a new line between them: a value may hold a comma)."""
    out: dict[str, str] = {}
    for part in (p.strip() for p in text.replace("\n", ";").split(";")):
        if not part:
            continue
        name, sep, value = part.partition("=")
        if not sep or not name.strip().isidentifier():
            raise UsageError("settings", redact_assignments(text), "must be VAR=VALUE[; VAR=VALUE ...]")
        out[name.strip()] = value.strip()
    return out


def source_overrides(p: VerifyParameters) -> dict[str, str]:
    """The source's variables: ``settings``, then ``source_url`` as the source's own URL variable."""
    overrides = parse_settings(p.settings)
    if p.source_url:
        variable = SOURCE_URL_VARIABLES.get(p.source)
        if variable is None:
            raise UsageError(
                "source_url", p.source_url, f"{p.source} has no known URL variable; set it in settings"
            )
        overrides[variable] = p.source_url
    return overrides


def certify_options(p: VerifyParameters) -> CertifyOptions:
    """The parameters as :class:`CertifyOptions`, checked (a :class:`UsageError` names a bad one)."""
    both_or_neither("source_url", p.source_url, "pgvector_url", p.pgvector_url)
    legacy = p.source == LEGACY_SOURCE
    overrides = source_overrides(p)
    bars = parse_recall_bars(p.min_recall_by_bucket)
    options = CertifyOptions(
        p.source_url if legacy and p.source_url else None,
        p.pgvector_url or None,
        table=p.table,
        source=p.source,
        env=environment(overrides),
        expected_dimensions=p.expected_dimensions or None,
        expected_model=p.expected_model or None,
        embedder=p.embedder or None,
        vector_sample=p.sample_size,
        k=p.k,
        leaf=p.range_size,
        retrieval=p.retrieval,
        users_per_bucket=p.users_per_bucket,
        min_recall=p.min_recall,
        min_recall_by_bucket=dict(bars),
        max_underfill=p.max_underfill,
        tolerances=parse_tolerances(p.tolerances),
        allow_quarantined=p.allow_quarantined,
    )
    try:
        options.check()
    except UsageError as exc:  # the notebook's names, not the options' (leaf is range_size there)
        renamed = {"leaf": "range_size", "vector_sample": "sample_size"}
        if exc.field in renamed:
            raise UsageError(renamed[exc.field], exc.value, exc.problem) from None
        if exc.field.startswith("min_recall[") or (exc.field == "min_recall" and exc.value in bars):
            raise UsageError(
                "min_recall_by_bucket", p.min_recall_by_bucket, f"{exc.value} {exc.problem}"
            ) from None
        raise
    return options


def verify_from_parameters(
    parameters: VerifyParameters, *, sample_migration: SampleMigration | None = None
) -> Certificate:
    """The certificate of the notebook's parameters. ``source_url`` is the legacy table's database
    for ``legacy-mysql``, any other built-in source's URL variable (``local:/path`` or a server for
    ``qdrant``); the source's other variables come from ``settings``, then the environment. With neither URL,
    ``sample_migration`` (the samples' builder, handed in by the notebook) builds one first, and the
    certificate's notes say so. Giving only one URL is a usage error."""
    options = certify_options(parameters)
    built = None
    if not parameters.source_url and sample_migration is not None and options.legacy:
        built = sample_migration()
        options.source_url, options.dest_url, options.table = built.source_url, built.dest_url, built.table
    cert = certify(options)
    if built is not None:
        cert.notes.insert(0, f"built a sample migration: {built.active} active items -> {built.dest_url}")
    return cert
