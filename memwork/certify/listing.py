"""A source side for sources without SQL (Qdrant, Letta, Redis streams, ...): checksums through a listing.

:class:`ListingSide` answers the same questions as :class:`~memwork.certify.sides.SourceSide` from a
function that lists the source's rows (each a mapping with ``id``/``user_id``/``content``/... as the
destination stores them), hashing each row with :func:`~memwork.certify.canonical.row_hash` as it
streams by: only per-bucket sums are kept, never the rows. A source cannot checksum itself, so each
question costs one listing; the bisection still asks O(log n) of them per bad user, and a clean
verification costs one listing of the source and one checksum pass in PostgreSQL.

:class:`RecordListing` is that listing for every registered source but the legacy table (whose SQL
side is :class:`~memwork.certify.sides.SourceSide`): the source's records mapped by the importer's own
code, so the certificate compares what the importer should have written with what it did.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from memwork.certify.canonical import canonical_timestamp, hash_parts, key_md5, row_hash
from memwork.certify.sides import Bucket, Checksum
from memwork.contracts import Source, SourceRecord

Listing = Callable[[], Iterable[Mapping[str, Any]]]


class ListingSide:
    """The source side of a certificate, computed in Python from a streamed listing."""

    def __init__(self, listing: Listing) -> None:
        self.listing = listing
        self.round_trips = 0
        self.table = "(listing)"
        self.checksums_in = "listing"

    def _rows(self, bucket: Bucket) -> Iterable[tuple[str, str, Mapping[str, Any]]]:
        self.round_trips += 1
        for row in self.listing():
            key, user = str(row.get("key", row.get("id"))), str(row.get("user", row.get("user_id")))
            if row.get("status", "active") != "active":
                continue
            if bucket.user is not None and user != bucket.user:
                continue
            if bucket.user is None and bucket.users is not None and user not in bucket.users:
                continue
            if bucket.prefix and not key_md5(key).startswith(bucket.prefix):
                continue
            yield key, user, row

    def checksums(self, bucket: Bucket) -> dict[str, Checksum]:
        sums: dict[str, list[int]] = {}
        for key, user, row in self._rows(bucket):
            group = user if bucket.user is None else key_md5(key)[: len(bucket.prefix) + 1]
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


# ---- a registered source's records, mapped exactly as the importer writes them ---------------------
class RecordListing:
    """Every record of a :class:`~memwork.contracts.Source`, read page by page from the start on each
    call, as the destination row the importer writes for it (:func:`memwork.migrate.rows.convert_record`,
    the importer's own mapping, with the last record of an id in a page kept as the importer keeps it).

    A record the importer could not convert is listed by its id alone (so it is *missing*, and
    *quarantined* when the rejects table holds it). A record without any timestamp is written with the
    run's start time, which the source does not know: those two fields are taken from the destination
    row (``stamps``, asked once per page for such keys) and so never differ."""

    def __init__(
        self,
        source: Source,
        source_key: str,
        page_size: int,
        stamps: Callable[[list[str]], dict[str, tuple[Any, Any]]] | None = None,
    ) -> None:
        self.source, self.source_key, self.page_size = source, source_key, page_size
        self.stamps = stamps
        self._filled: dict[str, tuple[Any, Any]] = {}
        self._asked: set[str] = set()

    def records(self) -> Iterator[list[SourceRecord]]:
        """Each page's records, from the first page to the end."""
        from memwork.migrate.source import iter_pages

        for page, _cursor in iter_pages(self.source, None, self.page_size):
            yield list(page.records)

    def __call__(self) -> Iterator[dict[str, Any]]:
        from memwork.migrate.rows import convert_record, last_of_each_id

        for records in self.records():
            pairs = last_of_each_id([(convert_record(r, self.source_key, _NO_TIME), r) for r in records])
            rows = [self._row(item, record) for item, record in pairs]
            self._fill_stamps(rows)
            yield from rows

    def _row(self, item: Any, record: SourceRecord) -> dict[str, Any]:
        from memwork.migrate.quarantine import Reject

        if isinstance(item, Reject):
            return {"id": item.id, "user_id": str(getattr(record, "user_id", "") or ""), "content": None}
        row = dict(item)
        if record.created_at is None and record.updated_at is None:
            row["created_at"] = row["updated_at"] = None
            row["_unstamped"] = True
        return row

    def _fill_stamps(self, rows: list[dict[str, Any]]) -> None:
        wanted = [r["id"] for r in rows if r.get("_unstamped") and r["id"] not in self._asked]
        if wanted and self.stamps is not None:
            self._filled.update(self.stamps(wanted))
            self._asked.update(wanted)
        for row in rows:
            if row.pop("_unstamped", False) and row["id"] in self._filled:
                row["created_at"], row["updated_at"] = self._filled[row["id"]]


#: the importer's ``now`` for a record without timestamps; replaced by the destination's (see above)
_NO_TIME = datetime(2000, 1, 1, tzinfo=UTC)
