"""The legacy conversation-memory store over SQLAlchemy Core (MySQL/MariaDB via PyMySQL, or SQLite).

* ``save_and_analyze`` (the facade's ``write``) saves the messages, then analyzes the user's pending
  messages: the extractor proposes items, items the user already has are skipped (same slot and
  value, else Jaccard of :func:`memwork.similarity.tokenize`; a new value for a slot is kept), the
  messages are marked analyzed -- one transaction.
* ``analyze_user`` (``compact``) analyzes pending messages, archives superseded items (same
  ``metadata.key``, older) and merges duplicate items (same type, similar text), and reports it all.
* ``resolve`` returns active memories newest first, the profile and the active goals.

Pending messages are read ``FOR UPDATE SKIP LOCKED`` on MariaDB so two concurrent analyzers of one
user never extract the same message twice.

Writes are idempotent without a schema change (the tables are the production's, so memwork adds no
column or key table to them). A message's identity is what the table already stores: user, session,
role, the exact content, and -- when the client sends one -- its own ``createdAt``. A write stores
only the messages of its request that the session does not hold yet (counted as a multiset, so a
request of two "yes" stores a second one only when the session has fewer than two), under a lock on
the session (a locking read on MariaDB, an advisory lock on PostgreSQL, the write lock on SQLite), so
a retry -- or the same write sent twice at once -- never duplicates a message, and gets the same
``messageIds`` back. Without ``createdAt`` the same text sent twice in one session counts as one
message: harmless for memory evidence, and the price of a key the table can check without a new
column.

Every write transaction is applied whole or not at all and says which (:meth:`_transaction`):
anything failing before the commit rolls back and raises :class:`~memwork.errors.NotStored`; under a
deadline (:mod:`memwork.deadline`) the commit gate is asked first, so a write whose caller has
already answered "not stored" rolls back instead of committing later.

Every predicate on a user, session or item id goes through :func:`memwork.legacy.exact.exact_eq`, so
``TenantX`` and ``tenantx`` are two tenants even in a production table collated ``utf8mb4_general_ci``.
"""

from __future__ import annotations

import threading
import uuid
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, RowMapping, and_, delete, func, insert, select, update
from sqlalchemy.exc import DBAPIError

from memwork.db import get_engine, parse_url
from memwork.deadline import current_scope
from memwork.errors import BackendError, CutOff, NotStored, UsageError
from memwork.legacy.exact import exact_eq
from memwork.legacy.extractor import ExtractedItem, Extractor, extract_rules
from memwork.legacy.reader import PROFILE_LIMIT, Reader
from memwork.legacy.schema import ITEM_TYPES, memory_items, messages, metadata
from memwork.redaction import describe_error
from memwork.similarity import find_duplicate_pairs, jaccard, tokenize

DUPLICATE_THRESHOLD = 0.8  #: Jaccard at or above which two items say the same thing
MAX_PENDING_PER_RUN = 1000
DEADLOCK_RETRIES = 2  #: a transaction MariaDB chose as a deadlock victim is run again (time allowing)
MYSQL_DEADLOCK = 1213

R = TypeVar("R")

_clock_lock = threading.Lock()
_last_now = datetime.min


def now() -> datetime:
    """Naive UTC, strictly increasing within the process so newest-first order is total."""
    global _last_now
    with _clock_lock:
        value = datetime.now(UTC).replace(tzinfo=None)
        if value <= _last_now:
            value = _last_now + timedelta(microseconds=1)
        _last_now = value
        return value


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def item_payload(row: Mapping[str, Any]) -> dict[str, Any]:
    """A memory item row in the Memory V2 API's JSON style (camelCase keys, ISO timestamps)."""
    return {
        "id": row["id"],
        "content": row["content"],
        "type": row["type"],
        "confidence": row["confidence"],
        "metadata": row["metadata"] or {},
        "sourceSessionId": row["source_session_id"],
        "sourceMessageId": row["source_message_id"],
        "createdAt": _iso(row["created_at"]),
        "updatedAt": _iso(row["updated_at"]),
    }


def _this_item(row: Mapping[str, Any]) -> Any:
    """The predicate for exactly this item of exactly its user (never a look-alike id)."""
    return and_(exact_eq(memory_items.c.id, row["id"]), exact_eq(memory_items.c.user_id, row["user_id"]))


