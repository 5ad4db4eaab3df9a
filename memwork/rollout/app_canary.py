"""The app canary (``memwork canary app``): is a *running* memwork service serving what we expect?

Over HTTP only, like a load balancer's health check but deeper: the status expectations
(``/api/runtime/status``: enabled, configured backend, selected backend, the target backend
available with no reason), then a remember-recent -> sync -> resolve round trip for a synthetic user
``memory-v2-canary-<uuid>``, then that user forgotten (``/forget``), and a last resolve proving it.
Every expectation is checked even after one failed, so one run lists every failure. A service that
cannot be reached is one failed step naming why (the token never shown).
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from memwork.redaction import describe_error, redact_url
from memwork.rollout.roundtrip import Step, answer_items, synthetic_request

STATUS_PATH = "/api/runtime/status"
RESOLVE_PATH = "/user-memory/v1/resolve"
WRITE_PATH = "/user-memory/v1/remember-recent"
COMPACT_PATH = "/user-memory/v1/sync"
FORGET_PATH = "/user-memory/v1/forget"
CANARY_USER_PREFIX = "memory-v2-canary-"
TOKEN_ENV = "MEMWORK_API_TOKEN"
#: one call of the canary; generous against the facade's own 2 s deadline
TIMEOUT_S = 10.0


@dataclass
class AppCanaryReport:
    """Every step of one app canary run."""

    base_url: str
    userId: str
    steps: list[Step] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.steps) and all(s.ok for s in self.steps)

    @property
    def failures(self) -> list[str]:
        return [f"{s.name}: {s.detail}" for s in self.steps if not s.ok]

    def add(self, name: str, ok: bool, detail: str) -> None:
        self.steps.append(Step(name, bool(ok), detail))

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "base_url": self.base_url,
            "userId": self.userId,
            "steps": [asdict(s) for s in self.steps],
            "failures": self.failures,
        }


def check_base_url(base_url: str, field: str = "base_url") -> str:
    """The service URL, or :class:`~memwork.errors.UsageError` when it is not one: an http(s) URL with
    a host and, if given, a port from 1 to 65535 (a malformed URL is bad input, not an unreachable
    service)."""
    from urllib.parse import urlsplit

    from memwork.errors import UsageError

    shown = redact_url(base_url) or base_url
    try:
        parts = urlsplit(base_url)
        port = parts.port
    except ValueError as exc:
        raise UsageError(field, shown, f"not a URL ({exc})") from exc
    if parts.scheme not in ("http", "https"):
        raise UsageError(field, shown, "must be an http:// or https:// URL")
    if not parts.hostname or any(c.isspace() for c in base_url):
        raise UsageError(field, shown, "not a URL: no host name")
    if port is not None and not 1 <= port <= 65535:
        raise UsageError(field, shown, "the port must be from 1 to 65535")
    return base_url


def bearer_token(raw: str | None) -> str:
    """The token a client sends, read by the service's own rules
    (:func:`memwork.service.guards.token_setting`): surrounding ASCII whitespace -- a secret file's
    trailing newline or CR -- is trimmed, so a value the service accepts works here too; a value it
    refuses (inner whitespace, control or non-ASCII characters) is a usage error naming the variable,
    never showing the value: sent, it would fail with the token printed in the HTTP library's error.
    Empty (or None) means no token."""
    if not raw:
        return ""
    from memwork.errors import UsageError
    from memwork.service.guards import token_setting

    setting = token_setting({TOKEN_ENV: raw})
    if setting.problem is not None or setting.token is None:
        raise UsageError(TOKEN_ENV, setting.shape, setting.problem or "is not a usable bearer token")
    return setting.token


def client(base_url: str, token: str = "") -> Any:
    """A JSON client for the service (bearer token when given; the token scrubbed from errors)."""
    from memwork.http import HttpSettings, JsonHttpClient

    usable = bearer_token(token)
    headers = {"Authorization": f"Bearer {usable}"} if usable else {}
    settings = HttpSettings(timeout_s=TIMEOUT_S, connect_timeout_s=min(2.0, TIMEOUT_S), retries=1)
    return JsonHttpClient(
        "memwork service", base_url, headers=headers, settings=settings, secrets=[token, usable]
    )


def fetch_status(base_url: str, token: str = "") -> dict[str, Any]:
    """``GET /api/runtime/status`` of the service (raises :class:`~memwork.http.HttpError`)."""
    http = client(base_url, token)
    try:
        status = http.get_json(STATUS_PATH)
    finally:
        http.close()
    if not isinstance(status, dict):
        from memwork.http import HttpError

        raise HttpError(f"memwork service GET {STATUS_PATH}: not a JSON object")
    return status


def same_backend(expected: str, actual: object) -> bool:
    """``expected`` names ``actual`` or is an alias of it (``legacy``, ``legacy-conversation-memory``)."""
    if not isinstance(actual, str):
        return False
    if expected == actual:
        return True
    from memwork.plugins import Registry

    registry = Registry({})
    try:
        return registry.same(expected, actual)
    finally:
        registry.close()


def _backend_entry(memory: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    for entry in memory.get("backends") or []:
        if isinstance(entry, dict) and same_backend(name, entry.get("name")):
            return entry
    return None


def status_expectations(
    report: AppCanaryReport,
    memory: Mapping[str, Any],
    *,
    require_enabled: bool,
    require_target_healthy: bool,
    expect_backend: str | None,
    expect_selected_backend: str | None,
) -> None:
    """Each requested expectation on the ``memory`` part of the status, pass or fail."""
    if require_enabled:
        report.add("enabled", memory.get("enabled") is True, f"enabled={memory.get('enabled')}")
    if expect_backend:
        actual = memory.get("backend")
        report.add(
            "backend",
            same_backend(expect_backend, actual),
            f"configured backend {actual!r}, expected {expect_backend!r}",
        )
    if expect_selected_backend:
        actual = memory.get("selectedBackend")
        detail = f"selected backend {actual!r}, expected {expect_selected_backend!r}"
        fallback = (
            (memory.get("fallbacks") or {}).get("resolve")
            if isinstance(memory.get("fallbacks"), dict)
            else None
        )
        report.add(
            "selectedBackend",
            same_backend(expect_selected_backend, actual),
            detail + (f" ({fallback})" if fallback else ""),
        )
    if require_target_healthy:
        target = expect_selected_backend or expect_backend or str(memory.get("backend") or "")
        entry = _backend_entry(memory, target)
        if entry is None:
            report.add("targetHealthy", False, f"backend {target!r} is not in the status")
        else:
            healthy = entry.get("available") is True and not entry.get("reason")
            detail = f"{entry.get('name')}: available={entry.get('available')}, reason={entry.get('reason')}"
            report.add("targetHealthy", healthy, detail)


def _call(
    report: AppCanaryReport, http: Any, name: str, path: str, body: dict[str, Any]
) -> dict[str, Any] | None:
    """One POST as a step: ok when the service answers 2xx with ``ok: true``."""
    try:
        answer = http.post_json(path, body, idempotent=name.startswith("resolve"))
    except Exception as exc:
        report.add(name, False, describe_error(exc))
        return None
    if not isinstance(answer, dict):
        report.add(name, False, f"answer is not a JSON object: {type(answer).__name__}")
        return None
    ok = answer.get("ok") is True
    report.add(name, ok, (answer.get("reason") if not ok else None) or f"source={answer.get('source')}")
    return answer


def round_trip(report: AppCanaryReport, http: Any, memory: Mapping[str, Any]) -> None:
    """remember-recent -> sync -> resolve for the canary user; then forget it and check it is gone.

    Whether the written memory must come back is decided as the self-check does: only when the
    backend that answered the resolve is the one selected for writes (a read-only pgvector does not
    hold what legacy just stored)."""
    _call(report, http, "write", WRITE_PATH, synthetic_request(report.userId, "write"))
    _call(report, http, "compact", COMPACT_PATH, synthetic_request(report.userId, "compact"))
    query = synthetic_request(report.userId, "resolve")
    answer = _call(report, http, "resolve", RESOLVE_PATH, query) or {}
    answered = answer.get("ok") is True and not answer.get("skipped")
    if answer.get("ok") is True:
        tenant_check(report, answer)
    selected = memory.get("selectedBackends")
    writer = str(selected.get("write") or "") if isinstance(selected, dict) else ""
    same_store = answered and same_backend(writer, answer.get("source"))
    if same_store:
        found = bool(answer_items(answer))
        report.add("roundTrip", found, "written memory resolved" if found else "nothing resolved")
    forget(report, http)
    if same_store:
        again = _call(report, http, "resolve after forget", RESOLVE_PATH, query) or {}
        if again.get("ok") is True:
            left = len(answer_items(again))
            report.add(
                "forgotten", left == 0, "nothing left" if not left else f"{left} memories still resolved"
            )


def tenant_check(report: AppCanaryReport, answer: Mapping[str, Any]) -> None:
    """Every memory in the canary user's answer is the canary user's."""
    others = sorted(
        {str(i.get("userId")) for i in answer_items(answer) if i.get("userId") not in (None, report.userId)}
    )
    detail = f"memories of other users returned: {', '.join(others)}" if others else "only the canary user's"
    report.add("tenant", not others, detail)


def forget(report: AppCanaryReport, http: Any) -> None:
    """Remove the canary user's data (the service only forgets ``memory-v2-canary-*`` users)."""
    try:
        answer = http.post_json(FORGET_PATH, {"userId": report.userId})
    except Exception as exc:
        report.add("forget", False, describe_error(exc))
        return
    ok = isinstance(answer, dict) and answer.get("ok") is True
    report.add("forget", ok, forget_detail(answer))


