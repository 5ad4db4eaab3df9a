"""Migrate from any backend that can list its memories: sources, the import run and its verification.

``source`` (the :class:`~memwork.migrate.source.Source` protocol and the source registry) -> ``run``
(pages -> the pgvector backfill's checkpointed, idempotent writer) -> ``verify`` (the copy against the
source: counts per user, missing/extra ids, content checksums).
"""
