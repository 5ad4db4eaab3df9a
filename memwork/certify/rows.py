"""Rows: per-user checksums on both sides, bisection of every bad bucket down to single rows, and each
bad row named with its kind and the fields that differ.

Kinds (each one a failure unless said otherwise):

* ``missing`` -- active in the source, absent from the destination;
* ``quarantined`` -- missing, but listed in the rejects table (the writer refused it, with a reason);
* ``extra`` -- in the destination, not in the source at all;
* ``status`` -- in the destination while the source row is no longer ``active``;
* ``changed`` -- in both, fields differ (``fields`` names them, with both values);
* ``user-changed`` -- in both, the user differs: **critical**, a row served to the wrong person;
* ``after-boundary`` -- any of the above for a row the source changed after the run's high-water
  mark: reported apart, not a failure (a live source gives no false mismatch).

Rows whose texts differ only in encoding (Unicode NFC, JSON escapes) are notes (``encoding``), never
failures.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any, TypeVar

from memwork.certify.canonical import canonical_timestamp, differing_fields
from memwork.certify.sides import Bucket, Checksum, DestSide, RowSource

T = TypeVar("T")
U = TypeVar("U")
DEFAULT_LEAF = 256  #: a bucket this small (both sides) is compared row hash by row hash
CRITICAL_KINDS = ("user-changed",)
#: every kind a bad row can have (a tolerance ``max_<kind>`` must name one of them)
ROW_KINDS = ("missing", "quarantined", "extra", "status", "changed", "user-changed")


@dataclass
class BadRow:
    """One discrepancy: the key, its user(s), the kind and the differing fields."""

    key: str
    kind: str
    user: str | None
    fields: dict[str, dict[str, Any]] = field(default_factory=dict)
    dest_user: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class UserTally:
    """One user's counts on both sides and the ids that went wrong."""

    source: int = 0
    dest: int = 0
    checksum_ok: bool = True
    #: each side's checksum of the user's rows (rows, sum of hash bits 0-31, 32-63); None: no rows
    source_checksum: Checksum | None = None
    dest_checksum: Checksum | None = None
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.checksum_ok and not (self.missing or self.extra or self.changed)


@dataclass
class RowsReport:
    """What the row comparison found."""

    source_rows: int = 0
    dest_rows: int = 0
    dest_unkeyed: int = 0
    users: dict[str, UserTally] = field(default_factory=dict)
    bad: list[BadRow] = field(default_factory=list)
    after_boundary: list[BadRow] = field(default_factory=list)
    high_water_mark: str | None = None
    changed_after_mark: int = 0
    resume_picks_up: bool | None = None
    notes: list[str] = field(default_factory=list)
    buckets_compared: int = 0
    round_trips: int = 0
    #: each side's table checksum: the SHA-256 of its per-user checksums (the input fingerprint a
    #: later verification is compared by: equal checksums, the same rows field for field)
    source_checksum: str = ""
    dest_checksum: str = ""
    #: where the source's checksums were computed: ``sql`` (in its database), ``python`` (its rows
    #: streamed and hashed here: a MySQL without JSON_NORMALIZE) or ``listing`` (a non-SQL source)
    source_checksums: str = "sql"

    def by_kind(self) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for row in self.bad:
            counts[row.kind] += 1
        return dict(sorted(counts.items()))

    @property
    def bad_users(self) -> list[str]:
        return sorted(u for u, t in self.users.items() if not t.ok)


