"""The shadow-read comparison log, read strictly: one parser every reader of the log uses.

``memwork serve`` writes one JSON line per shadowed resolve (schema in :mod:`memwork.service.shadow`).
The canary judge (``memwork canary judge``, the ``canary_signoff`` report) reads it only through
:func:`read_comparison_log`, so a record means the same thing everywhere:

* a line is a **comparison** only when it is valid UTF-8, one JSON object without duplicate keys or
  ``NaN``/``Infinity``, and every field the judge uses has its exact type: ``ok`` a JSON boolean (the
  string ``"false"`` is damage, never truthy); latencies finite numbers >= 0 (not strings, booleans
  or NaN); counts integers >= 0; ``ts`` an ISO 8601 time with a UTC offset; agreement figures
  ``null`` or numbers in [0, 1]; ``startedAt``, when present, an ISO 8601 time like ``ts``.
  Anything else is a **damaged** line, counted with its reason.
  ``error`` is free text (or an object) and is never interpreted.
* the last line of the live file without its newline is a record **still being written**: neither a
  comparison nor damage (a log is judged while the service appends to it).
* a record whose ``requestId`` was seen before -- compared by :func:`request_key`: letter case,
  whitespace, invisible characters and Unicode forms make no new request -- is a **duplicate**,
  counted once: a repeat equal in
  every field the judge reads (a concatenated or re-shipped log) adds no evidence; a repeat that
  differs (a caller reusing its ``X-Request-Id``, logs of two services merged) is a **conflict**:
  the first is kept, the later one counts as unusable, like a damaged line.

The bytes read are hashed as read (a live log keeps growing), so the sign-off binds exactly what was
judged.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
import math
import re
import unicodedata
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from memwork.errors import UsageError

#: damaged lines kept as examples (file, line number, reason) in the sign-off
DAMAGE_EXAMPLES = 5
#: a requestId longer than this is damage (the service's own ids are at most 64 characters)
MAX_REQUEST_ID = 256
SIDES = ("primary", "shadow")


class InvalidRecord(ValueError):
    """A line that is not a comparison record; the message names the field and what is wrong."""


@dataclass(frozen=True)
class Side:
    """One side of a comparison: which backend answered, how fast, whether it answered."""

    backend: str | None
    latency_ms: float
    ok: bool
    count: int
    cross_user: int


@dataclass(frozen=True)
class Comparison:
    """One validated comparison record."""

    request_id: str
    ts: datetime
    k: int
    primary: Side
    shadow: Side
    overlap_at_k: float | None
    rbo: float | None
    top1_agree: float | None  # 1.0 / 0.0 (a boolean in the log) or None
    dimension_mismatch: bool
    started_at: datetime | None = None  # when the service's shadow reader started (warm-up)

    @property
    def both_ok(self) -> bool:
        return self.primary.ok and self.shadow.ok

    @property
    def cross_user(self) -> bool:
        return self.primary.cross_user > 0 or self.shadow.cross_user > 0

    def side(self, name: str) -> Side:
        return self.primary if name == "primary" else self.shadow


@dataclass(frozen=True)
class Damage:
    """Where a damaged line is and why it is not a comparison."""

    file: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{Path(self.file).name}:{self.line}: {self.reason}"


@dataclass
class ComparisonLog:
    """What a comparison log holds, read strictly (see the module docstring)."""

    records: list[Comparison]  # unique by requestId, first occurrence, in log order
    files: list[str]
    sha256: str
    lines: int = 0  # non-blank lines, the incomplete last one included
    duplicates: int = 0  # identical repeats of a requestId (counted once)
    conflicts: list[Comparison] = field(default_factory=list)  # same requestId, different content
    damaged: int = 0
    damage_examples: list[Damage] = field(default_factory=list)
    incomplete_last_line: bool = False

    @property
    def unusable(self) -> int:
        """Lines that may hide a comparison the judge cannot see: damaged lines and conflicts."""
        return self.damaged + len(self.conflicts)

    @property
    def unusable_share(self) -> float:
        """Unusable lines over unusable lines plus unique comparisons (duplicates cannot dilute it)."""
        total = self.unusable + len(self.records)
        return self.unusable / total if total else 0.0

    def summary(self) -> dict[str, Any]:
        """The counts the sign-off records."""
        return {
            "files": self.files,
            "sha256": self.sha256,
            "lines": self.lines,
            "comparisons": len(self.records),
            "duplicates": self.duplicates,
            "conflicts": len(self.conflicts),
            "damaged": self.damaged,
            "damaged_examples": [str(d) for d in self.damage_examples],
            "incomplete_last_line": self.incomplete_last_line,
            "unusable_share": self.unusable_share,
        }


# ---- one value at a time -------------------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise InvalidRecord(f"{name} is not a JSON number")


def _object_without_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):  # rare: find the repeated key only then
        seen: set[str] = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise InvalidRecord(f"key {key!r} appears twice")
    return out


def loads_strict(text: str) -> Any:
    """JSON without ``NaN``/``Infinity`` and without duplicate keys (both raise :class:`InvalidRecord`)."""
    try:
        return json.loads(
            text, parse_constant=_reject_constant, object_pairs_hook=_object_without_duplicate_keys
        )
    except RecursionError as exc:
        raise InvalidRecord("nested too deeply") from exc
    except ValueError as exc:
        if isinstance(exc, InvalidRecord):
            raise
        raise InvalidRecord(f"not JSON ({exc.args[0] if exc.args else exc})") from exc


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 40 else text[:37] + "..."


def _require(record: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in record:
        raise InvalidRecord(f"{where}{key} is missing")
    return record[key]


def _number(value: Any, name: str, *, low: float = 0.0, high: float = math.inf) -> float:
    """A finite JSON number in [low, high]: never a string, a boolean or NaN."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidRecord(f"{name}={_shown(value)} is not a number")
    number = float(value)
    if not math.isfinite(number) or not low <= number <= high:
        raise InvalidRecord(f"{name}={_shown(value)} is outside [{low:g}, {high:g}]")
    return number