def forget_detail(answer: Any) -> str:
    """What ``/forget`` said: each backend's purge failure (its ``purged`` map holds ``{"error": ...}``
    for a backend that failed), the reason of a skipped or refused forget, or what was removed."""
    if not isinstance(answer, dict):
        return f"answer is not a JSON object: {type(answer).__name__}"
    purged = answer.get("purged")
    backends = purged if isinstance(purged, dict) else {}
    failed = [
        f"{name}: {_error_text(done['error'])}"
        for name, done in backends.items()
        if isinstance(done, dict) and "error" in done
    ]
    if failed:
        return "purge failed on " + "; ".join(failed)
    if answer.get("ok") is not True:
        reason = answer.get("reason") or answer.get("error") or answer.get("detail")
        return f"forget answered ok={answer.get('ok')!r}" + (f": {_error_text(reason)}" if reason else "")
    if answer.get("skipped"):
        return f"skipped: {_error_text(answer.get('reason'))}"
    names = ", ".join(str(n) for n in backends) or "no backend offers purge"
    return f"canary user removed ({names})"


def _error_text(error: Any) -> str:
    """An error as the service wrote it -- text, or an object with a code and a reason -- in one line."""
    if isinstance(error, dict):
        parts = [str(error[k]) for k in ("code", "reason", "message") if error.get(k)]
        return ": ".join(parts) if parts else str(error)
    return str(error)


