"""Small legacy -> pgvector migrations built on demand: for notebooks' defaults, tests and the demo.

A notebook whose URLs are left empty must still run standalone (``pytest --nbval-lax notebooks/``);
:func:`build_migration` gives it a generated legacy store, a schema and a real backfill. With
``dataset="stdlib"`` the legacy store holds real human-written text instead (the standard library's
docstrings, :mod:`memwork.samples.real_text`), so a gate can be judged on more than templates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from memwork.embed import Embedder, HashEmbedder
from memwork.errors import UsageError
from memwork.samples import process_temp_folder


@dataclass(frozen=True)
class Migration:
    """Where a built migration lives."""

    source_url: str
    dest_url: str
    table: str
    dimensions: int
    model_id: str
    items: int
    active: int
    backfill: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def build_migration(
    source_url: str | None = None,
    dest_url: str | None = None,
    *,
    n_users: int = 8,
    items_per_user: int = 25,
    dimensions: int = 64,
    table: str = "memory_embeddings",
    seed: int = 7,
    vector_index: bool = True,
    rows: list[dict[str, Any]] | None = None,
    embedder: Embedder | None = None,
    dataset: Literal["generated", "stdlib"] = "generated",
) -> Migration:
    """Generate legacy items, load them, create the pgvector table and backfill it.

    ``dataset``: ``generated`` (templates, ``n_users`` x ``items_per_user``) or ``stdlib`` (real text: the
    first paragraphs of the standard library's docstrings, one module a user, at most ``n_users`` users
    of at most ``items_per_user`` memories each, sizes as the modules have them). ``rows`` overrides both.

    ``embedder`` defaults to the hash embedder of ``dimensions`` (cheap, for tests and notebooks'
    defaults); the demo passes the real model, whose dimension then sets the table's.

    Defaults: a SQLite file in a fresh temp dir and the workspace's embedded PostgreSQL, database
    ``memwork_verify``. The destination table is emptied first, so a rebuild is always a clean copy.
    """
    from memwork.db import pg_connect, pg_value
    from memwork.identifiers import quote_identifier
    from memwork.migrate.backfill import legacy_apply_options, run_backfill
    from memwork.migrate.checkpoint import CHECKPOINT_TABLE
    from memwork.pgvector.schema import ensure_schema
    from memwork.samples.legacy import ITEMS, load_legacy_rows

    if rows is None:
        rows = _dataset_rows(dataset, n_users, items_per_user, seed)  # bad input refused before any I/O
    if source_url is None:
        source_url = f"sqlite:///{process_temp_folder('memwork-legacy-') / 'legacy.db'}"
    dest_url = dest_url or "pg://embedded/memwork_verify"
    load_legacy_rows(source_url, ITEMS, rows, replace=True)
    embedder = embedder or HashEmbedder(dimensions)
    dimensions = embedder.dimension
    ensure_schema(dest_url, table=table, dimensions=dimensions, create_vector_index=vector_index)
    with pg_connect(dest_url, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {quote_identifier(table)}")
        if pg_value(conn, "SELECT to_regclass(%s)", (CHECKPOINT_TABLE,)) is not None:
            conn.execute(
                f"DELETE FROM {quote_identifier(CHECKPOINT_TABLE)} WHERE target_table = %s", (table,)
            )
    report = run_backfill(legacy_apply_options(source_url, dest_url, embedder, table=table, batch_size=2000))
    active = sum(1 for r in rows if r["status"] == "active")
    return Migration(
        source_url, dest_url, table, dimensions, embedder.model_id, len(rows), active, _plain(report)
    )


DATASETS = ("generated", "stdlib")


def _dataset_rows(dataset: str, n_users: int, items_per_user: int, seed: int) -> list[dict[str, Any]]:
    from memwork.samples.legacy import generate_legacy_items
    from memwork.samples.real_text import stdlib_legacy_items

    if dataset == "generated":
        return generate_legacy_items(n_users, items_per_user, seed=seed)
    if dataset == "stdlib":
        return stdlib_legacy_items(seed=seed, max_users=n_users, max_per_user=items_per_user)
    raise UsageError("dataset", dataset, f"must be one of {', '.join(DATASETS)}")


def _plain(report: Any) -> dict[str, Any]:
    to_dict = getattr(report, "to_dict", None)
    return to_dict() if callable(to_dict) else dict(getattr(report, "__dict__", {}))