def table_checksum(per_user: Mapping[str, Checksum]) -> str:
    """One side's whole-table checksum from its per-user checksums (order-free, users sorted)."""
    canonical = json.dumps(sorted((str(u), list(c)) for u, c in per_user.items()), separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def _both(first: Callable[[], T], second: Callable[[], U]) -> tuple[T, U]:
    """Run the source's and the destination's query at once: the wall time is the slower one, not the sum."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        later = pool.submit(second)
        return first(), later.result()


@dataclass
class ScannedRows:
    """What the per-user pass over some users found, before any row is classified: both sides'
    per-user checksums and each bad key with its user. Several of these (key-range partitions)
    merge into the one a single pass gives: their users are disjoint."""

    source: dict[str, Checksum] = field(default_factory=dict)
    dest: dict[str, Checksum] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)  #: key -> user (source side)
    extra: dict[str, str] = field(default_factory=dict)  #: key -> user (destination side)
    changed: dict[str, str] = field(default_factory=dict)
    buckets_compared: int = 0
    round_trips: int = 0

    @classmethod
    def merged(cls, parts: list[ScannedRows]) -> ScannedRows:
        """The partitions' findings as one (given in partition order; every dict keyed disjointly)."""
        out = cls()
        for part in parts:
            _join(out.source, part.source)
            _join(out.dest, part.dest)
            _join(out.missing, part.missing)
            _join(out.extra, part.extra)
            _join(out.changed, part.changed)
            out.buckets_compared += part.buckets_compared
            out.round_trips += part.round_trips
        return out


def _join(mine: dict[str, T], theirs: Mapping[str, T]) -> None:
    """``theirs`` into ``mine``; partitions hold disjoint users, so a shared key is a planning bug."""
    shared = mine.keys() & theirs.keys()
    if shared:
        raise ValueError(f"key ranges overlap: {sorted(shared)[:3]}")
    mine.update(theirs)


def _bisect(
    source: RowSource,
    dest: DestSide,
    user: str,
    counts: tuple[int, int],
    leaf: int,
    found: ScannedRows,
) -> None:
    """The missing, extra and changed keys of one user whose checksum disagreed, into ``found``."""
    stack: list[tuple[str, int, int]] = [("", *counts)]
    while stack:
        prefix, s_n, d_n = stack.pop()
        bucket = Bucket(user, prefix)
        found.buckets_compared += 1
        if max(s_n, d_n) <= leaf or len(prefix) >= 32:
            s, d = _both(partial(source.row_hashes, bucket), partial(dest.row_hashes, bucket))
            found.missing.update(dict.fromkeys(s.keys() - d.keys(), user))
            found.extra.update(dict.fromkeys(d.keys() - s.keys(), user))
            found.changed.update(dict.fromkeys((k for k in s.keys() & d.keys() if s[k] != d[k]), user))
            continue
        s_sums, d_sums = _both(partial(source.checksums, bucket), partial(dest.checksums, bucket))
        for child in sorted(s_sums.keys() | d_sums.keys()):
            a, b = s_sums.get(child), d_sums.get(child)
            if a != b:
                stack.append((child, a[0] if a else 0, b[0] if b else 0))


def user_checksums(source: RowSource, dest: DestSide, bucket: Bucket | None = None) -> ScannedRows:
    """Both sides' per-user checksums of ``bucket``'s users (default all; or one key range), at once."""
    bucket = bucket or Bucket()
    trips = source.round_trips + dest.round_trips
    s_users, d_users = _both(partial(source.checksums, bucket), partial(dest.checksums, bucket))
    return ScannedRows(s_users, d_users, round_trips=source.round_trips + dest.round_trips - trips)


def bisect_users(
    source: RowSource,
    dest: DestSide,
    found: ScannedRows,
    *,
    leaf: int = DEFAULT_LEAF,
    on_user: Callable[[str], None] | None = None,
) -> ScannedRows:
    """Every user whose checksums disagree bisected down to its bad keys (users in sorted order)."""
    trips = source.round_trips + dest.round_trips
    for user in sorted(found.source.keys() | found.dest.keys()):
        a, b = found.source.get(user), found.dest.get(user)
        if a == b:
            continue
        if on_user is not None:
            on_user(user)
        _bisect(source, dest, user, (a[0] if a else 0, b[0] if b else 0), leaf, found)
    found.round_trips += source.round_trips + dest.round_trips - trips
    return found


def compare_rows(
    source: RowSource,
    dest: DestSide,
    *,
    leaf: int = DEFAULT_LEAF,
    high_water_mark: str | None = None,
    rejects: set[str] | None = None,
    checkpoint_cursor: str | None = None,
    on_user: Callable[[str], None] | None = None,
    scanned: ScannedRows | None = None,
) -> RowsReport:
    """Checksum both sides per user, bisect every disagreeing user, classify each bad row.

    ``scanned``: the per-user pass already made elsewhere (key-range partitions run by an executor,
    merged): only the classification runs here, on ``source`` and ``dest`` -- the same as one pass."""
    report = RowsReport(high_water_mark=high_water_mark, source_checksums=source.checksums_in)
    remote = 0
    if scanned is None:
        scanned = bisect_users(source, dest, user_checksums(source, dest), leaf=leaf, on_user=on_user)
    else:
        remote = scanned.round_trips
    s_users, d_users = scanned.source, scanned.dest
    report.source_rows = sum(c[0] for c in s_users.values())
    report.dest_rows = sum(c[0] for c in d_users.values())
    report.source_checksum, report.dest_checksum = table_checksum(s_users), table_checksum(d_users)
    report.dest_unkeyed = dest.unkeyed()
    report.buckets_compared = scanned.buckets_compared
    for user in sorted(s_users.keys() | d_users.keys()):
        a, b = s_users.get(user), d_users.get(user)
        report.users[user] = UserTally(
            source=a[0] if a else 0,
            dest=b[0] if b else 0,
            checksum_ok=a == b,
            source_checksum=a,
            dest_checksum=b,
        )
    _classify(report, source, dest, scanned.missing, scanned.extra, scanned.changed, rejects or set())
    _set_boundary_apart(report, source, dest, checkpoint_cursor)
    for row in report.bad + report.after_boundary:
        if row.kind in ("missing", "quarantined"):
            report.users[str(row.user)].missing.append(row.key)
        elif row.kind in ("extra", "status"):
            report.users[str(row.dest_user)].extra.append(row.key)
        else:
            for name in {row.user, row.dest_user} - {None}:
                report.users[str(name)].changed.append(row.key)
    report.round_trips = source.round_trips + dest.round_trips + remote
    return report


def _classify(
    report: RowsReport,
    source: RowSource,
    dest: DestSide,
    missing: dict[str, str],
    extra: dict[str, str],
    changed: dict[str, str],
    rejects: set[str],
) -> None:
    moved = missing.keys() & extra.keys()  # under one user in the source, another in the destination
    both = sorted(moved | changed.keys())
    s_rows = source.rows(both)
    d_rows = dest.rows(both)
    for key in both:
        fields = differing_fields(s_rows[key], d_rows[key])
        s_user, d_user = str(s_rows[key]["user_id"]), str(d_rows[key]["user_id"])
        if not fields:
            report.notes.append(f"encoding: {key} differs only in encoding (Unicode NFC or JSON escapes)")
            continue
        kind = "user-changed" if "user" in fields else "changed"
        report.bad.append(BadRow(key, kind, s_user, fields, dest_user=d_user))
    gone = sorted(k for k in extra if k not in moved)
    inactive = source.rows(gone, any_status=True)
    for key in gone:
        row = inactive.get(key)
        if row is not None:
            fields = {"status": {"source": row["status"], "dest": "active (present)"}}
            report.bad.append(BadRow(key, "status", None, fields, dest_user=extra[key]))
        else:
            report.bad.append(BadRow(key, "extra", None, dest_user=extra[key]))
    for key in sorted(k for k in missing if k not in moved):
        kind = "quarantined" if key in rejects else "missing"
        report.bad.append(BadRow(key, kind, missing[key]))
    report.bad.sort(key=lambda r: (r.kind not in CRITICAL_KINDS, r.kind, r.key))


def _set_boundary_apart(
    report: RowsReport, source: RowSource, dest: DestSide, checkpoint_cursor: str | None
) -> None:
    """Bad rows the source changed after the high-water mark are reported apart, not failed."""
    mark = report.high_water_mark
    if mark is None:
        return
    report.changed_after_mark = source.changed_after(mark)
    if not report.bad:
        return
    keys = [r.key for r in report.bad]
    s_rows = source.rows(keys, any_status=True)
    late: list[BadRow] = []
    kept: list[BadRow] = []
    stamps: list[str] = []
    for row in report.bad:
        # the source is what changes live; a destination stamp proves nothing
        source_row = s_rows.get(row.key)
        stamp = canonical_timestamp(source_row["updated_at"]) or "" if source_row else ""
        if stamp > mark:
            late.append(row)
            stamps.append(stamp)
        else:
            kept.append(row)
    report.bad, report.after_boundary = kept, late
    if late and checkpoint_cursor is not None:
        report.resume_picks_up = all(s > checkpoint_cursor for s in stamps)
