"""Load any store from, and dump it to, JSON lines -- one :meth:`Entry.to_record` per line.

Loading (``memwork store load``) checks every line before writing anything (an error names the line,
the field and the value) and is a dry run unless ``apply=True``. The check refuses everything any
store kind would refuse (NUL, lone surrogates, hits beyond 32 bits, NaN in metadata, float32
overflow, over-long file names, very deep metadata, paths that collide as file and directory), so
an export from any store loads into any other, and a file that passes is written whole: SQL stores
write it in one transaction, the filesystem store after the whole file (and its paths against the
store) passed. It writes through ``Store.put_many``, so timestamps and hits survive exactly: export
-> load into another kind of store -> export gives the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, cast

import numpy as np

from memwork.entry import (
    MAX_HITS,
    VALID_UNTIL,
    Entry,
    as_utc,
    check_content_size,
    check_metadata,
    check_path_length,
    check_portable_path,
    check_text,
    check_title,
    normalize_path,
    utcnow,
    validate_scope,
)
from memwork.errors import ImportLineError, ImportWriteError, InvalidPath, MemworkError, UsageError
from memwork.progress import Progress, track
from memwork.redaction import first_line
from memwork.stores.base import Store
from memwork.stores.sql import SQLStore

RECORD_FIELDS = (
    "path",
    "scope",
    "title",
    "content",
    "metadata",
    "embedding",
    "created_at",
    "updated_at",
    "hits",
)
IGNORED_FIELDS = ("size",)  # derived from content; accepted so other tools' dumps load
_LOOKUP_ONE_BY_ONE = 2000


@dataclass
class LoadReport:
    """What a load found (dry run) or did (``applied``): counts overall and per scope. (Not the
    migration's report: ``memwork import`` moves a source into pgvector, ``store load`` fills a store.)"""

    applied: bool
    total: int = 0
    new: int = 0
    updated: int = 0
    unchanged: int = 0
    scopes: dict[str, dict[str, int]] = field(default_factory=dict)

    def count(self, scope: str, outcome: str) -> None:
        setattr(self, outcome, getattr(self, outcome) + 1)
        self.total += 1
        per = self.scopes.setdefault(scope, {"new": 0, "updated": 0, "unchanged": 0})
        per[outcome] += 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---- export -------------------------------------------------------------------------------------
def entry_line(entry: Entry) -> str:
    """One export line: :meth:`Entry.to_record` with metadata keys sorted, so every store gives the
    same bytes (PostgreSQL's JSONB does not keep key order)."""
    record = {
        "path": entry.path,
        "scope": entry.scope,
        "title": entry.title,
        "content": entry.content,
        "metadata": _sorted_keys(entry.metadata),
        "embedding": None if entry.embedding is None else entry.embedding.astype(np.float64).tolist(),
        "created_at": entry.created_at.isoformat(),
        "updated_at": entry.updated_at.isoformat(),
        "hits": int(entry.hits),
    }
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def export_jsonl(
    store: Store,
    out: str | os.PathLike[str] | IO[str],
    *,
    scope: str | None = None,
    progress: Progress | None = None,
    history: bool = True,
) -> int:
    """Write every entry (stubs included) of ``store`` -- or of one scope -- as JSON lines to ``out``
    (a path or a text stream), in (scope, path) order. Returns the number of entries written.

    An export is a backup, so by default it keeps the history: superseded entries (``defrag
    supersede``) are written as kept, ``superseded_by`` and ``valid_until`` in their metadata, and a
    load restores them exactly (read still follows them to the newer entry, and an undo of the
    supersede still finds its before-image). ``history=False`` writes what a reader sees instead:
    superseded entries left out, and with them every stub whose redirects lead into one (it would
    point at an entry the file does not hold).

    ``progress`` gets one "exporting" stage whose total is the store's entry count."""
    count = 0
    total = store.count(scope=scope) if progress is not None else None
    hidden = set() if history else _history_keys(store, scope)
    with _text_out(out) as handle:
        for entry in track(store.iter_entries(scope=scope), progress, "exporting", total):
            if entry.key in hidden:
                continue
            handle.write(entry_line(entry))
            handle.write("\n")
            count += 1
    return count


def _history_keys(store: Store, scope: str | None) -> set[tuple[str, str]]:
    """The superseded entries of ``store`` (or one scope) and the stubs whose chain reaches one."""
    superseded: set[tuple[str, str]] = set()
    redirects: dict[tuple[str, str], tuple[str, str]] = {}
    for entry in store.iter_entries(scope=scope):
        if entry.superseded_by is not None:
            superseded.add(entry.key)
        elif entry.is_stub and entry.redirect_to:
            redirects[entry.key] = (entry.scope, entry.redirect_to)
    hidden = set(superseded)
    for key in redirects:
        seen, at = {key}, redirects[key]
        while at in redirects and at not in seen:  # a cycle is left to load and read to report
            seen.add(at)
            at = redirects[at]
        if at in superseded:
            hidden.add(key)
    return hidden


# ---- read and list with history ------------------------------------------------------------------
def entry_view(entry: Entry, *, requested: str | None = None) -> dict[str, Any]:
    """An entry as a person inspects it (``memwork store read --json``): its record without the vector
    (``embedding_dimension`` instead), the path that was asked for, and what makes it history:
    ``superseded_by`` with ``valid_until`` (superseded by a newer entry) or ``redirect_to`` (a stub)."""
    record = entry.to_record()
    del record["embedding"]
    dimension = None if entry.embedding is None else len(entry.embedding)
    return (
        {"requested": requested if requested is not None else entry.path}
        | record
        | {
            "size": entry.size,
            "embedding_dimension": dimension,
            "stub": entry.is_stub,
            "redirect_to": entry.redirect_to,
            "superseded_by": entry.superseded_by,
            "valid_until": entry.metadata.get(VALID_UNTIL) if entry.superseded_by is not None else None,
        }
    )


def list_view(
    store: Store, *, scope: str | None = None, prefix: str | None = None, history: bool = False
) -> list[dict[str, Any]]:
    """What :meth:`Store.list` lists (every entry, stubs included; superseded ones only with
    ``history``), each with ``stub``, ``superseded_by`` and ``valid_until`` so a history is readable."""
    scope = validate_scope(scope) if scope is not None else None
    rows = []
    for entry in store.iter_entries(scope=scope, prefix=prefix):
        newer = entry.superseded_by
        if newer is not None and not history:
            continue
        rows.append(
            {"scope": entry.scope, "path": entry.path, "title": entry.title, "size": entry.size,
             "updated_at": entry.updated_at.isoformat(), "stub": entry.is_stub,
             "superseded_by": newer, "valid_until": entry.metadata.get(VALID_UNTIL) if newer else None}
        )  # fmt: skip
    return rows


# ---- load ---------------------------------------------------------------------------------------
def load_jsonl(
    store: Store | None,
    lines_or_path: str | os.PathLike[str] | Iterable[str] | Iterable[bytes],
    *,
    apply: bool = False,
    progress: Progress | None = None,
    dimension: int | None = None,
    create: Callable[[], Store] | None = None,
) -> LoadReport:
    """Validate every line, compare with what ``store`` holds, and (only with ``apply``) write the new
    and changed entries. Raises :class:`ImportLineError` on the first bad line, before any write, and
    :class:`ImportWriteError` when the store itself refuses an entry (a SQL store then has written
    nothing: one transaction).

    ``store=None`` is a store that does not exist yet: every entry is new, ``dimension`` is the one
    the store would get, and ``apply`` calls ``create()`` to make the store only after every line
    passed (a bad file leaves no empty store behind). ``progress`` hears three stages, each with its
    total: checking lines, comparing with the store, and (with ``apply``) writing."""
    if store is not None:
        dimension = _store_dimension(store)
    numbered = _parse_numbered(lines_or_path, dimension=dimension, progress=progress)
    if store is not None:
        _check_against_store(store, numbered)
    entries = [entry for _, entry in numbered]
    if store is None:
        existing: dict[tuple[str, str], bytes] = {}
        for _ in track(entries, progress, "comparing with the store", len(entries)):
            pass  # nothing to compare with: the store does not exist yet
    else:
        existing = _existing_fingerprints(store, entries, progress)
    report = LoadReport(applied=apply)
    to_write: list[Entry] = []
    for entry in entries:
        before = existing.get(entry.key)
        if before is None:
            outcome = "new"
        elif before == fingerprint(entry):
            outcome = "unchanged"
        else:
            outcome = "updated"
        report.count(entry.scope, outcome)
        if outcome != "unchanged":
            to_write.append(entry)
    if apply and to_write:
        if store is not None:
            _write_all(store, to_write, progress, numbered)
        elif create is None:
            raise UsageError("store", None, "does not exist and nothing may create it")
        else:
            with create() as created:
                _write_all(created, to_write, progress, numbered)
    return report


def _write_all(
    store: Store, entries: list[Entry], progress: Progress | None, numbered: list[tuple[int, Entry]]
) -> None:
    """``put_many`` with a store's own refusal as one line (exit 2): a SQL store has written nothing
    and names the refused entry's line; the filesystem store says how many entries it wrote."""
    written = _Written(progress)
    written.start("writing", len(entries))
    try:
        store.put_many(entries, progress=written)
    except MemworkError:
        raise
    except Exception as exc:  # a constraint, a trigger, a full disk: the store's own refusal
        if not isinstance(store, SQLStore):
            done = f"{written.count} of {len(entries)} entries were written before it"
            problem = f"refused an entry: {_reason(exc)}; {done}"
            raise ImportWriteError("store", store.describe(), problem) from exc
        done = "nothing was written (one transaction)"
        refused = _first_refused(store, entries)
        if refused is None:
            raise ImportWriteError(
                "store", store.describe(), f"refused the import: {_reason(exc)}; {done}"
            ) from exc
        entry, error = entries[refused[0]], refused[1]
        line = next(number for number, parsed in numbered if parsed.key == entry.key)
        problem = f"the store refused it: {_reason(error)}; {done}"
        raise ImportLineError(line, ImportWriteError("path", entry.path, problem)) from exc


def _first_refused(store: SQLStore, entries: list[Entry]) -> tuple[int, Exception] | None:
    try:
        return store.first_refused(entries)
    except Exception:  # the server went away meanwhile: the import error itself still stands
        return None


class _Written:
    """A :class:`~memwork.progress.Progress` that counts what the store wrote and passes it on."""

    def __init__(self, progress: Progress | None) -> None:
        self.progress, self.count = progress, 0

    def start(self, description: str, total: int | None) -> None:
        if self.progress is not None:
            self.progress.start(description, total)

    def advance(self, n: int = 1) -> None:
        self.count += n
        if self.progress is not None:
            self.progress.advance(n)


def _reason(exc: BaseException) -> str:
    """A driver error's first line, its class named (no traceback, no SQL statement)."""
    cause = first_line(getattr(exc, "orig", None) or exc)
    return f"{type(exc).__name__}: {cause}" if cause else type(exc).__name__


def parse_jsonl(
    lines_or_path: str | os.PathLike[str] | Iterable[str] | Iterable[bytes],
    *,
    dimension: int | None = None,
    progress: Progress | None = None,
) -> list[Entry]:
    """Every entry of a JSON-lines source, validated; blank lines skipped, duplicates and colliding
    paths rejected. Without ``dimension`` the first embedding sets it for the rest of the file."""
    return [entry for _, entry in _parse_numbered(lines_or_path, dimension=dimension, progress=progress)]


def _parse_numbered(
    lines_or_path: str | os.PathLike[str] | Iterable[str] | Iterable[bytes],
    *,
    dimension: int | None,
    progress: Progress | None,
) -> list[tuple[int, Entry]]:
    numbered: list[tuple[int, Entry]] = []
    seen: dict[tuple[str, str], int] = {}
    layout = _PathLayout()
    lines = list(_numbered_lines(lines_or_path))
    for number, line in track(lines, progress, "checking lines", len(lines)):
        try:
            entry = parse_record(_load_json(_decode(line)), dimension=dimension)
            if entry.key in seen:
                where = f"already on line {seen[entry.key]} (scope {entry.scope!r})"
                raise UsageError("path", entry.path, where)
            layout.add(entry.scope, entry.path, number)
        except UsageError as exc:
            raise ImportLineError(number, exc) from None
        if dimension is None and entry.embedding is not None:
            dimension = entry.embedding.shape[0]  # the first vector sets the store's dimension
        seen[entry.key] = number
        numbered.append((number, entry))
    return numbered


class _PathLayout:
    """Every file and directory the filesystem store would create for the file's entries, per scope:
    ``x.md`` beside ``x.md/child.md`` (or ``x.md.yml/child.md``) cannot both be written."""

    def __init__(self) -> None:
        self.files: dict[tuple[str, str], int] = {}
        self.dirs: dict[tuple[str, str], int] = {}

    def add(self, scope: str, path: str, number: int) -> None:
        names = [path, *(path + suffix for suffix in _SIDECARS)]
        parents = _parents(path)
        for name in names:
            if (scope, name) in self.dirs:
                other = self.dirs[(scope, name)]
                raise InvalidPath(path, f"is a directory of the entry on line {other} (scope {scope!r})")
        for parent in parents:
            if (scope, parent) in self.files:
                other = self.files[(scope, parent)]
                what = "a sidecar file" if parent.endswith(_SIDECARS) else "the entry file"
                raise InvalidPath(path, f"lies below {parent!r}, {what} of line {other}")
        for name in names:
            self.files[(scope, name)] = number
        for parent in parents:
            self.dirs.setdefault((scope, parent), number)


_SIDECARS = (".yml", ".emb")


def _parents(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def _store_dimension(store: Store) -> int | None:
    """The dimension every embedding must have: the SQL table's, or the filesystem store's first."""
    found = getattr(store, "dimension", None)
    if found is None and hasattr(store, "embedding_dimension"):
        found = store.embedding_dimension()
    return found


def _check_against_store(store: Store, numbered: list[tuple[int, Entry]]) -> None:
    """Paths that collide with files or directories already in a filesystem store, before any write."""
    conflict = getattr(store, "path_conflict", None)
    if conflict is None:
        return
    for number, entry in numbered:
        problem = conflict(entry.path, scope=entry.scope)
        if problem:
            raise ImportLineError(number, InvalidPath(entry.path, problem))


def parse_record(record: Any, *, dimension: int | None = None) -> Entry:
    """One export record as an :class:`Entry`; a :class:`UsageError` names the first bad field."""
    if not isinstance(record, dict):
        raise UsageError("record", type(record).__name__, "must be a JSON object")
    for key in record:
        if key not in RECORD_FIELDS and key not in IGNORED_FIELDS:
            raise UsageError("field", key, f"unknown; expected {', '.join(RECORD_FIELDS)}")
    if "path" not in record:
        raise UsageError("path", None, "is required")
    path = check_path_length(check_portable_path(normalize_path(record["path"])))
    content = record.get("content")
    if not isinstance(content, str):
        raise UsageError("content", _short(content), "must be a string")
    check_text("content", content)
    title = check_title(record.get("title") or "")
    check_text("title", title)
    metadata = record.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise UsageError("metadata", _short(metadata), "must be a JSON object")
    check_metadata(metadata)
    hits = record.get("hits") or 0
    if not isinstance(hits, int) or isinstance(hits, bool) or not 0 <= hits <= MAX_HITS:
        raise UsageError("hits", hits, f"must be an integer from 0 to {MAX_HITS}")
    now = utcnow()
    created_at = _timestamp(record, "created_at", now)
    return Entry(
        path=path,
        scope=validate_scope(record.get("scope")),
        title=title,
        content=content,
        metadata=metadata,
        embedding=_embedding(record.get("embedding"), dimension),
        size=check_content_size(content),
        created_at=created_at,
        updated_at=_timestamp(record, "updated_at", created_at),
        hits=hits,
    )


def fingerprint(entry: Entry) -> bytes:
    """A digest of everything export writes, to tell unchanged entries from updated ones."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(entry_line(entry.copy(embedding=None)).encode("utf-8"))
    if entry.embedding is not None:
        digest.update(entry.embedding.astype("<f4").tobytes())
    return digest.digest()


# ---- store summary ------------------------------------------------------------------------------
def store_info(store: Store) -> dict[str, Any]:
    """Entries, stubs, embedded entries and content bytes, overall and per scope."""
    scopes: dict[str, dict[str, int]] = {}
    for entry in store.iter_entries():
        per = scopes.setdefault(entry.scope, {"entries": 0, "stubs": 0, "embedded": 0, "size": 0})
        per["entries"] += 1
        per["stubs"] += int(entry.is_stub)
        per["embedded"] += int(entry.embedding is not None)
        per["size"] += entry.size
    totals = {key: sum(s[key] for s in scopes.values()) for key in ("entries", "stubs", "embedded", "size")}
    return {"store": store.describe(), "kind": store.kind, **totals, "scopes": scopes}


# ---- helpers ------------------------------------------------------------------------------------
def _existing_fingerprints(
    store: Store, entries: list[Entry], progress: Progress | None = None
) -> dict[tuple[str, str], bytes]:
    """Fingerprints of the entries the import would overwrite (few: one get each; many: one scan)."""
    wanted = {entry.key for entry in entries}
    found: dict[tuple[str, str], bytes] = {}
    if len(wanted) <= _LOOKUP_ONE_BY_ONE:
        for scope, path in track(wanted, progress, "comparing with the store", len(wanted)):
            current = store.get(path, scope=scope)
            if current is not None:
                found[(scope, path)] = fingerprint(current)
        return found
    scopes = sorted({scope for scope, _ in wanted})
    total = sum(store.count(scope=scope) for scope in scopes) if progress is not None else None
    scanned = (e for scope in scopes for e in store.iter_entries(scope=scope))
    for current in track(scanned, progress, "comparing with the store", total):
        if current.key in wanted:
            found[current.key] = fingerprint(current)
    return found


def _numbered_lines(
    source: str | os.PathLike[str] | Iterable[str] | Iterable[bytes],
) -> Iterator[tuple[int, str | bytes]]:
    """Non-blank lines with their numbers; a file is read as bytes, so each line decodes (and fails
    to decode) on its own."""
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        try:
            handle = path.open("rb")
        except OSError as exc:
            raise UsageError("file", str(source), exc.strerror or "cannot be read") from None
        with handle:
            yield from _numbered_lines(list(handle))
        return
    lines = cast("Iterable[str | bytes]", source)
    for number, line in enumerate(lines, start=1):
        if line.strip():
            yield number, line


def _decode(line: str | bytes) -> str:
    """A line as text; invalid UTF-8 names the field that holds it and its byte column."""
    if isinstance(line, str):
        return line
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as exc:
        where = f"<byte 0x{line[exc.start]:02x} at byte {exc.start + 1} of the line>"
        raise UsageError(_field_of_bad_bytes(line), where, "not valid UTF-8") from None


def _field_of_bad_bytes(line: bytes) -> str:
    """Which field holds the undecodable bytes: they decode to lone surrogates, which the record
    check names (``json`` when the line is not a valid record for another reason)."""
    try:
        parse_record(json.loads(line.decode("utf-8", errors="surrogateescape")))
    except UsageError as exc:
        if "lone surrogate" in exc.problem:
            return exc.field
    except (ValueError, RecursionError):
        pass
    return "json"


def _load_json(line: str) -> Any:
    text = line.rstrip("\r\n")  # so a column is one of this line, not of the "next" one
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        problem = f"not valid JSON ({exc.msg} at column {exc.colno})"
        raise UsageError("json", _short(text.strip()), problem) from None
    except RecursionError:
        raise UsageError("json", _short(text.strip()), "nested too deeply to parse") from None


def _timestamp(record: dict[str, Any], key: str, default: Any) -> Any:
    value = record.get(key)
    if value is None:
        return default
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise UsageError(key, value, "must be an ISO 8601 date-time")
    try:
        return as_utc(value)
    except (UsageError, ValueError, OverflowError, OSError):
        raise UsageError(key, value, "must be an ISO 8601 date-time") from None


def _embedding(value: Any, dimension: int | None) -> np.ndarray | None:
    if value is None:
        return None
    try:
        arr = np.asarray(value, dtype=np.float64) if isinstance(value, list) else None
    except (TypeError, ValueError):
        arr = None
    if arr is None or arr.ndim != 1 or not np.isfinite(arr).all():
        raise UsageError("embedding", _short(value), "must be null or a list of finite numbers")
    if arr.size == 0:
        return None
    if dimension is not None and arr.size != dimension:
        raise UsageError("embedding", f"<{arr.size} floats>", f"must have {dimension} dimensions")
    with np.errstate(over="ignore"):
        vector = arr.astype(np.float32)
    if not np.isfinite(vector).all():
        first = int(np.flatnonzero(~np.isfinite(vector))[0])
        where = f"<value {float(arr[first])!r} at index {first}>"
        raise UsageError("embedding", where, "overflows float32 (at most about 3.4e38)")
    return vector


def _sorted_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _sorted_keys(value[k]) for k in sorted(value, key=str)}
    if isinstance(value, list | tuple):
        return [_sorted_keys(v) for v in value]
    return value


def _short(value: Any, limit: int = 80) -> Any:
    text = value if isinstance(value, str) else None
    if text is None:
        text = repr(value)
        if len(text) <= limit:
            return value
    return text if len(text) <= limit else text[: limit - 3] + "..."


@contextmanager
def _text_out(out: str | os.PathLike[str] | IO[str]) -> Iterator[IO[str]]:
    if isinstance(out, str | os.PathLike):
        try:
            handle = open(out, "w", encoding="utf-8", newline="\n")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise UsageError("output", str(out), exc.strerror or "cannot be written") from None
        with handle:
            yield handle
    else:
        yield out