def run_app_canary(
    base_url: str,
    *,
    token: str | None = None,
    require_enabled: bool = False,
    require_target_healthy: bool = False,
    expect_backend: str | None = None,
    expect_selected_backend: str | None = None,
    env: Mapping[str, str] | None = None,
) -> AppCanaryReport:
    """Status expectations, then the round trip, then cleanup; every step recorded, none skipped
    because an earlier one failed (only an unreadable status skips the rest: nothing can be judged)."""
    check_base_url(base_url)
    token = (env if env is not None else os.environ).get(TOKEN_ENV, "") if token is None else token
    token = bearer_token(token)
    report = AppCanaryReport(
        base_url=redact_url(base_url) or base_url, userId=f"{CANARY_USER_PREFIX}{uuid.uuid4()}"
    )
    http = client(base_url, token)
    try:
        try:
            status = http.get_json(STATUS_PATH)
        except Exception as exc:
            report.add("status", False, describe_error(exc))
            return report
        memory = status.get("memory") if isinstance(status, dict) else None
        if not isinstance(memory, dict):
            report.add("status", False, f"{STATUS_PATH} has no 'memory' object")
            return report
        report.status = memory
        report.add(
            "status", True, f"backend={memory.get('backend')}, selected={memory.get('selectedBackend')}"
        )
        status_expectations(
            report,
            memory,
            require_enabled=require_enabled,
            require_target_healthy=require_target_healthy,
            expect_backend=expect_backend,
            expect_selected_backend=expect_selected_backend,
        )
        round_trip(report, http, memory)
    finally:
        http.close()
    return report


