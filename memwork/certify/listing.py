"""A source side for sources without SQL (Qdrant, Letta, Redis streams, ...): checksums through a listing.

:class:`ListingSide` answers the same questions as :class:`~memwork.certify.sides.SourceSide` from a
function that lists the source's rows (each a mapping with ``id``/``user_id``/``content``/... as the
destination stores them), hashing each row with :func:`~memwork.certify.canonical.row_hash` as it
streams by: only per-bucket sums are kept, never the rows. A source cannot checksum itself, so each
question costs one listing; the bisection still asks O(log n) of them per bad user, and a clean
verification costs one listing of the source and one checksum pass in PostgreSQL.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from memwork.certify.canonical import canonical_timestamp, hash_parts, row_hash
from memwork.certify.sides import Bucket, Checksum

if TYPE_CHECKING:
    from memwork.contracts import Source

Listing = Callable[[], Iterable[Mapping[str, Any]]]
LISTING_PAGE = 1000


def source_listing(source: Source, key: str, *, page_size: int = LISTING_PAGE) -> Listing:
    """A migration source's whole listing (:func:`~memwork.migrate.source.iter_pages`) as the rows an
    import writes (:func:`~memwork.migrate.rows.convert_record` under the source ``key``), so both
    sides hash the same text. A record the import could not convert is left out (it was quarantined,
    and the certificate counts quarantined keys apart); a record without any timestamp is stamped
    with the listing's time, as the import stamped it with its own -- such a source is reported
    ``changed`` on ``created_at``."""
    from memwork.migrate.rows import convert_record
    from memwork.migrate.source import iter_pages

    def listing() -> Iterator[Mapping[str, Any]]:
        now = datetime.now(UTC)
        for page, _ in iter_pages(source, None, page_size):
            for record in page.records:
                row = convert_record(record, key, now)
                if isinstance(row, Mapping):
                    yield row

    return listing


class ListingSide:
    """The source side of a certificate, computed in Python from a streamed listing."""

    def __init__(self, listing: Listing) -> None:
        self.listing = listing
        self.round_trips = 0
        self.table = "(listing)"

    def _rows(self, bucket: Bucket) -> Iterable[tuple[str, str, Mapping[str, Any]]]:
        self.round_trips += 1
        for row in self.listing():
            key, user = str(row.get("key", row.get("id"))), str(row.get("user", row.get("user_id")))
            if row.get("status", "active") != "active":
                continue
            if bucket.user is not None and user != bucket.user:
                continue
            if bucket.prefix and not _md5(key).startswith(bucket.prefix):
                continue
            yield key, user, row

    def checksums(self, bucket: Bucket) -> dict[str, Checksum]:
        sums: dict[str, list[int]] = {}
        for key, user, row in self._rows(bucket):
            group = user if bucket.user is None else _md5(key)[: len(bucket.prefix) + 1]
            one, two = hash_parts(row_hash(row))
            total = sums.setdefault(group, [0, 0, 0])
            total[0] += 1
            total[1] += one
            total[2] += two
        return {g: (n, a, b) for g, (n, a, b) in sums.items()}

    def total(self) -> Checksum:
        n = a = b = 0
        for _, _, row in self._rows(Bucket()):
            one, two = hash_parts(row_hash(row))
            n, a, b = n + 1, a + one, b + two
        return n, a, b

    def row_hashes(self, bucket: Bucket) -> dict[str, str]:
        return {key: row_hash(row) for key, _, row in self._rows(bucket)}

    def rows(self, keys: Iterable[str], *, any_status: bool = False) -> dict[str, dict[str, Any]]:
        wanted = set(keys)
        if not wanted:
            return {}
        self.round_trips += 1
        out: dict[str, dict[str, Any]] = {}
        for row in self.listing():
            key = str(row.get("key", row.get("id")))
            if key in wanted and (any_status or row.get("status", "active") == "active"):
                out[key] = {"key": key, "status": row.get("status", "active"), **row}
        return out

    def high_water_mark(self) -> str | None:
        """The latest ``updated_at`` the listing shows (None when it has none)."""
        self.round_trips += 1
        stamps = (canonical_timestamp(r.get("updated_at")) for r in self.listing() if r.get("updated_at"))
        return max((s for s in stamps if s), default=None)

    def changed_after(self, mark: str | None) -> int:
        if mark is None:
            return 0
        self.round_trips += 1
        return sum(1 for r in self.listing() if (canonical_timestamp(r.get("updated_at")) or "") > mark)


def _md5(key: str) -> str:
    return hashlib.md5(key.encode("utf-8")).hexdigest()
