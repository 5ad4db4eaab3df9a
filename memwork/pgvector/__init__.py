"""The MySQL -> PostgreSQL + pgvector migration, in one package.

``schema`` (the destination table), ``backfill/`` (the copy), ``verify`` (the post-copy comparison), and the
query-embedding modules ``local_hash`` and ``minilm`` named by ``MEMORY_PGVECTOR_EMBEDDING_MODULE``. The
runtime adapter itself is :mod:`memwork.backends.pgvector`; its smoke and the rollout's canaries are in
:mod:`memwork.rollout`.
"""
