"""The MySQL -> PostgreSQL + pgvector migration, in one package.

``schema`` (the destination table), ``backfill/`` (the copy), ``verify`` (the post-copy comparison), ``smoke``
(a write/search/delete round trip), ``canary`` (the sign-off run), and the query-embedding modules
``local_hash`` and ``minilm`` named by ``MEMORY_PGVECTOR_EMBEDDING_MODULE``. The runtime adapter itself is
:mod:`memwork.backends.pgvector`.
"""