def _normalise(item: Any) -> ExtractedItem:
    """Accept what a pluggable extractor returns: ExtractedItem or a dict of the same keys."""
    if isinstance(item, ExtractedItem):
        result = item
    elif isinstance(item, Mapping):
        known = {k: item[k] for k in ExtractedItem.__dataclass_fields__ if k in item}
        result = ExtractedItem(**known)
    else:
        raise UsageError("extractor", type(item).__name__, "must yield ExtractedItem or dict items")
    if not isinstance(result.content, str) or not result.content.strip():
        raise UsageError("extractor.content", result.content, "must be non-empty text")
    if result.type not in ITEM_TYPES:
        raise UsageError("extractor.type", result.type, f"must be one of {', '.join(ITEM_TYPES)}")
    return result


def _slot_value(value: Any, polarity: Any) -> tuple[str, str] | None:
    if value is None or not str(value).strip():
        return None
    return (" ".join(str(value).lower().split()), str(polarity or ""))


@dataclass(frozen=True)
class _Known:
    """What the duplicate check compares: the words, and the slot (``metadata.key``) with its value.

    Two statements filling the same slot are the same memory when their values agree ("My name is
    Alice" / "Call me Alice"), and *not* a duplicate when they differ, however similar the wording
    ("I live in New York" / "I live in New York City"): the newer one is an update that compaction
    uses to supersede the older.
    """

    tokens: frozenset[str]
    key: str | None
    value: tuple[str, str] | None  #: normalised (value, polarity); None when the slot has no value

    @classmethod
    def of_row(cls, row: Mapping[str, Any]) -> _Known:
        meta = row["metadata"] or {}
        key = meta.get("key") or None
        return cls(tokenize(row["content"]), key, _slot_value(meta.get("value"), meta.get("polarity")))

    @classmethod
    def of_item(cls, item: ExtractedItem) -> _Known:
        value = _slot_value(item.value, item.metadata.get("polarity"))
        return cls(tokenize(item.content), item.key or None, value)

    def repeats(self, other: _Known, threshold: float) -> bool:
        if self.key is not None and self.key == other.key and None not in (self.value, other.value):
            return self.value == other.value
        return jaccard(self.tokens, other.tokens) >= threshold


@dataclass
class Report:
    """What one analysis or compaction changed."""

    analyzedMessages: int = 0
    created: list[dict[str, Any]] = field(default_factory=list)
    duplicatesSkipped: int = 0
    superseded: list[dict[str, Any]] = field(default_factory=list)
    merged: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["changed"] = bool(self.analyzedMessages or self.created or self.superseded or self.merged)
        return data


