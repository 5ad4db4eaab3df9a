"""The memory entry, its path rules and its scope.

An entry is identified by ``(scope, path)``: the scope is an agent, a memory bank or a user, and
nothing in memwork ever compares, merges or links entries of different scopes.
"""

from __future__ import annotations

import dataclasses
import math
import posixpath
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from memwork.errors import ContentTooLarge, InvalidPath, UsageError

MAX_CONTENT_BYTES = 3_000_000
MAX_STUB_HOPS = 5
DEFAULT_SCOPE = "default"
#: metadata keys of a superseded entry: the newer entry's path, and until when this one was valid
SUPERSEDED_BY = "superseded_by"
VALID_UNTIL = "valid_until"
FORBIDDEN_PATH_CHARS = set('<>:"|?*')
_SCOPE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}")  # used with fullmatch: no "alice\n"
# Limits every store kind can hold, so an export from any store imports into any other:
MAX_PATH_CHARS = 500  # the SQL stores' ``file_path VARCHAR(500)``
MAX_TITLE_CHARS = 200  # the SQL stores' ``title VARCHAR(200)``
MAX_HITS = 2**31 - 1  # PostgreSQL and MySQL ``integer``
MAX_METADATA_DEPTH = 31  # nested objects/arrays; MariaDB's JSON_VALID refuses a 32nd level
MAX_COMPONENT_BYTES = 255  # one file name (UTF-8) on common filesystems
_SIDECAR_SUFFIX_BYTES = len(".yml")  # the filesystem store adds .yml/.emb to an entry's file name


def utcnow() -> datetime:
    """Timezone-aware now in UTC; memwork stores every timestamp in UTC."""
    return datetime.now(UTC)


def as_utc(value: object) -> datetime:
    """Coerce a timestamp (datetime, ISO string or epoch seconds) to an aware UTC datetime."""
    if value is None:
        return utcnow()
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC)
    text = str(value).strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    try:
        return as_utc(datetime.fromisoformat(text))
    except ValueError:
        raise UsageError("timestamp", value, "not an ISO 8601 date-time") from None


def normalize_path(path: object) -> str:
    """Return the canonical form of an entry path, or raise :class:`InvalidPath`.

    Backslashes become slashes and ``.``/duplicate slashes fold away. Absolute paths, ``..``,
    empty paths and the characters ``<>:"|?*`` are rejected: a path must stay inside its store.
    """
    if not isinstance(path, str):
        raise InvalidPath(path, "must be a string")
    raw = path.strip()
    if raw.startswith("memory://"):
        raw = raw[len("memory://") :]
    if not raw:
        raise InvalidPath(path, "must not be empty")
    bad = sorted(FORBIDDEN_PATH_CHARS.intersection(raw))
    if bad:
        raise InvalidPath(path, f"must not contain {''.join(bad)!r}")
    if any(ord(ch) < 32 for ch in raw):
        raise InvalidPath(path, "must not contain control characters")
    raw = raw.replace("\\", "/")
    if raw.startswith("/") or re.match(r"^[A-Za-z]:", raw):
        raise InvalidPath(path, "must be relative, not absolute")
    if ".." in raw.split("/"):
        raise InvalidPath(path, "must not contain '..'")
    normalized = posixpath.normpath(raw)
    if normalized in ("", "."):
        raise InvalidPath(path, "must not be empty")
    if normalized.endswith((".yml", ".emb")) or "/." in "/" + normalized:
        raise InvalidPath(path, "must not end in .yml/.emb or have a hidden component")
    return normalized


def validate_scope(scope: str | None) -> str:
    """Return the scope name (``default`` when None) or raise a usage error."""
    if scope is None:
        return DEFAULT_SCOPE
    if not isinstance(scope, str) or not _SCOPE_RE.fullmatch(scope):
        raise UsageError("scope", scope, "must be 1-128 characters of letters, digits, _ . @ -")
    return scope


