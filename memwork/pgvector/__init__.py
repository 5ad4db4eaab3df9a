"""PostgreSQL + pgvector semantic memory: schema helpers and embedding modules for the canary env.

The adapter itself is :mod:`memwork.backends.pgvector`; the MySQL -> pgvector copy is
:mod:`memwork.backfill`; the post-migration check is :mod:`memwork.smoke`.
"""
