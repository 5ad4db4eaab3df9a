"""A vector in pgvector's binary wire form, made in Python and sent to PostgreSQL as it is.

The migration packs a page of vectors at once with numpy (:func:`memwork.migrate.writer._pack_vectors`)
and a resolve packs its query vector with one ``struct`` call
(:func:`memwork.backends.pgvector.packed_vector`): both skip pgvector-python's per-value dumper. The
form is ``>HH`` (dimension, 0) then the ``>f4`` values; :func:`register_packed_vector_dumper` makes a
connection send :class:`PackedVector` bytes (and, in a COPY whose column types are set, slices of one
packed buffer) under the ``vector`` type without touching them.
"""

from __future__ import annotations

from typing import Any

import psycopg


class PackedVector(bytes):
    """A vector already in pgvector's binary wire form (``>HH`` dimension, 0, then ``>f4`` values)."""


def register_packed_vector_dumper(conn: psycopg.Connection[Any], vector_oid: int) -> None:
    """On ``conn`` only, dump :class:`PackedVector` (and bytes-like values in a COPY typed ``vector``)
    as they are, in binary, under ``vector_oid``: psycopg's own binary bytes dumper."""
    from psycopg.types.string import BytesBinaryDumper

    class PackedVectorDumper(BytesBinaryDumper):
        """The bytes as they are: already the wire form."""

    PackedVectorDumper.oid = vector_oid
    conn.adapters.register_dumper(PackedVector, PackedVectorDumper)