def check_text(field: str, value: str) -> str:
    """Return ``value`` when every store can hold it: no NUL (PostgreSQL text refuses it) and no
    lone surrogate (not encodable as UTF-8; JSON's ``"\\ud800"`` escape produces one)."""
    if "\x00" in value:
        where = value.index("\x00") + 1
        raise UsageError(field, _preview(value), f"must not contain NUL (\\u0000) at character {where}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = value[exc.start]
        problem = f"holds a lone surrogate {bad!r} at character {exc.start + 1} (not valid UTF-8)"
        raise UsageError(field, _preview(value), problem) from None
    return value


def check_portable_path(path: str) -> str:
    """Return a normalised ``path`` when every store can hold it: valid UTF-8 and every component at
    most 255 bytes, the last at most 251 (the filesystem store's sidecars add ``.yml``/``.emb``)."""
    check_text("path", path)
    parts = path.split("/")
    for number, part in enumerate(parts, start=1):
        limit = MAX_COMPONENT_BYTES - (_SIDECAR_SUFFIX_BYTES if number == len(parts) else 0)
        size = len(part.encode("utf-8"))
        if size > limit:
            problem = f"component {number} is {size} bytes; at most {limit} (UTF-8) fit a file name"
            raise InvalidPath(_preview(path), problem)
    return path


def check_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """Return ``metadata`` when every store can hold it: JSON values only, finite numbers, text as
    :func:`check_text`, at most :data:`MAX_METADATA_DEPTH` levels. Walks iteratively, so a very
    deep document is a usage error, never a RecursionError."""
    stack: list[tuple[Any, int, str]] = [(metadata, 1, "metadata")]
    while stack:
        node, depth, where = stack.pop()
        if isinstance(node, dict | list) and depth > MAX_METADATA_DEPTH:
            problem = f"too deep: at most {MAX_METADATA_DEPTH} levels of objects and arrays"
            raise UsageError("metadata", f"<nested more than {MAX_METADATA_DEPTH} levels>", problem)
        if isinstance(node, dict):
            for key, value in node.items():
                if not isinstance(key, str):
                    raise UsageError(f"{where} key", _preview(key), "must be a string")
                check_text(f"{where} key", key)
                stack.append((value, depth + 1, f"{where}.{key}"))
        elif isinstance(node, list):
            stack.extend((value, depth + 1, f"{where}[{i}]") for i, value in enumerate(node))
        elif isinstance(node, str):
            check_text(where, node)
        elif isinstance(node, float) and not math.isfinite(node):
            raise UsageError(where, node, "must be a finite number (JSON has no NaN or Infinity)")
        elif node is not None and not isinstance(node, bool | int | float):
            raise UsageError(where, type(node).__name__, "must be a JSON value")
    return metadata


def _preview(value: Any, limit: int = 80) -> Any:
    """A value short enough for a one-line error (long text is cut, other values pass)."""
    if isinstance(value, str) and len(value) > limit:
        return value[: limit - 3] + "..."
    return value


def check_content_size(content: str) -> int:
    """Return the content's size in UTF-8 bytes, rejecting anything over the limit."""
    size = len(content.encode("utf-8"))
    if size > MAX_CONTENT_BYTES:
        raise ContentTooLarge("content", f"<{size} bytes>", f"exceeds the {MAX_CONTENT_BYTES} byte limit")
    return size


def check_path_length(path: str) -> str:
    """``path`` unless it is longer than :data:`MAX_PATH_CHARS` characters (what a SQL store holds)."""
    if len(path) > MAX_PATH_CHARS:
        raise InvalidPath(_preview(path), f"longer than {MAX_PATH_CHARS} characters")
    return path


def check_title(title: object) -> str:
    """``title`` (None as "") unless it is not a string or longer than :data:`MAX_TITLE_CHARS`."""
    title = "" if title is None else title
    if not isinstance(title, str) or len(title) > MAX_TITLE_CHARS:
        raise UsageError(
            "title", _preview(title), f"must be a string of at most {MAX_TITLE_CHARS} characters"
        )
    return title


def check_limits(entry: Entry) -> tuple[str, str, int]:
    """The one set of limits every store enforces before it writes ``entry``: the normalised path
    (at most :data:`MAX_PATH_CHARS`), the scope, the title (at most :data:`MAX_TITLE_CHARS`) and the
    content (at most :data:`MAX_CONTENT_BYTES`). Returns ``(path, scope, size in bytes)``, so a
    store accepts exactly what every other store accepts."""
    path = check_path_length(normalize_path(entry.path))
    scope = validate_scope(entry.scope)
    check_title(entry.title)
    return path, scope, check_content_size(entry.content)


def as_embedding(value: Any) -> np.ndarray | None:
    """Coerce a vector-like to a 1-D float32 array (None stays None)."""
    if value is None:
        return None
    arr = np.asarray(value, dtype=np.float32).reshape(-1)
    if arr.size == 0:
        return None
    return arr


@dataclass(eq=False)
class Entry:
    """One memory entry. ``metadata`` has string keys; ``embedding`` is float32 or None."""

    path: str
    content: str
    title: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    embedding: np.ndarray | None = None
    size: int = 0
    created_at: datetime = field(default_factory=utcnow)
    updated_at: datetime = field(default_factory=utcnow)
    hits: int = 0
    scope: str = DEFAULT_SCOPE

    def __post_init__(self) -> None:
        self.metadata = {str(k): v for k, v in (self.metadata or {}).items()}
        self.embedding = as_embedding(self.embedding)
        if not self.size:
            self.size = len(self.content.encode("utf-8"))
        self.created_at = as_utc(self.created_at)
        self.updated_at = as_utc(self.updated_at)

    @property
    def key(self) -> tuple[str, str]:
        """Identity of the entry: (scope, path)."""
        return (self.scope, self.path)

    @property
    def is_stub(self) -> bool:
        """A redirect left behind by a merge or move (``metadata.stub == true``)."""
        return self.metadata.get("stub") is True

    @property
    def redirect_to(self) -> str | None:
        target = self.metadata.get("redirect_to")
        return str(target) if target else None

    @property
    def superseded_by(self) -> str | None:
        """The newer entry that contradicts and replaces this one (``defrag supersede``), or None.

        Kept in metadata (with ``valid_until``, the newer entry's time) rather than in a column: every
        store already round-trips metadata exactly, and so do export, import and the journal."""
        target = self.metadata.get(SUPERSEDED_BY)
        return str(target) if target and not self.is_stub else None

    @property
    def embedded(self) -> bool:
        return self.embedding is not None

    def copy(self, **changes: Any) -> Entry:
        """A deep-enough copy (metadata and embedding are copied too)."""
        import copy as _copy

        clone = dataclasses.replace(
            self,
            metadata=_copy.deepcopy(self.metadata),
            embedding=None if self.embedding is None else self.embedding.copy(),
        )
        for key, value in changes.items():
            setattr(clone, key, value)
        return clone

    def to_record(self) -> dict[str, Any]:
        """JSON-ready form, as used by ``memwork store export`` and the audit journal."""
        return {
            "path": self.path,
            "scope": self.scope,
            "title": self.title,
            "content": self.content,
            "metadata": self.metadata,
            "embedding": None if self.embedding is None else [float(x) for x in self.embedding],
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "hits": int(self.hits),
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Entry:
        """Inverse of :meth:`to_record`; validates path, scope and content size."""
        if not isinstance(record, dict):
            raise UsageError("record", type(record).__name__, "must be a JSON object")
        content = record.get("content")
        if not isinstance(content, str):
            raise UsageError("content", content, "must be a string")
        metadata = record.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise UsageError("metadata", metadata, "must be a JSON object")
        hits = record.get("hits", 0) or 0
        if not isinstance(hits, int) or hits < 0:
            raise UsageError("hits", hits, "must be a non-negative integer")
        return cls(
            path=normalize_path(record.get("path")),
            scope=validate_scope(record.get("scope")),
            title=str(record.get("title") or ""),
            content=content,
            metadata=metadata,
            embedding=record.get("embedding"),
            size=check_content_size(content),
            created_at=as_utc(record.get("created_at")),
            updated_at=as_utc(record.get("updated_at")),
            hits=hits,
        )
