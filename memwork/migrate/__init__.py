"""Migrate from any backend that can list its memories: sources, the import run and its verification.

``source`` (paging any :class:`~memwork.contracts.Source` to the end) -> ``run``
(pages -> the pgvector backfill's checkpointed, idempotent writer) -> ``verify`` (the copy against the
source: counts per user, missing/extra ids, content checksums).
"""
