"""What a backfill run is asked to do and what it reports: options, the keyset cursor, the report."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memwork.embed import Embedder
from memwork.entry import as_utc
from memwork.errors import UsageError
from memwork.identifiers import check_identifier
from memwork.pgvector.schema import DEFAULT_TABLE

DEFAULT_BATCH_SIZE = 500


MAX_BATCH_SIZE = 50_000


#: MySQL's text of a DATETIME (``CAST(updated_at AS CHAR)``), also one that is no date at all: with the
#: default ``sql_mode`` MariaDB stores zero and partial dates (``0000-00-00``, ``2024-00-15``)
_MYSQL_DATETIME_RE = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d{1,6})?")


@dataclass(frozen=True, order=True)
class Cursor:
    """A keyset position ``(updated_at, id)``: rows strictly after it come next. Naive UTC, like MySQL.

    ``text``: MySQL's own text of an ``updated_at`` that is no datetime (a zero or partial date,
    which sorts before or between real ones); the keyset binds it as it is, so such a row is passed
    like any other (``updated_at`` is then :data:`datetime.min`, for display only)."""

    updated_at: datetime
    id: str
    text: str | None = field(default=None, compare=False)

    @classmethod
    def parse(cls, updated_at: object, id: object = "") -> Cursor:
        """From CLI/JSON values: ISO 8601 text or epoch seconds (``0`` = the beginning), and an id."""
        if not isinstance(id, str):
            raise UsageError("cursor_id", id, "must be a string")
        if isinstance(updated_at, str) and updated_at.strip().lstrip("-").replace(".", "", 1).isdigit():
            updated_at = float(updated_at)
        try:
            moment = as_utc(updated_at)
        except (UsageError, OverflowError, OSError, ValueError):
            if isinstance(updated_at, str) and _MYSQL_DATETIME_RE.fullmatch(updated_at.strip()):
                return cls(datetime.min, id, updated_at.strip())  # a zero or partial MySQL date
            raise UsageError("cursor_updated_at", updated_at, "must be ISO 8601 or epoch seconds") from None
        return cls(moment.astimezone(UTC).replace(tzinfo=None), id)

    def to_json(self) -> dict[str, str]:
        shown = self.text if self.text is not None else self.updated_at.isoformat(timespec="microseconds")
        return {"updatedAt": shown, "id": self.id}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Cursor:
        return cls.parse(data.get("updatedAt"), data.get("id", ""))

    def bound(self) -> datetime | str:
        """The value the keyset compares ``updated_at`` with (MySQL's text for a zero date)."""
        return self.text if self.text is not None else self.updated_at

    def follows(self, earlier: Cursor) -> bool:
        """False when this cursor, taken after ``earlier``, did not move forward: the same position,
        or an earlier ``updated_at`` (ids are compared by the database's collation, not here)."""
        if self.text is not None or earlier.text is not None:
            return (self.text, self.updated_at, self.id) != (earlier.text, earlier.updated_at, earlier.id)
        if self.updated_at != earlier.updated_at:
            return self.updated_at > earlier.updated_at
        return self.id != earlier.id


def cursor_of(row: Mapping[str, Any]) -> Cursor:
    """The keyset position of a source row (where the next page starts); a zero or partial MySQL date
    keeps MySQL's text (see :class:`Cursor`)."""
    value = row["updated_at"]
    try:
        return Cursor(row_timestamp(value), row["id"])
    except ValueError:
        return Cursor(datetime.min, row["id"], str(value))


def row_timestamp(value: datetime | str) -> datetime:
    """MySQL's ``CAST(datetime AS CHAR)`` text (or a datetime) as a naive UTC datetime.

    ValueError for a text that is no date (MySQL's ``0000-00-00``)."""
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


@dataclass
class BackfillOptions:
    """What one backfill run does. Dry run (``apply=False``) needs only ``mysql_url``."""

    mysql_url: str | None = None
    database_url: str | None = None
    apply: bool = False
    embedder: Embedder | None = None
    table: str = DEFAULT_TABLE
    batch_size: int = DEFAULT_BATCH_SIZE
    limit: int | None = None
    cursor: Cursor | None = None
    resume: bool = False
    prune_inactive: bool = False
    sample_size: int = 5
    checkpoint_path: Path | None = None

    @classmethod
    def one_off(
        cls,
        mysql_url: str,
        database_url: str,
        embedder: Embedder,
        *,
        table: str = DEFAULT_TABLE,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> BackfillOptions:
        """An applying run with its checkpoint file in a fresh temporary folder, so it never resumes
        from (or disturbs) the workspace's checkpoint: the sample migrations and the benchmark."""
        checkpoint = Path(tempfile.mkdtemp(prefix="memwork-ckpt-")) / "checkpoint.json"
        return cls(
            mysql_url=mysql_url,
            database_url=database_url,
            apply=True,
            embedder=embedder,
            table=table,
            batch_size=batch_size,
            checkpoint_path=checkpoint,
        )

    def validate(self, *, require_embedder: bool = True) -> None:
        """Every input problem as one usage error naming the field and value, before any I/O.

        The CLI checks everything else first (``require_embedder=False``) so a bad flag is reported
        before a large model is loaded."""
        check_identifier(self.table)
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int):
            raise UsageError("batch_size", self.batch_size, "must be an integer")
        if not 1 <= self.batch_size <= MAX_BATCH_SIZE:
            raise UsageError("batch_size", self.batch_size, f"must be from 1 to {MAX_BATCH_SIZE}")
        if self.limit is not None and (isinstance(self.limit, bool) or self.limit < 1):
            raise UsageError("limit", self.limit, "must be a positive integer")
        if self.resume and self.cursor is not None:
            raise UsageError("resume", True, "cannot be combined with --cursor-updated-at/--cursor-id")
        if not self.mysql_url:
            raise UsageError("mysql_url", self.mysql_url, "set MEMORY_BACKFILL_MYSQL_URL or --mysql-url")
        if not self.apply:
            return
        if not self.database_url:
            raise UsageError(
                "database_url",
                self.database_url,
                "--apply needs MEMORY_PGVECTOR_DATABASE_URL or --database-url",
            )
        if require_embedder and self.embedder is None:
            raise UsageError("embedder", None, "--apply needs --embedder SPEC or --embedding-module PATH")


@dataclass
class BackfillReport:
    """What a run did (or, in a dry run, would do); ``to_dict`` is the ``--json`` output."""

    mode: str
    table: str
    source: dict[str, int] = field(default_factory=dict)
    planned: int = 0
    rows_read: int = 0
    rows_written: int = 0
    batches: int = 0
    start_cursor: dict[str, str] | None = None
    first_checkpoint: dict[str, str] | None = None
    last_checkpoint: dict[str, str] | None = None
    resumed: bool = False
    sample: list[dict[str, Any]] = field(default_factory=list)
    model: str | None = None
    dimensions: int | None = None
    inactive: dict[str, Any] | None = None
    models_in_table: dict[str, int] | None = None
    elapsed_seconds: float = 0.0
    rows_per_second: float = 0.0
    checkpoint_file: str | None = None
    run_id: str | None = None
    rows_quarantined: int = 0
    quarantined: list[dict[str, str]] = field(default_factory=list)  # the first few {id, reason}
    rejects_table: str | None = None
    rejects_total: int | None = None  # rejects recorded for the table, this run's and earlier ones
    owned_elsewhere: int = 0  # of rows_quarantined: ids another source owns (not overwritten or deleted)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        return {_camel(k): v for k, v in data.items()}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)