# ---- cross-user probes: isolation as a bound ------------------------------------------------------

#: the 95 % upper bound on the cross-user leak rate a rollout must reach (0 leaks in ~3,000 probes)
DEFAULT_MAX_LEAK_RATE = 0.001
#: the share of probes that may be no evidence (an error, or an answer without the asker's own memory)
DEFAULT_MAX_UNINFORMATIVE = 0.05
#: calls in flight at once while planting, probing and forgetting
DEFAULT_CONCURRENCY = 4
PROBE_TOPICS = (
    "the payment service database migration",
    "the quarterly security review",
    "the kubernetes liveness probes",
    "the vector index rebuild",
    "the on-call rotation",
    "the customer churn dashboard",
    "the search relevance tuning",
    "the backup restore drill",
)
PROBE_WORDS = ("amber", "cobalt", "saffron", "teal", "umber", "violet", "jade", "coral", "ochre", "slate")
#: a probe user's secret word: a colour and 8 hex digits
SECRET_PATTERN = re.compile(r"\b(?:" + "|".join(PROBE_WORDS) + r")-[0-9a-f]{8}\b")


def leak_upper_bound(leaks: int, probes: int, confidence: float = 0.95) -> float:
    """The exact one-sided (Clopper-Pearson) upper bound on the leak rate: 0 in N gives about 3 / N."""
    from scipy.stats import beta

    if probes <= 0:
        return 1.0
    if leaks >= probes:
        return 1.0
    return float(beta.ppf(confidence, leaks + 1, probes - leaks))


def probes_needed(max_rate: float, confidence: float = 0.95) -> int:
    """Probes without a leak needed for the upper bound to reach ``max_rate`` (0.1 %: 2,995)."""
    import math

    return math.ceil(math.log(1 - confidence) / math.log1p(-max_rate))


@dataclass(frozen=True)
class ProbeUser:
    """One synthetic probe user: its id, the memory it plants and the secret word only it holds."""

    user: str
    text: str
    secret: str


