"""Moving memories into pgvector, one way for every source (the legacy table ``legacy-mysql`` included).

``source`` (paging any :class:`~memwork.contracts.Source` to the end; ``legacy_mysql``: the legacy table as
a source with a fast row path) -> ``rows`` (a record as the writer's row) and ``quarantine`` (what cannot
be written, and why) -> ``writer`` (COPY + upsert + ``checkpoint`` in one transaction, on its own thread,
under ``ownership``'s rule) -> ``reconcile`` (a source's inactive rows, orphans). ``run`` ties them
together under one ``lock``; ``backfill`` is the legacy table's migration under its old name. The
verification of any source's copy is the migration certificate, :mod:`memwork.certify`.
"""
