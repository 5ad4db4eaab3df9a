"""Shadow reads: the primary answers the caller; a sample of resolves is replayed against a shadow backend.

Settings: ``MEMORY_SHADOW_BACKEND=<name>`` (a registered backend that supports resolve),
``MEMORY_SHADOW_SAMPLE`` (0..1, default 0: the share of resolves shadowed), ``MEMORY_SHADOW_LOG``
(default ``<workspace>/shadow/comparisons.jsonl``), ``MEMORY_SHADOW_LOG_MAX`` (records per file,
default 100,000; past it the file is rotated to ``<log>.1``, so at most twice that is kept) and
``MEMORY_SHADOW_QUEUE`` (default 1,000). A bad value is a config error in the status and turns the
shadow off; it never breaks the primary.

The caller never waits for the shadow: a sampled request is put on a bounded queue (dropped and
counted when the queue is full) and one worker thread calls the shadow backend's ``resolve`` with the
facade's deadline (:func:`~memwork.facade.safety.call_with_timeout`), compares, and appends one line.

Comparison log: JSON lines, one object per shadowed request (field names are stable; the canary judge
reads them with :func:`read_comparisons`)::

    ts            ISO 8601 UTC time the comparison was recorded
    requestId     the id the service returned in the X-Request-Id header
    user          sha256 of the user id, first 16 hex digits (never the id itself)
    k             the request's limit
    primary, shadow   each {backend, latencyMs, ok, error, errorCode, ids, count, crossUser}:
                  backend    the backend that answered (primary: the facade's source)
                  latencyMs  wall time of the call in ms (primary: as the service measured it)
                  ok         false when the call failed, timed out or was unavailable
                  error      the loggable reason (:func:`memwork.loggable.loggable_error`: no value
                             of the request, no response body, no query string, <= 200
                             characters), or null
                  errorCode  its code (http_400, timeout, connection_refused, ...), or null
                  ids        memory ids returned, semanticMemories then memories, first k, no repeats
                  count      items returned (semanticMemories + memories)
                  crossUser  items whose userId names another user (critical; items without a
                             userId are not counted)
    overlapAtK    |top-d(primary) & top-d(shadow)| / d with d = min(k, longer list); null if both empty
    rbo           rank-biased overlap (p = 0.9, extrapolated, Webber et al. 2010); null if both empty
    top1Agree     the first ids are equal; null if both empty (false if only one is)
    fewerThanK    {primary, shadow}: that side returned fewer than k ids
    dimensionMismatch  null, or {side, dimensions} when an error says the embedding dimension differs
    startedAt     ISO 8601 UTC time the service's shadow reader started (the judge sets the first
                  seconds after a (re)start apart as warm-up); absent in logs of older versions

Nothing of the request reaches the log but ``user`` (a digest) and ``k``: no user id, query,
session id or message text, in any form, even when a backend's error echoes the request.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import queue
import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memwork.backends.base import backend_name, operation_of, supports_of
from memwork.facade.facade import MemoryFacade
from memwork.facade.policy import ConfigIssue
from memwork.facade.safety import call_with_timeout
from memwork.loggable import RequestValues, loggable_error, request_values
from memwork.redaction import redact_url
from memwork.service.models import CANARY_USER_PREFIX
from memwork.workspace import workspace_dir

log = logging.getLogger("memwork.service.shadow")

BACKEND_VAR = "MEMORY_SHADOW_BACKEND"
SAMPLE_VAR = "MEMORY_SHADOW_SAMPLE"
LOG_VAR = "MEMORY_SHADOW_LOG"
LOG_MAX_VAR = "MEMORY_SHADOW_LOG_MAX"
QUEUE_VAR = "MEMORY_SHADOW_QUEUE"
DEFAULT_LOG_MAX = 100_000
DEFAULT_QUEUE = 1_000
RBO_P = 0.9
RESULT_KEYS = ("semanticMemories", "memories")
_DIMENSION_RE = re.compile(r"dimension", re.I)
_NUMBER_RE = re.compile(r"\b\d{1,6}\b")


# ---- settings ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ShadowSettings:
    """What to shadow and where to log; ``errors`` non-empty means the shadow is off."""

    backend: str | None = None
    sample: float = 0.0
    log_path: Path | None = None
    log_max: int = DEFAULT_LOG_MAX
    queue_size: int = DEFAULT_QUEUE
    errors: tuple[ConfigIssue, ...] = ()

    @property
    def enabled(self) -> bool:
        return self.backend is not None and self.sample > 0 and not self.errors


def aa_env(env: Mapping[str, str], log_path: str | Path) -> dict[str, str]:
    """The service environment of an A/A stage: the primary backend (``MEMORY_BACKEND``, default
    legacy) shadowed by itself on every resolve, logged to ``log_path``. Serve with it for a while
    before the A/B stages: the log it writes is the judge's ``aa_log`` (``--aa-log``), the noise
    floor -- how far the primary agrees with itself and how much its p95 moves between two calls --
    against which the A/B agreement and latency are judged."""
    primary = (env.get("MEMORY_BACKEND") or "").strip() or "legacy"
    return {**env, BACKEND_VAR: primary, SAMPLE_VAR: "1", LOG_VAR: str(log_path)}


def default_log_path() -> Path:
    """Where ``memwork serve`` writes its comparisons unless ``MEMORY_SHADOW_LOG`` says otherwise:
    ``<workspace>/shadow/comparisons.jsonl`` -- and so where the judge reads them by default."""
    return workspace_dir(create=False) / "shadow" / "comparisons.jsonl"


def _count(env: Mapping[str, str], name: str, default: int, errors: list[ConfigIssue]) -> int:
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    if raw.isdigit() and int(raw) >= 1:
        return int(raw)
    errors.append(ConfigIssue(name, raw, "must be a whole number >= 1; shadow reads are off"))
    return default


def _sample(env: Mapping[str, str], errors: list[ConfigIssue]) -> float:
    raw = (env.get(SAMPLE_VAR) or "").strip()
    if not raw:
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value <= 1.0:  # NaN fails too
        errors.append(ConfigIssue(SAMPLE_VAR, raw, "must be a number from 0 to 1; shadow reads are off"))
        return 0.0
    return value


def shadow_settings_from_env(env: Mapping[str, str]) -> ShadowSettings:
    """The shadow settings ``env`` describes (never raises: bad values become ``errors``)."""
    errors: list[ConfigIssue] = []
    backend = (env.get(BACKEND_VAR) or "").strip() or None
    sample = _sample(env, errors)
    log_max = _count(env, LOG_MAX_VAR, DEFAULT_LOG_MAX, errors)
    queue_size = _count(env, QUEUE_VAR, DEFAULT_QUEUE, errors)
    if sample > 0 and backend is None:
        errors.append(ConfigIssue(BACKEND_VAR, None, f"required when {SAMPLE_VAR} > 0; shadow reads are off"))
    raw_log = (env.get(LOG_VAR) or "").strip()
    log_path = Path(raw_log).expanduser() if raw_log else default_log_path()
    return ShadowSettings(backend, sample, log_path, log_max, queue_size, tuple(errors))


# ---- comparison metrics --------------------------------------------------------------------------
def result_items(result: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    """semanticMemories then memories: the items a resolve answer returned."""
    items: list[Mapping[str, Any]] = []
    for key in RESULT_KEYS:
        value = (result or {}).get(key)
        if isinstance(value, list):
            items.extend(i for i in value if isinstance(i, Mapping))
    return items


def item_ids(items: Iterable[Mapping[str, Any]], k: int) -> list[str]:
    """The first ``k`` distinct ids, in answer order (items without an id are skipped)."""
    ids: list[str] = []
    for item in items:
        raw = item.get("id")
        if raw is None:
            continue
        text = str(raw)
        if text not in ids:
            ids.append(text)
        if len(ids) == k:
            break
    return ids


def cross_user_count(items: Iterable[Mapping[str, Any]], user_id: str) -> int:
    """Items naming another user (exact compare: ``TenantX`` is not ``tenantx``)."""
    return sum(1 for i in items if "userId" in i and i["userId"] is not None and i["userId"] != user_id)


def overlap_at_k(a: Sequence[str], b: Sequence[str], k: int) -> float | None:
    """Shared ids in the top ``d`` of both, over ``d = min(k, len of the longer list)``.

    Dividing by ``d`` rather than ``k`` keeps two identical short answers (a user with 3 memories,
    k = 40) at 1.0; ``fewerThanK`` says separately that the answers were short."""
    depth = min(k, max(len(a), len(b)))
    if depth == 0:
        return None
    return len(set(a[:depth]) & set(b[:depth])) / depth


def rbo(a: Sequence[str], b: Sequence[str], p: float = RBO_P) -> float | None:
    """Extrapolated rank-biased overlap (Webber, Moffat, Zobel 2010, eq. 32) of two id rankings.

    Handles lists of different lengths; 1.0 for identical lists, 0.0 for disjoint ones, None when
    both are empty. Ids are expected distinct (see :func:`item_ids`)."""
    if not a and not b:
        return None
    if not a or not b:
        return 0.0
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    s, length = len(short), len(long_)
    seen_s: set[str] = set()
    seen_l: set[str] = set()
    overlap = 0
    x: list[int] = [0]  # x[d] = overlap of the depth-d prefixes (short stays whole past its end)
    for d in range(1, length + 1):
        item_l = long_[d - 1]
        if d <= s:
            item_s = short[d - 1]
            if item_s == item_l:
                overlap += 1
            else:
                overlap += (item_s in seen_l) + (item_l in seen_s)
            seen_s.add(item_s)
        elif item_l in seen_s:
            overlap += 1
        seen_l.add(item_l)
        x.append(overlap)
    total = sum(x[d] / d * p**d for d in range(1, length + 1))
    total += sum(x[s] * (d - s) / (s * d) * p**d for d in range(s + 1, length + 1))
    value = (1 - p) / p * total + ((x[length] - x[s]) / length + x[s] / s) * p**length
    return max(0.0, min(1.0, value))


def top1_agree(a: Sequence[str], b: Sequence[str]) -> bool | None:
    if not a and not b:
        return None
    return bool(a and b and a[0] == b[0])


def _dimension_numbers(error: str | None) -> list[int] | None:
    if not error or not _DIMENSION_RE.search(error):
        return None
    return [int(n) for n in _NUMBER_RE.findall(error)]


def dimension_mismatch(primary_error: str | None, shadow_error: str | None) -> dict[str, Any] | None:
    """``{side, dimensions}`` when an error speaks of the embedding dimension (numbers it names)."""
    found = {
        side: _dimension_numbers(err) for side, err in (("primary", primary_error), ("shadow", shadow_error))
    }
    sides = [side for side, numbers in found.items() if numbers is not None]
    if not sides:
        return None
    numbers = [n for side in sides for n in found[side] or []]
    return {"side": sides[0] if len(sides) == 1 else "both", "dimensions": list(dict.fromkeys(numbers))}


@dataclass(frozen=True)
class SideResult:
    """One side of a comparison as the log records it (``error``: the exception, or the reason text)."""

    backend: str | None
    latency_ms: float
    ok: bool
    error: BaseException | str | None
    result: Mapping[str, Any] | None

    def record(self, user_id: str, k: int, sensitive: RequestValues | None = None) -> dict[str, Any]:
        """The log's side object; ``sensitive``: the request's values, kept out of ``error``."""
        items = result_items(self.result)
        problem = None if self.error is None else loggable_error(self.error, sensitive)
        return {
            "backend": self.backend,
            "latencyMs": round(self.latency_ms, 3),
            "ok": self.ok,
            "error": None if problem is None else problem.reason,
            "errorCode": None if problem is None else problem.code,
            "ids": item_ids(items, k),
            "count": len(items),
            "crossUser": cross_user_count(items, user_id),
        }


def user_digest(user_id: str) -> str:
    return hashlib.sha256(user_id.encode("utf-8")).hexdigest()[:16]


def compare(
    request_id: str,
    user_id: str,
    k: int,
    primary: SideResult,
    shadow: SideResult,
    sensitive: RequestValues | None = None,
    started_at: str | None = None,
) -> dict[str, Any]:
    """One comparison-log record (schema in the module docstring); ``sensitive``: the request's values
    (the user id is always among them); ``started_at``: when the shadow reader started."""
    values = sensitive if sensitive is not None else request_values({"userId": user_id})
    left, right = primary.record(user_id, k, values), shadow.record(user_id, k, values)
    a, b = left["ids"], right["ids"]
    return {
        "ts": datetime.now(UTC).isoformat(),
        "requestId": request_id,
        "user": user_digest(user_id),
        "k": k,
        "primary": left,
        "shadow": right,
        "overlapAtK": overlap_at_k(a, b, k),
        "rbo": rbo(a, b),
        "top1Agree": top1_agree(a, b),
        "fewerThanK": {"primary": len(a) < k, "shadow": len(b) < k},
        "dimensionMismatch": dimension_mismatch(left["error"], right["error"]),
        **({"startedAt": started_at} if started_at else {}),
    }


# ---- the bounded log -----------------------------------------------------------------------------
class ComparisonLog:
    """Append-only JSON lines, rotated to ``<path>.1`` past ``max_records`` (so <= 2x is ever kept).

    Each append holds an exclusive ``flock`` on ``<path>.lock``, so two service processes sharing a
    log neither interleave lines nor both rotate; the record count is re-read only when another
    writer changed the file since this one last wrote."""

    def __init__(self, path: Path, max_records: int) -> None:
        self.path = path
        self.max_records = max_records
        self._known: tuple[int, int] | None = None  # (inode, size) after our last write
        self._records = 0

    def touch(self) -> None:
        """Create the (empty) log: a stage whose sample rate has recorded nothing yet still has its log,
        so a rollout page lists the stage with 0 comparisons instead of losing it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.touch(exist_ok=True)

    @property
    def rotated(self) -> Path:
        return self.path.with_name(self.path.name + ".1")

    def _current_records(self) -> int:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return 0
        if self._known != (stat.st_ino, stat.st_size):
            with self.path.open("rb") as handle:
                self._records = sum(1 for _ in handle)
        return self._records

    def append(self, record: Mapping[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            records = self._current_records()
            if records >= self.max_records:
                os.replace(self.path, self.rotated)
                records = 0
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(line)
                handle.flush()
                stat = os.fstat(handle.fileno())
            self._records = records + 1
            self._known = (stat.st_ino, stat.st_size)


def read_comparisons(path: str | Path, *, include_rotated: bool = True) -> list[dict[str, Any]]:
    """Every comparison in the log, oldest first (``<path>.1`` first when ``include_rotated``).

    A line that is not a JSON object (a torn last line after a crash) is skipped, not fatal."""
    path = Path(path)
    files = [path.with_name(path.name + ".1"), path] if include_rotated else [path]
    records: list[dict[str, Any]] = []
    for file in files:
        if not file.exists():
            continue
        with file.open(encoding="utf-8", errors="replace") as handle:
            for line in handle:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict):
                    records.append(record)
    return records


# ---- the reader ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Job:
    request_id: str
    request: dict[str, Any]
    primary: SideResult


#: what the shadow reader counts (``synthetic``: canary users' requests, never shadowed)
COUNTERS = ("sampled", "recorded", "dropped", "errors", "logErrors", "synthetic")


class ShadowReader:
    """Samples resolves, queues them (bounded), and compares in one worker thread off the reply path."""

    def __init__(
        self,
        settings: ShadowSettings,
        facade: MemoryFacade,
        *,
        chance: Callable[[], float] = random.random,
    ) -> None:
        self.facade = facade
        self._chance = chance
        self.started_at = datetime.now(UTC).isoformat()
        self.counters = dict.fromkeys(COUNTERS, 0)
        self._lock = threading.Lock()
        self._queue: queue.Queue[_Job | None] = queue.Queue(maxsize=settings.queue_size)
        self._worker: threading.Thread | None = None
        self.settings = self._checked(settings)
        self.log = ComparisonLog(self.settings.log_path or default_log_path(), self.settings.log_max)
        if self.settings.enabled:
            try:
                self.log.touch()
            except OSError:  # an unwritable log is counted, as a failed append is; reads go on
                self.counters["logErrors"] += 1

    def _checked(self, settings: ShadowSettings) -> ShadowSettings:
        """Settings with a config error added when the shadow backend is unknown or cannot resolve."""
        if not settings.enabled or settings.backend is None:
            return settings
        backend = self.facade.registry.find(settings.backend)
        problem = None
        if backend is None:
            problem = "is not a registered backend; shadow reads are off"
        elif not supports_of(backend)["resolve"]:
            problem = "does not support resolve; shadow reads are off"
        if problem is None:
            return settings
        issue = ConfigIssue(BACKEND_VAR, settings.backend, problem)
        return ShadowSettings(
            settings.backend, settings.sample, settings.log_path, settings.log_max, settings.queue_size,
            (*settings.errors, issue),
        )  # fmt: skip

    def _count(self, name: str) -> None:
        with self._lock:
            self.counters[name] += 1

    def submit(
        self, request: Mapping[str, Any], primary: Mapping[str, Any], latency_ms: float, request_id: str
    ) -> bool:
        """Queue a shadow read of ``request`` if sampled; never blocks. True when queued. A synthetic
        canary user's request (``memory-v2-canary-*``: the app canary's and the leak probes' users,
        written after the backfill, so never in the shadow) is never shadowed, only counted: it is not
        traffic the judge should weigh."""
        if not self.settings.enabled or primary.get("skipped"):
            return False
        if str(request.get("userId", "")).startswith(CANARY_USER_PREFIX):
            self._count("synthetic")
            return False
        if self._chance() >= self.settings.sample:
            return False
        self._count("sampled")
        side = SideResult(
            primary.get("source"), latency_ms, bool(primary.get("ok")), primary.get("reason"), primary
        )
        self._ensure_worker()
        try:
            self._queue.put_nowait(_Job(request_id, dict(request), side))
        except queue.Full:
            self._count("dropped")
            return False
        return True

    def _ensure_worker(self) -> None:
        with self._lock:
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._drain, name="memwork-shadow", daemon=True)
                self._worker.start()

    def _drain(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is None:
                    return
                self._compare(job)
            except Exception as exc:  # the worker must outlive any one bad comparison
                self._count("logErrors")
                problem = loggable_error(exc, job.request if job is not None else None)
                log.warning("shadow comparison not recorded: %s", problem.line())
            finally:
                self._queue.task_done()

    def shadow_call(self, request: Mapping[str, Any]) -> SideResult:
        """The shadow backend's resolve under the facade's deadline; failures become ``ok=False``."""
        name = self.settings.backend or ""
        backend = self.facade.registry.find(name)
        started = time.perf_counter()
        result: Mapping[str, Any] | None = None
        error: BaseException | str | None = None
        if backend is None:
            error = f"{name} is not a registered backend"
        else:
            name = backend_name(backend)
            avail = self.facade.availability(backend)
            if not avail.available:
                error = f"{name} unavailable ({avail.reason or 'no reason given'})"
            else:
                method = operation_of(backend, "resolve")
                try:
                    value = call_with_timeout(
                        lambda: method(dict(request)), self.facade.policy.timeout_s, f"shadow.{name}.resolve"
                    )
                    if not isinstance(value, Mapping):
                        raise TypeError(f"{name} resolve returned {type(value).__name__}, not an object")
                    result = value
                except Exception as exc:
                    error = exc
        latency = (time.perf_counter() - started) * 1000
        return SideResult(name, latency, error is None, error, result)

    def _compare(self, job: _Job) -> None:
        shadow = self.shadow_call(job.request)
        if not shadow.ok:
            self._count("errors")
        user_id = str(job.request.get("userId"))
        k = int(job.request.get("limit") or 1)
        sensitive = request_values(job.request)
        self.log.append(compare(job.request_id, user_id, k, job.primary, shadow, sensitive, self.started_at))
        self._count("recorded")

    def drain(self, timeout_s: float = 5.0) -> bool:
        """Wait until the queue is empty and the last job done (tests, shutdown); True if it was."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._queue.unfinished_tasks == 0:
                return True
            time.sleep(0.01)
        return False

    def status(self) -> dict[str, Any]:
        """Settings, queue depth and counters (``sampled, recorded, dropped, errors, logErrors``, and
        ``synthetic``: canary users' requests left unshadowed)."""
        settings = self.settings
        with self._lock:
            counters = dict(self.counters)
        return {
            "enabled": settings.enabled,
            "backend": settings.backend,
            "sample": settings.sample,
            "log": redact_url(str(self.log.path)),
            "logMax": settings.log_max,
            "queueSize": settings.queue_size,
            "queued": self._queue.qsize(),
            "counters": counters,
            "configErrors": [
                {"field": e.field, "value": e.value, "problem": e.problem} for e in settings.errors
            ],
        }

    def close(self) -> None:
        """Stop the worker after the queued jobs (bounded wait; it is a daemon thread anyway)."""
        worker = self._worker
        if worker is not None and worker.is_alive():
            try:
                self._queue.put(None, timeout=1.0)
            except queue.Full:
                return
            worker.join(timeout=2.0)


def shadow_from_env(env: Mapping[str, str], facade: MemoryFacade) -> ShadowReader:
    """The shadow reader ``env`` describes over ``facade``'s registry and deadline."""
    return ShadowReader(shadow_settings_from_env(env), facade)
