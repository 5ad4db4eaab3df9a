"""MySQL ``h5_user_memory_items`` -> pgvector ``memory_embeddings``, as a pipeline called from :mod:`.run`.

``options`` (what to do, the cursor, the report) -> ``reader`` (keyset pages from MySQL) -> ``quarantine``
(pre-check and embed, poison rows set aside) -> ``writer`` (COPY + upsert + ``checkpoint`` in one transaction)
-> ``reconcile`` (inactive and orphan rows). The parts never call back up into ``run``. ``ownership`` is the
rule every writer of a destination table applies (the import and the smoke check too): a row belongs to the
source that wrote it, and no other source overwrites or deletes it.
"""

from memwork.pgvector.backfill.checkpoint import checkpoint_path, load_checkpoint, read_json_checkpoint
from memwork.pgvector.backfill.options import (
    DEFAULT_BATCH_SIZE,
    MAX_BATCH_SIZE,
    BackfillOptions,
    BackfillReport,
    Cursor,
)
from memwork.pgvector.backfill.quarantine import (
    MAX_LISTED_REJECTS,
    REJECTS_TABLE,
    Reject,
    load_rejects,
    printable,
    read_rejects,
    rejects_table_sql,
)
from memwork.pgvector.backfill.run import run_backfill
from memwork.pgvector.backfill.writer import STAGE_TABLE

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "MAX_BATCH_SIZE",
    "MAX_LISTED_REJECTS",
    "REJECTS_TABLE",
    "STAGE_TABLE",
    "BackfillOptions",
    "BackfillReport",
    "Cursor",
    "Reject",
    "checkpoint_path",
    "load_checkpoint",
    "load_rejects",
    "printable",
    "read_json_checkpoint",
    "read_rejects",
    "rejects_table_sql",
    "run_backfill",
]