class LegacyMemoryStore:
    """The two ``h5_*`` tables behind one URL. ``auto_create`` is only for memwork's own SQLite file."""

    def __init__(
        self,
        database_url: str,
        *,
        extractor: Extractor | None = None,
        auto_create: bool = False,
        duplicate_threshold: float = DUPLICATE_THRESHOLD,
    ) -> None:
        self.database_url = database_url
        self.extractor: Extractor = extractor or extract_rules
        self.auto_create = auto_create
        self.duplicate_threshold = duplicate_threshold
        self._schema_ready = not auto_create
        self._lock = threading.Lock()
        self._reader: Reader | None = None

    @property
    def reader(self) -> Reader | None:
        """MariaDB/MySQL: the one-round-trip read path of :meth:`resolve` (:mod:`memwork.legacy.reader`)."""
        if self._reader is None:
            parsed = parse_url(self.database_url)
            if parsed.dialect != "mysql" or parsed.sqlalchemy is None:
                return None
            with self._lock:
                if self._reader is None:
                    self._reader = Reader(parsed.sqlalchemy)
        return self._reader

    def close(self) -> None:
        """Close the read path's connections (the engine is shared: :func:`memwork.db.dispose_all`)."""
        with self._lock:
            reader, self._reader = self._reader, None
        if reader is not None:
            reader.close()

    @property
    def engine(self) -> Engine:
        engine = get_engine(self.database_url)
        if not self._schema_ready:
            with self._lock:
                if not self._schema_ready:
                    metadata.create_all(engine, checkfirst=True)
                    self._schema_ready = True
        return engine

    # ---- write ---------------------------------------------------------------------------------
    def save_and_analyze(
        self, user_id: str, session_id: str, new_messages: Sequence[Mapping[str, str]]
    ) -> dict[str, Any]:
        """Save the messages the session does not hold yet, then analyze the user's pending messages,
        in one transaction. ``messageIds`` names each message of the request (new or already stored);
        ``saved`` counts the new ones and ``duplicates`` the ones already stored."""

        def work(conn: Connection) -> tuple[list[int], int, Report]:
            ids, saved = self._save_new_messages(conn, user_id, session_id, new_messages)
            return ids, saved, self._analyze(conn, user_id)

        ids, saved, report = self._transaction(work)
        return {
            "saved": saved,
            "duplicates": len(ids) - saved,
            "messageIds": [str(i) for i in ids],
            **report.to_dict(),
        }

    def _transaction(self, work: Callable[[Connection], R]) -> R:
        """``work(conn)`` in one transaction, applied whole or not at all, and which one is known.

        Anything failing before the commit rolls back: :class:`NotStored` (bad extractor output stays
        a :class:`UsageError`). Under a call's deadline the commit gate is asked first; refused (the
        caller gave up, or the time is up) it rolls back: :class:`CutOff`. A failing COMMIT itself
        leaves the outcome unknown: :class:`BackendError`. A deadlock victim is run again."""
        scope = current_scope()
        if scope is not None:
            scope.guard_commits()
        attempt = 0
        while True:
            try:
                with self._connection() as conn:
                    transaction = conn.begin()
                    try:
                        result = work(conn)
                    except BaseException:
                        transaction.rollback()
                        raise
                    if scope is not None and not scope.may_commit():
                        transaction.rollback()
                        raise CutOff(f"{scope.label}: the deadline passed before the commit; rolled back")
                    try:
                        transaction.commit()
                    except Exception as exc:
                        raise BackendError(f"commit failed, outcome unknown: {describe_error(exc)}") from exc
                    finally:
                        if scope is not None:
                            scope.commit_done()
                    return result
            except CutOff as exc:  # the deadline: the server cancelled a statement, or the gate said no
                if "nothing stored" in str(exc):
                    raise
                raise CutOff(f"{exc}; rolled back, nothing stored") from exc
            except (NotStored, UsageError, BackendError):
                raise
            except Exception as exc:
                attempt += 1
                time_left = scope is None or scope.deadline.statement_budget() > 0
                if _is_deadlock(exc) and attempt <= DEADLOCK_RETRIES and time_left:
                    continue
                raise NotStored(f"rolled back: {describe_error(exc)}") from exc

    @contextmanager
    def _connection(self) -> Iterator[Connection]:
        """A connection; failing to get one means nothing was written (:class:`NotStored`)."""
        try:
            conn = self.engine.connect()
        except Exception as exc:
            raise NotStored(f"no connection: {describe_error(exc)}") from exc
        with conn:
            yield conn

    def _save_new_messages(
        self, conn: Connection, user_id: str, session_id: str, new_messages: Sequence[Mapping[str, str]]
    ) -> tuple[list[int], int]:
        """Insert the messages the session does not hold yet; ``(id of each message, how many new)``."""
        if not new_messages:
            return [], 0
        self._lock_session(conn, user_id, session_id)
        stored = self._stored_copies(conn, user_id, session_id, new_messages)
        ids: list[int] = []
        saved = 0
        for message in new_messages:
            at = client_time(message)  # with the client's time, only a copy of that time is this message
            copies = stored[(message["role"], message["content"], at)]
            if copies:
                ids.append(_take(copies, stored))
                continue
            ids.append(self._save_message(conn, user_id, session_id, message, at))
            saved += 1
        return ids, saved

    def _lock_session(self, conn: Connection, user_id: str, session_id: str) -> None:
        """Serialise writes to one session: an advisory lock on PostgreSQL, the database's write lock
        on SQLite (a no-op UPDATE takes it); MariaDB's locking read of the session does it there."""
        dialect = conn.dialect.name
        if dialect == "postgresql":
            key = f"memwork-session\x1f{user_id}\x1f{session_id}"
            conn.execute(select(func.pg_advisory_xact_lock(func.hashtextextended(key, 0))))
        elif dialect == "sqlite":
            conn.execute(update(messages).where(messages.c.id == -1).values(analyzed_at=None))

    def _stored_copies(
        self, conn: Connection, user_id: str, session_id: str, new_messages: Sequence[Mapping[str, str]]
    ) -> dict[tuple[str, str, datetime | None], deque[tuple[int, datetime]]]:
        """The session's stored messages with the same content, by ``(role, content, created_at)`` and
        by ``(role, content, None)``, oldest first (read with row locks on MariaDB)."""
        contents = sorted({m["content"] for m in new_messages})
        query = (
            select(messages.c.id, messages.c.role, messages.c.content, messages.c.created_at)
            .where(
                and_(
                    exact_eq(messages.c.session_id, session_id),
                    exact_eq(messages.c.user_id, user_id),
                    messages.c.content.in_(contents),
                )
            )
            .order_by(messages.c.id)
            .with_for_update()
        )
        found: dict[tuple[str, str, datetime | None], deque[tuple[int, datetime]]] = defaultdict(deque)
        for row_id, role, content, created in conn.execute(query):
            if content not in contents:  # the column's collation matched; the text must match exactly
                continue
            copy = (int(row_id), created)
            found[(role, content, created)].append(copy)
            found[(role, content, None)].append(copy)
        return found

    def _save_message(
        self,
        conn: Connection,
        user_id: str,
        session_id: str,
        message: Mapping[str, str],
        created_at: datetime | None = None,
    ) -> int:
        row = {
            "user_id": user_id,
            "session_id": session_id,
            "role": message["role"],
            "content": message["content"],
            "created_at": created_at or now(),
            "analyzed_at": None,
        }
        key = conn.execute(insert(messages).values(**row)).inserted_primary_key
        assert key is not None  # a single-row INSERT
        return int(key[0])

    # ---- analysis ------------------------------------------------------------------------------
    def _pending(self, conn: Connection, user_id: str) -> list[RowMapping]:
        query = (
            select(messages)
            .where(and_(exact_eq(messages.c.user_id, user_id), messages.c.analyzed_at.is_(None)))
            .order_by(messages.c.id)
            .limit(MAX_PENDING_PER_RUN)
            .with_for_update(skip_locked=True)
        )
        return [row._mapping for row in conn.execute(query)]

    def _active(
        self, conn: Connection, user_id: str, item_type: str | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        query = select(memory_items).where(
            and_(exact_eq(memory_items.c.user_id, user_id), memory_items.c.status == "active")
        )
        if item_type is not None:
            query = query.where(memory_items.c.type == item_type)
        query = query.order_by(memory_items.c.updated_at.desc(), memory_items.c.id.desc())
        if limit is not None:
            query = query.limit(limit)
        return [dict(row._mapping) for row in conn.execute(query)]

    def _analyze(self, conn: Connection, user_id: str) -> Report:
        pending = self._pending(conn, user_id)
        report = Report(analyzedMessages=len(pending))
        if not pending:
            return report
        inputs = [
            {"role": m["role"], "content": m["content"], "id": str(m["id"]), "sessionId": m["session_id"]}
            for m in pending
        ]
        known = [_Known.of_row(row) for row in self._active(conn, user_id)]
        for item in map(_normalise, self.extractor(inputs)):
            candidate = _Known.of_item(item)
            if any(candidate.repeats(other, self.duplicate_threshold) for other in known):
                report.duplicatesSkipped += 1
                continue
            known.append(candidate)
            source = pending[item.source_index] if item.source_index is not None else None
            report.created.append(self._insert_item(conn, user_id, item, source))
        stamp = now()
        ids = [m["id"] for m in pending]
        mine = and_(messages.c.id.in_(ids), exact_eq(messages.c.user_id, user_id))
        conn.execute(update(messages).where(mine).values(analyzed_at=stamp))
        return report

    def _insert_item(
        self, conn: Connection, user_id: str, item: ExtractedItem, source: RowMapping | None
    ) -> dict[str, Any]:
        meta = dict(item.metadata)
        if item.key is not None:
            meta["key"] = item.key
        if item.value is not None:
            meta["value"] = item.value
        stamp = now()
        row = {
            "id": uuid.uuid4().hex,
            "user_id": user_id,
            "content": item.content.strip(),
            "type": item.type,
            "status": "active",
            "confidence": float(item.confidence),
            "metadata": meta,
            "source_session_id": source["session_id"] if source else None,
            "source_message_id": str(source["id"]) if source else None,
            "created_at": stamp,
            "updated_at": stamp,
        }
        conn.execute(insert(memory_items).values(**row))
        return {"id": row["id"], "type": row["type"], "content": row["content"]}

    def analyze_user(self, user_id: str, session_id: str | None = None) -> dict[str, Any]:
        """analyzeUser: analyze pending messages, archive superseded items, merge duplicates."""

        def work(conn: Connection) -> Report:
            report = self._analyze(conn, user_id)
            self._archive_superseded(conn, user_id, report)
            self._merge_duplicates(conn, user_id, report)
            return report

        report = self._transaction(work)
        return {"sessionId": session_id, **report.to_dict()}

    def _archive(self, conn: Connection, row: Mapping[str, Any], **note: Any) -> None:
        meta = {**(row["metadata"] or {}), **note}
        values = {"status": "archived", "metadata": meta, "updated_at": now()}
        conn.execute(update(memory_items).where(_this_item(row)).values(**values))

    def _archive_superseded(self, conn: Connection, user_id: str, report: Report) -> None:
        newest: dict[str, Mapping[str, Any]] = {}
        for row in self._active(conn, user_id):  # newest first
            key = (row["metadata"] or {}).get("key")
            if not key:
                continue
            if key not in newest:
                newest[key] = row
                continue
            self._archive(conn, row, supersededBy=newest[key]["id"])
            report.superseded.append({"kept": newest[key]["id"], "archived": row["id"], "key": key})

    def _merge_duplicates(self, conn: Connection, user_id: str, report: Report) -> None:
        rows = self._active(conn, user_id)  # newest first: the lower index is kept
        pairs = find_duplicate_pairs(
            [r["content"] for r in rows], [None] * len(rows), self.duplicate_threshold
        )
        gone: set[int] = set()
        for pair in pairs:
            keep, drop = rows[pair.i], rows[pair.j]
            if pair.i in gone or pair.j in gone or keep["type"] != drop["type"]:
                continue
            gone.add(pair.j)
            self._archive(conn, drop, mergedInto=keep["id"])
            confidence = max(keep["confidence"], drop["confidence"])
            conn.execute(update(memory_items).where(_this_item(keep)).values(confidence=confidence))
            report.merged.append({"kept": keep["id"], "archived": drop["id"], "similarity": pair.similarity})

    # ---- read and cleanup ----------------------------------------------------------------------
    def resolve(self, user_id: str, limit: int) -> dict[str, Any]:
        """Active memories newest first, the profile and the active goals (MariaDB/MySQL: one
        statement on the :attr:`reader`)."""
        reader = self.reader
        if reader is not None:
            memories, profile_rows, goals = reader.read(user_id, limit)
        else:
            with self.engine.connect() as conn:
                memories = self._active(conn, user_id, limit=limit)
                profile_rows = self._active(conn, user_id, "profile", PROFILE_LIMIT)
                goals = self._active(conn, user_id, "goal", PROFILE_LIMIT)
        return {
            "profile": build_profile(profile_rows),
            "semanticMemories": [],
            "behaviorSummary": None,
            "activeGoals": [
                {"id": g["id"], "content": g["content"], "createdAt": _iso(g["created_at"])} for g in goals
            ],
            "memories": [item_payload(row) for row in memories],
        }

    def purge_user(self, user_id: str) -> dict[str, int]:
        """Delete every message and item of ``user_id`` (health-check cleanup)."""

        def work(conn: Connection) -> dict[str, int]:
            items = conn.execute(
                delete(memory_items).where(exact_eq(memory_items.c.user_id, user_id))
            ).rowcount
            msgs = conn.execute(delete(messages).where(exact_eq(messages.c.user_id, user_id))).rowcount
            return {"messages": msgs, "items": items}

        return self._transaction(work)


def client_time(message: Mapping[str, Any]) -> datetime | None:
    """The client's ``createdAt`` of a message (validated ISO 8601 with an offset) as naive UTC."""
    value = message.get("createdAt")
    if not isinstance(value, str):
        return None
    return datetime.fromisoformat(value).astimezone(UTC).replace(tzinfo=None)


def _take(copies: deque[tuple[int, datetime]], stored: Mapping[Any, deque[tuple[int, datetime]]]) -> int:
    """The oldest stored copy, used up: removed from both of its keys in ``stored``."""
    copy = copies[0]
    for bucket in stored.values():
        if bucket and copy in bucket:
            bucket.remove(copy)
    return copy[0]


def _is_deadlock(exc: BaseException) -> bool:
    """MariaDB/MySQL chose this transaction as a deadlock victim (it was rolled back whole)."""
    orig = exc.orig if isinstance(exc, DBAPIError) else None
    args: tuple[Any, ...] = tuple(getattr(orig, "args", ()))
    return bool(args) and args[0] == MYSQL_DEADLOCK


def build_profile(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """``{"attributes": {key: value}, "statements": [...]}`` from profile items (newest wins)."""
    attributes: dict[str, Any] = {}
    statements: list[str] = []
    for row in rows:
        meta = row["metadata"] or {}
        if meta.get("key") and meta.get("value") is not None:
            attributes.setdefault(meta["key"], meta["value"])
        statements.append(row["content"])
    return {"attributes": attributes, "statements": statements} if statements else None