@dataclass
class LeakProbes:
    """N cross-user probes through the running service and the bound they give.

    A probe is *evidence* only when its answer shows the service read the asker's memories: the
    asker's own secret comes back (or the answer leaked). An answer without it -- empty, as a
    read-only store that never saw the probe users answers -- is ``uninformative``: it says nothing
    about isolation, is left out of the bound, and too many of them make the verdict INCONCLUSIVE."""

    probes: int
    pairs: int = 0  #: distinct user pairs, each asked at most once per direction
    seed: int = 0
    answered: int = 0
    informative: int = 0  #: answers holding the asker's own memory (or a leak): what the bound counts
    uninformative: int = 0
    leaks: int = 0
    errors: int = 0
    max_leak_rate: float = DEFAULT_MAX_LEAK_RATE
    max_uninformative: float = DEFAULT_MAX_UNINFORMATIVE
    max_leak_rate_origin: str = "default"  #: or "set"
    confidence: float = 0.95
    examples: list[str] = field(default_factory=list)
    purge_failures: int = 0
    #: where the probe users' memories were planted: "service" (its write path, remember-recent) or the
    #: pgvector table (:class:`PgvectorPlanter`); with a table, the rows planted and removed, and the
    #: rows of probe users left (-1: unknown) -- the audit line: planted != removed is a failure
    planted_in: str = "service"
    planted: int = 0
    removed: int = 0
    left: int = 0
    cleanup_error: str = ""

    @property
    def cleanup_failed(self) -> bool:
        """Planted in a table and not exactly removed again (or the removal failed)."""
        if self.planted_in == "service":
            return False
        return bool(self.cleanup_error) or self.planted != self.removed or self.left != 0

    @property
    def cleanup(self) -> str:
        """The audit line of a planted run ("" for the service write path)."""
        if self.planted_in == "service":
            return ""
        head = f"planted {self.planted} probe rows in {self.planted_in}, removed {self.removed}"
        head += f", {self.left} left"
        return head + (f" (removal failed: {self.cleanup_error})" if self.cleanup_error else "")

    @property
    def upper_bound(self) -> float:
        return leak_upper_bound(self.leaks, self.informative, self.confidence)

    @property
    def no_evidence(self) -> int:
        """Probes that are no evidence: failed calls and uninformative answers."""
        return self.errors + self.uninformative

    @property
    def too_uninformative(self) -> bool:
        return self.no_evidence > self.max_uninformative * self.probes

    @property
    def verdict(self) -> str:
        """NO-GO on any leak, or planted rows not removed exactly; INCONCLUSIVE when too many probes are
        no evidence or the bound is above the required rate; else GO."""
        if self.leaks or self.cleanup_failed:
            return "NO-GO"
        if self.too_uninformative or not self.informative:
            return "INCONCLUSIVE"
        return "GO" if self.upper_bound <= self.max_leak_rate else "INCONCLUSIVE"

    @property
    def reason(self) -> str:
        """Why the verdict is not GO ("" for GO)."""
        if self.leaks:
            return f"{self.leaks} cross-user leak(s): " + "; ".join(self.examples[:3])
        if self.cleanup_failed:
            return f"cleanup mismatch: {self.cleanup}"
        if self.too_uninformative or not self.informative:
            return (
                f"{self.uninformative} answers held none of the asker's own memories and {self.errors} "
                f"probes failed, of {self.probes} (at most {self.max_uninformative:.0%} allowed): the "
                "service did not read the probe users' memories (a read-only target does not hold what "
                "the probes wrote: plant them there, --plant-pgvector), so its answers are no evidence of "
                "isolation"
            )
        if self.verdict == "INCONCLUSIVE":
            needed = probes_needed(self.max_leak_rate, self.confidence)
            return f"not enough probes to show it (about {needed} without a leak are needed)"
        return ""

    def sentence(self) -> str:
        head = (
            f"{self.leaks} cross-user leaks in {self.informative} informative probes ({self.probes} sent "
            f"across {self.pairs} distinct user pairs, {self.uninformative} uninformative, "
            f"{self.errors} failed): {self.confidence:.0%} upper bound on the leak rate "
            f"{self.upper_bound:.3%}, required < {self.max_leak_rate:.3%} ({self.max_leak_rate_origin})"
        )
        head += f"; {self.cleanup}" if self.cleanup else ""
        return f"{head}: {self.reason}" if self.reason else head

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "upper_bound": self.upper_bound, "verdict": self.verdict,
                "reason": self.reason, "probes_needed": probes_needed(self.max_leak_rate, self.confidence),
                "cleanup_failed": self.cleanup_failed, "sentence": self.sentence()}  # fmt: skip


def probe_pairs(run: str, pairs: int, seed: int = 0) -> list[tuple[ProbeUser, ProbeUser]]:
    """``pairs`` pairs of distinct synthetic users; the two of a pair plant the same sentence (same
    topic) with a different secret word, drawn from ``seed`` (the same seed, the same memories)."""
    import random

    rng = random.Random(seed)
    out = []
    for p in range(pairs):
        topic = PROBE_TOPICS[rng.randrange(len(PROBE_TOPICS))]
        users = []
        for side in "ab":
            secret = f"{rng.choice(PROBE_WORDS)}-{rng.randrange(16**8):08x}"
            user = f"{CANARY_USER_PREFIX}{run}-p{p}{side}"
            users.append(ProbeUser(user, f"I am responsible for {topic}; my code word is {secret}.", secret))
        out.append((users[0], users[1]))
    return out


def _write_probe_memory(http: Any, user: str, text: str) -> None:
    messages = [{"role": "user", "content": text}, {"role": "assistant", "content": "Noted."}]
    body = {"userId": user, "sessionId": f"{user}-session", "messages": messages}
    for path, keys in (
        (WRITE_PATH, ("userId", "sessionId", "messages")),
        (COMPACT_PATH, ("userId", "sessionId")),
    ):
        with contextlib.suppress(Exception):  # a user that could not be planted answers uninformatively
            http.post_json(path, {k: body[k] for k in keys})


def _item_text(item: Mapping[str, Any]) -> str:
    return " ".join(str(item.get(k) or "") for k in ("content", "text", "memory", "summary"))


