"""The PostgreSQL + pgvector destination itself: ``schema`` (the embeddings table), ``wire`` (a vector
packed in pgvector's binary form, sent as it is) and the query-embedding modules ``local_hash`` and
``minilm`` named by ``MEMORY_PGVECTOR_EMBEDDING_MODULE``.

Moving memories into it is :mod:`memwork.migrate` (every source, the legacy table's too); the runtime
adapter is :mod:`memwork.backends.pgvector`; its smoke and the rollout's canaries are in
:mod:`memwork.rollout`.
"""