def _count(value: Any, name: str, *, low: int = 0) -> int:
    """A JSON integer >= ``low`` (``3.0``, ``"3"`` and ``true`` are not counts)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InvalidRecord(f"{name}={_shown(value)} is not an integer >= {low}")
    return value


def _flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidRecord(f"{name}={_shown(value)} is not true or false")
    return value


def _timestamp(value: Any) -> datetime:
    if not isinstance(value, str):
        raise InvalidRecord(f"ts={_shown(value)} is not a string")
    try:
        ts = datetime.fromisoformat(value)
    except ValueError as exc:
        raise InvalidRecord(f"ts={_shown(value)} is not an ISO 8601 time") from exc
    if ts.tzinfo is None or ts.utcoffset() is None:
        raise InvalidRecord(f"ts={_shown(value)} has no UTC offset")
    return ts


def _started(value: Any) -> datetime:
    try:
        return _timestamp(value)
    except InvalidRecord as exc:
        raise InvalidRecord(str(exc).replace("ts=", "startedAt=", 1)) from exc


def _optional_fraction(record: Mapping[str, Any], key: str) -> float | None:
    value = _require(record, key, "")
    return None if value is None else _number(value, key, high=1.0)


def _side(record: Mapping[str, Any], name: str) -> Side:
    value = _require(record, name, "")
    if not isinstance(value, dict):
        raise InvalidRecord(f"{name}={_shown(value)} is not an object")
    ok = _flag(_require(value, "ok", f"{name}."), f"{name}.ok")
    backend = _require(value, "backend", f"{name}.")
    if backend is None and (name == "shadow" or ok):
        raise InvalidRecord(f"{name}.backend is null for an answered {name} call")
    if backend is not None and (not isinstance(backend, str) or not backend.strip()):
        raise InvalidRecord(f"{name}.backend={_shown(backend)} is not a backend name")
    ids = value.get("ids", [])
    if not isinstance(ids, list) or not set(map(type, ids)) <= {str}:
        raise InvalidRecord(f"{name}.ids is not a list of strings")
    error = value.get("error")
    if error is not None and not isinstance(error, (str, dict)):
        raise InvalidRecord(f"{name}.error={_shown(error)} is neither text nor an object")
    return Side(
        backend=backend,
        latency_ms=_number(_require(value, "latencyMs", f"{name}."), f"{name}.latencyMs"),
        ok=ok,
        count=_count(_require(value, "count", f"{name}."), f"{name}.count"),
        cross_user=_count(_require(value, "crossUser", f"{name}."), f"{name}.crossUser"),
    )


def parse_record(record: Any) -> Comparison:
    """A decoded JSON value as a :class:`Comparison`, or :class:`InvalidRecord` naming what is wrong."""
    if not isinstance(record, dict):
        raise InvalidRecord(f"a JSON {type(record).__name__}, not an object")
    request_id = _require(record, "requestId", "")
    if not isinstance(request_id, str) or not request_id.strip() or len(request_id) > MAX_REQUEST_ID:
        raise InvalidRecord(f"requestId={_shown(request_id)} is not a request id")
    user = record.get("user")
    if user is not None and not isinstance(user, str):
        raise InvalidRecord(f"user={_shown(user)} is not a string")
    top1 = _require(record, "top1Agree", "")
    if top1 is not None:
        top1 = 1.0 if _flag(top1, "top1Agree") else 0.0
    mismatch = _require(record, "dimensionMismatch", "")
    if mismatch is not None and (not isinstance(mismatch, dict) or not mismatch):
        raise InvalidRecord(f"dimensionMismatch={_shown(mismatch)} is neither null nor an object")
    return Comparison(
        request_id=request_id,
        ts=_timestamp(_require(record, "ts", "")),
        k=_count(_require(record, "k", ""), "k", low=1),
        primary=_side(record, "primary"),
        shadow=_side(record, "shadow"),
        overlap_at_k=_optional_fraction(record, "overlapAtK"),
        rbo=_optional_fraction(record, "rbo"),
        top1_agree=top1,
        dimension_mismatch=mismatch is not None,
        started_at=None if record.get("startedAt") is None else _started(record["startedAt"]),
    )


def decode_line(raw: bytes) -> Any:
    """One line of the log as strict JSON (:class:`InvalidRecord` when it is not UTF-8 JSON)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRecord(f"not UTF-8 text (byte {exc.start})") from exc
    return loads_strict(text)