def leaked(
    answer: Mapping[str, Any], asker: str, other_marker: str, owners: Mapping[str, str] | None = None
) -> list[str]:
    """The items of ``asker``'s answer that belong to someone else: another userId, the other user's
    secret word in its text, or (``owners``: secret -> user) any other probe user's secret word --
    whatever userId the item claims. Each named by its owner when known."""
    found = []
    for item in answer_items(answer):
        owner, text = item.get("userId"), _item_text(item)
        secrets = {m.group(0) for m in SECRET_PATTERN.finditer(text)} if owners else set()
        theirs = sorted({owners[w] for w in secrets if w in owners and owners[w] != asker}) if owners else []
        if owner is not None and owner != asker:
            found.append(str(owner))
        elif theirs:
            found.append(theirs[0])
        elif other_marker in text:
            found.append(str(owner or "(no userId)"))
    return found


def informative(answer: Mapping[str, Any], own_secret: str) -> bool:
    """The answer holds the asker's own planted memory: the service read the asker's store."""
    return any(own_secret in _item_text(item) for item in answer_items(answer))


def run_leak_probes(
    base_url: str,
    probes: int,
    *,
    token: str = "",
    max_leak_rate: float = DEFAULT_MAX_LEAK_RATE,
    max_leak_rate_origin: str = "default",
    max_uninformative: float = DEFAULT_MAX_UNINFORMATIVE,
    confidence: float = 0.95,
    limit: int = 10,
    seed: int = 0,
    concurrency: int = DEFAULT_CONCURRENCY,
    planter: PgvectorPlanter | None = None,
) -> LeakProbes:
    """``probes`` resolves through the running service over ``ceil(probes / 2)`` distinct user pairs,
    each pair asked once per direction: one user asks with the other's near-identical sentence (the
    other's secret word in it); an item of anyone but the asker, or the other's secret, is a leak. A
    probe counts toward the bound only when the answer holds the asker's own secret (see
    :class:`LeakProbes`). The synthetic users are forgotten afterwards (``/forget``); ``concurrency``
    calls are in flight at once.

    With a ``planter`` (:class:`PgvectorPlanter`) the probe users' memories are written straight into
    the pgvector table a pgvector-serving instance resolves from, not through the service's write path
    (which lands in legacy only); they are removed from the table afterwards even when asking failed,
    and the result records where they were planted, the rows planted and removed (a mismatch: NO-GO)."""
    from concurrent.futures import ThreadPoolExecutor

    from memwork.errors import UsageError

    if not 1 <= int(probes) <= 1_000_000:
        raise UsageError("probes", probes, "must be from 1 to 1000000")
    if not 0 < float(max_leak_rate) < 1:
        raise UsageError("max_leak_rate", max_leak_rate, "must be between 0 and 1 (0.001 = 0.1 %)")
    if not 0 <= float(max_uninformative) < 1:
        raise UsageError("max_uninformative", max_uninformative, "must be from 0 to below 1 (0.05 = 5 %)")
    if not 1 <= int(concurrency) <= 64:
        raise UsageError("concurrency", concurrency, "must be from 1 to 64")
    check_base_url(base_url)
    token = bearer_token(token)
    pairs = probe_pairs(uuid.uuid4().hex[:8], (int(probes) + 1) // 2, int(seed))
    result = LeakProbes(
        int(probes), pairs=len(pairs), seed=int(seed), max_leak_rate=float(max_leak_rate),
        max_uninformative=float(max_uninformative), max_leak_rate_origin=max_leak_rate_origin,
        confidence=confidence,
    )  # fmt: skip
    # probe i: pair i // 2, asked by its first user for even i, by its second for odd i
    asked = [(pairs[i // 2] if i % 2 == 0 else pairs[i // 2][::-1]) for i in range(result.probes)]
    users = [u for pair in pairs for u in pair]
    owners = {u.secret: u.user for u in users}
    if planter is not None:
        planter.check()  # a missing table or another dimension: refused before anything is written
        result.planted_in = planter.where
    http = client(base_url, token)

    def probe(pair: tuple[ProbeUser, ProbeUser]) -> tuple[str, list[str], bool]:
        asker, other = pair
        body = {"userId": asker.user, "sessionId": f"{asker.user}-session", "query": other.text,
                "limit": limit}  # fmt: skip
        try:
            answer = http.post_json(RESOLVE_PATH, body, idempotent=True)
        except Exception:
            return "error", [], False
        if not isinstance(answer, dict) or answer.get("ok") is not True:
            return "error", [], False
        others = leaked(answer, asker.user, other.secret, owners)
        return "answered", others, informative(answer, asker.secret)

    def purge(user: ProbeUser) -> bool:
        try:
            answer = http.post_json(FORGET_PATH, {"userId": user.user})
        except Exception:
            return False
        return isinstance(answer, dict) and answer.get("ok") is True

    try:
        with ThreadPoolExecutor(int(concurrency), thread_name_prefix="memwork-probe") as pool:
            if planter is not None:
                result.planted = planter.plant(users)
            else:
                list(pool.map(lambda u: _write_probe_memory(http, u.user, u.text), users))
            for i, (state, others, useful) in enumerate(pool.map(probe, asked)):
                if state == "error":
                    result.errors += 1
                    continue
                result.answered += 1
                if others:
                    result.leaks += 1
                    if len(result.examples) < 5:
                        whose = sorted(set(others))
                        more = f" and {len(whose) - 1} more" if len(whose) > 1 else ""
                        result.examples.append(
                            f"probe {i}: {asked[i][0].user} was answered {len(others)} item(s) of "
                            f"{len(whose)} other user(s) ({whose[0]}{more})"
                        )
                if useful or others:
                    result.informative += 1
                else:
                    result.uninformative += 1
    finally:
        try:
            if planter is not None:
                try:
                    result.removed, result.left = planter.remove([u.user for u in users])
                except Exception as exc:
                    result.cleanup_error, result.left = describe_error(exc), -1
            else:
                with ThreadPoolExecutor(int(concurrency), thread_name_prefix="memwork-probe") as pool:
                    result.purge_failures = sum(1 for ok in pool.map(purge, users) if not ok)
        finally:
            http.close()
    return result


# ---- planting the probe users where a pgvector-serving instance reads them -----------------------

#: the owner stamped into the metadata of every planted probe row (``_memworkSource``): no migration
#: source can claim these rows, and the removal deletes only rows this owner holds
PROBE_OWNER = "memwork-canary-probe"


class PlantRefused(ValueError):
    """The planter was asked to write or delete a row of a user that is not a synthetic canary user."""


def check_canary_users(users: list[str]) -> list[str]:
    """``users``, or :class:`PlantRefused` naming the first that is not a ``memory-v2-canary-*`` user:
    the planter writes and deletes those users' rows only."""
    for user in users:
        if not isinstance(user, str) or not user.startswith(CANARY_USER_PREFIX) or user == CANARY_USER_PREFIX:
            raise PlantRefused(f"refused: user {user!r} is not a synthetic {CANARY_USER_PREFIX}* user")
    return users


class PgvectorPlanter:
    """Plants the probe users' memories straight into the pgvector table the served backend reads, and
    removes exactly those rows afterwards.

    A row has the migration's shape (``user_id``, ``content``, ``embedding``, ``embedding_model``,
    ``type`` fact, ``source_memory_id`` ``<user>-m0``, ``source_session_id`` ``<user>-session``,
    metadata stamped with :data:`PROBE_OWNER`), its vector made by the SAME query module the service's
    pgvector backend embeds queries with (``MEMORY_PGVECTOR_EMBEDDING_MODULE``), recorded under the model
    the backend answers from (``MEMORY_PGVECTOR_MODEL``, else the module's ``MODEL_ID``). Only
    ``memory-v2-canary-*`` users are written or deleted (:func:`check_canary_users`); a row another
    source owns is never overwritten nor deleted. Refuses (usage error) a missing table or one whose
    dimension is not the module's, before writing anything."""

    def __init__(
        self,
        url: str,
        *,
        table: str | None = None,
        embedding_module: str | None = None,
        model: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        from memwork.embed import QueryModuleEmbedder
        from memwork.errors import UsageError
        from memwork.identifiers import check_identifier
        from memwork.pgvector.schema import EMBEDDINGS_TABLE

        env = os.environ if env is None else env
        if not (url or "").strip():
            raise UsageError("plant_pgvector", url, "needs the pgvector database URL the service reads")
        self.url = url.strip()
        self.table = check_identifier(
            (table or env.get("MEMORY_PGVECTOR_TABLE") or "").strip() or EMBEDDINGS_TABLE, field="table"
        )
        spec = (embedding_module or env.get("MEMORY_PGVECTOR_EMBEDDING_MODULE") or "").strip()
        if not spec:
            raise UsageError(
                "embedding_module", "", "set it (or MEMORY_PGVECTOR_EMBEDDING_MODULE) to the service's module"
            )
        self.embedder = QueryModuleEmbedder(spec, field="embedding_module")
        self.model = (model or env.get("MEMORY_PGVECTOR_MODEL") or "").strip() or self.embedder.model_id
        self._resolved: str | None = None

    @property
    def where(self) -> str:
        """Where the probes are planted, for the result file (the URL's password redacted)."""
        return f"pgvector {redact_url(self.url) or self.url} table {self.table} model {self.model}"

    def _connect(self) -> Any:
        from memwork.db import pg_connect
        from memwork.db.embedded import ensure

        if self._resolved is None:
            self._resolved = ensure(self.url, create=False).text
        return pg_connect(self._resolved, autocommit=True)

    def check(self) -> int:
        """The table's dimension, once it is known to match the module's vectors (usage error if not)."""
        from memwork.errors import UsageError
        from memwork.pgvector.schema import table_dimensions

        size = int(self.embedder.embed_query(f"{CANARY_USER_PREFIX}dimension check").size)
        with self._connect() as conn:
            existing = table_dimensions(conn, self.table)
        if existing is None:
            raise UsageError("table", self.table, "does not exist in the pgvector database")
        if existing != size:
            raise UsageError(
                "embedding_module",
                self.embedder.spec,
                f"makes vector({size}); {self.table} has vector({existing})",
            )
        return existing

    def plant(self, users: list[ProbeUser]) -> int:
        """Write one row per probe user in one transaction; the rows written (one owned elsewhere: not)."""
        from pgvector.psycopg import register_vector

        from memwork.migrate.ownership import stamped_metadata_sql, upsert_sql

        check_canary_users([u.user for u in users])
        vectors = [self.embedder.embed_query(u.text) for u in users]
        metadata, params = stamped_metadata_sql("'{\"canaryProbe\": true}'::jsonb", PROBE_OWNER)
        columns = ("user_id", "content", "embedding", "embedding_model", "type", "source_memory_id",
                   "source_session_id", "metadata")  # fmt: skip
        sql = upsert_sql(self.table, columns, f"SELECT %s, %s, %s::vector, %s, 'fact', %s, %s, {metadata}")
        written = 0
        with self._connect() as conn:
            register_vector(conn)
            with conn.transaction():
                for user, vector in zip(users, vectors, strict=True):
                    args = (
                        user.user,
                        user.text,
                        vector,
                        self.model,
                        f"{user.user}-m0",
                        f"{user.user}-session",
                    )
                    written += conn.execute(sql, (*args, *params)).rowcount
        return written

    def remove(self, users: list[str]) -> tuple[int, int]:
        """Delete the probe rows of ``users`` (canary users only, rows :data:`PROBE_OWNER` owns only):
        (rows deleted, rows of those users left in the table)."""
        from memwork.identifiers import quote_identifier
        from memwork.migrate.ownership import owner_sql

        check_canary_users(users)
        if not users:
            return 0, 0
        target = quote_identifier(self.table)
        ids = [f"{u}-m0" for u in users]
        with self._connect() as conn, conn.transaction():
            deleted = conn.execute(
                f"DELETE FROM {target} AS d WHERE d.source_memory_id = ANY(%s) AND d.user_id = ANY(%s) "
                f"AND d.user_id LIKE %s AND {owner_sql('d')} = %s",
                (ids, users, CANARY_USER_PREFIX + "%", PROBE_OWNER),
            ).rowcount
            left = conn.execute(f"SELECT count(*) FROM {target} WHERE user_id = ANY(%s)", (users,)).fetchone()
        return int(deleted), int(left[0] if left else 0)