def parse_line(raw: bytes) -> Comparison:
    """One line of the log as a :class:`Comparison` (:class:`InvalidRecord` naming what is wrong)."""
    return parse_record(decode_line(raw))


# ---- the whole log -------------------------------------------------------------------------------

_PLAIN_ID = re.compile(r"[!-~]+")  # visible ASCII: the service's own ids (the fast path)


def request_key(request_id: str) -> str:
    """What makes two requestIds the same request: their text with letter case, whitespace, invisible
    (format) characters and Unicode compatibility forms taken out -- a log re-shipped through a tool
    that changed how an id is spelled repeats the comparison, it adds no evidence."""
    if _PLAIN_ID.fullmatch(request_id):
        return request_id.lower()
    text = unicodedata.normalize("NFKC", request_id)
    kept = "".join(ch for ch in text if not ch.isspace() and unicodedata.category(ch) != "Cf")
    return kept.casefold()


def log_files(path: str | Path) -> list[Path]:
    """The files of a comparison log, oldest first: the rotated ``<path>.1`` (when present), then ``path``."""
    log = Path(path)
    rotated = log.with_name(log.name + ".1")
    return [rotated, log] if rotated.is_file() else [log]


class _Reader:
    """Accumulates one log's lines into a :class:`ComparisonLog`."""

    def __init__(self, files: list[Path]) -> None:
        self.log = ComparisonLog([], [str(f) for f in files], "")
        self.seen: dict[str, Comparison] = {}  # request_key(requestId) -> its first comparison
        self.objects = 0  # lines that are JSON objects, valid comparisons or not

    def damage(self, file: Path, number: int, reason: str) -> None:
        self.log.damaged += 1
        if len(self.log.damage_examples) < DAMAGE_EXAMPLES:
            self.log.damage_examples.append(Damage(str(file), number, reason))

    def add(self, file: Path, number: int, raw: bytes, *, last_of_live_file: bool) -> None:
        self.log.lines += 1
        try:
            decoded = decode_line(raw)
            self.objects += isinstance(decoded, dict)
            record = parse_record(decoded)
        except InvalidRecord as exc:
            if last_of_live_file:  # no newline yet: still being written, not damage
                self.log.incomplete_last_line = True
            else:
                self.damage(file, number, str(exc))
            return
        key = request_key(record.request_id)
        first = self.seen.get(key)
        if first is None:
            self.seen[key] = record
            self.log.records.append(record)
        elif first == dataclasses.replace(record, request_id=first.request_id):
            self.log.duplicates += 1  # every field the judge reads, the time to the microsecond included
        else:
            self.log.conflicts.append(record)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off while millions of acyclic dicts are built (it would otherwise
    rescan them again and again: two thirds of the reading time of a full log)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _read_file(reader: _Reader, digest: Any, file: Path, *, live: bool) -> None:
    data = file.read_bytes()
    digest.update(data)
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        raw = raw.removesuffix(b"\r")
        if raw.strip():
            reader.add(file, number, raw, last_of_live_file=live and number == len(lines))


def read_comparison_log(path: str | Path) -> ComparisonLog:
    """Every line of a comparison log (its rotated part first), sorted into comparisons, duplicates,
    conflicts and damage. A missing log, or a file in which not one line is even a JSON object (a
    binary or some other file), is a :class:`UsageError` naming the file."""
    if not Path(path).is_file():
        raise UsageError("log", str(path), "no such comparison log")
    files = log_files(path)
    reader = _Reader(files)
    digest = hashlib.sha256()
    with _collector_paused():
        for index, file in enumerate(files):
            _read_file(reader, digest, file, live=index == len(files) - 1)
    log = reader.log
    log.sha256 = digest.hexdigest()
    if log.lines and not reader.objects:  # a binary or some other file: bad input, not a damaged log
        first = f" (first: {log.damage_examples[0]})" if log.damage_examples else ""
        raise UsageError("log", str(path), f"not a comparison log: none of its {log.lines} lines is a "
                                           f"JSON object{first}")  # fmt: skip
    return log
