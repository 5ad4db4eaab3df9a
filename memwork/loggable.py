"""An error as it may be logged or stored: a short code and a reason holding nothing of the request.

A backend's error text can echo the request that caused it: an HTTP API's validation error quotes the
body or the URL it got (user id, query), a driver quotes the value it refused. Wherever memwork writes
an error somewhere that outlives the request -- the shadow comparison log, the service's log lines, the
status, the service's answers -- it goes through :func:`loggable_error`, once, which gives

* ``code``: a fixed vocabulary word (``http_400``, ``timeout``, ``connection_refused``,
  ``connection_error``, ``malformed_response``, ``response_too_large``, ``invalid_input``,
  ``unavailable``, ``database_error``, or the exception's type in snake case, e.g. ``runtime_error``);
* ``reason``: the first line of the message, at most :data:`MAX_REASON_CHARS` characters, with

  - no response body: everything after ``HTTP <status>:`` is dropped (an HTTP error's body is never
    kept, whatever it holds);
  - no server-written text: everything after :data:`SERVER_SAID` is dropped -- the message a backend
    sends inside a successful answer (a GraphQL ``errors`` array, Neo4j's ``errors``), which may echo
    the request transformed past recognition (cut short, upper-cased, slugged, base64-encoded);
  - no query string: URLs keep scheme, host and path (userinfo password hidden), and a bare
    ``/path?a=b`` loses its ``?a=b``;
  - no request value: every value of the request (:func:`request_values`: user id, session id, query,
    message texts, any other text field) is replaced by ``<field>`` wherever it appears -- as given,
    in any letter case, Unicode-normalised, percent-encoded (``%40``, ``+`` for space), JSON- or
    Python-escaped, HTML-escaped. Each word (3+ characters) of the free-text fields (query, content,
    messages) is replaced as well, so a backend that echoes a single word of the query leaks nothing
    either, and so is a word that is a piece (4+ characters) of one of them (an echo cut short
    mid-word). In scripts written without spaces (Chinese, Japanese, Korean, Thai, ...) a word
    cannot be told from a fragment, so every run of such characters that shares a character with the
    request is replaced. Values of 1-2 characters are replaced only where they stand alone (not inside
    a word);
  - no control character.

The hashed user id (:func:`memwork.service.shadow.user_digest`) is the only trace of a user a log keeps.
"""

from __future__ import annotations

import html
import json
import re
import unicodedata
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, quote_plus

from memwork.redaction import redact_url

__all__ = [
    "MAX_REASON_CHARS",
    "SERVER_SAID",
    "LoggableError",
    "RequestValues",
    "code_of",
    "loggable_error",
    "request_values",
    "without_request_values",
]

MAX_REASON_CHARS = 200
#: adapters put a server's own message after this marker; it is kept in the exception (for a person at
#: a terminal) and dropped from every loggable reason
SERVER_SAID = "server said:"
#: the first this-many characters of a message are looked at (a reason is short; values are searched in it)
_SCAN_CHARS = 4000
#: request fields whose text is free prose (each word is a value too); every other text field is an id
FREE_TEXT_FIELDS = frozenset({"query", "content", "text", "memory", "summary"})
#: request fields that are not user data (their values are a fixed vocabulary)
NOT_USER_DATA = frozenset({"role", "type", "operation"})
#: the field names a marker may show (``<userId>``); a value under any other key is ``<value>`` (a key
#: of a caller's own making is request data too)
MARKER_NAMES = frozenset(
    {"userId", "sessionId", "query", "content", "messageId", "text", "memory", "summary"}
)
MIN_WORD_CHARS = 3
#: a word cut short is recognised by its first or last this-many characters (3 would hide every "the")
MIN_FRAGMENT_CHARS = 4
#: characters of scripts written without spaces between words: CJK ideographs (and their extensions and
#: compatibility forms), kana, Hangul, Thai, Lao, Khmer, Myanmar, Tibetan
_UNSPACED_RE = re.compile(
    "[\u0e00-\u0eff\u0f00-\u0fff\u1000-\u109f\u1780-\u17ff\u1100-\u11ff\u3040-\u30ff"
    "\u3100-\u312f\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
    "\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f]+"
)

_HTTP_BODY_RE = re.compile(r"(\bHTTP \d{3})\b\s*:.*", re.S)
_SERVER_TEXT_RE = re.compile(r"[\s:;,]*" + re.escape(SERVER_SAID) + ".*", re.S | re.I)
_URL_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")
_BARE_QUERY_RE = re.compile(r"\?[\w.~%+\-\[\]]*=[^\s'\"<>`]*")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")
_WORD_RE = re.compile(r"\w+")
_SENTINEL_RE = re.compile(r"(\x00\w+\x00)")
_MARKER_RE = re.compile(r"\x00(\w+)\x00")
_STATUS_RE = re.compile(r"\bHTTP (\d{3})\b")
_TYPE_NAME_RE = re.compile(r"\b([A-Z][A-Za-z0-9]*(?:Error|Exception|Timeout|Refused))\b")
_SNAKE_RE = re.compile(r"(?<!^)(?=[A-Z][a-z])|(?<=[a-z0-9])(?=[A-Z])")
_DATABASE_MODULES = frozenset({"sqlalchemy", "psycopg", "psycopg2", "pymysql", "MySQLdb", "sqlite3", "redis"})
#: (pattern over the message, code) for errors given as text, or exceptions without a better clue
_TEXT_CODES = (
    (re.compile(r"timed? ?out|timeout", re.I), "timeout"),
    (re.compile(r"connection refused|ECONNREFUSED|\[Errno 111\]", re.I), "connection_refused"),
    (re.compile(r"Connect(?:ion)?Error|connection (?:reset|aborted|closed)|RemoteProtocolError", re.I),
     "connection_error"),
    (re.compile(r"malformed JSON", re.I), "malformed_response"),
    (re.compile(r"byte cap|exceeds the cap", re.I), "response_too_large"),
    (re.compile(r"^invalid input\b|: invalid input\b", re.I), "invalid_input"),
    (re.compile(r"\bunavailable\b|not a registered backend|no available backend", re.I), "unavailable"),
)  # fmt: skip


@dataclass(frozen=True)
class LoggableError:
    """``code`` (a fixed vocabulary) and ``reason`` (no request value, body or query string)."""

    code: str
    reason: str

    def line(self) -> str:
        """``code: reason`` -- the one-line form for a log line or a ``reason`` field."""
        return f"{self.code}: {self.reason}" if self.reason else self.code


@dataclass(frozen=True)
class RequestValues:
    """The values of one request that must never reach a log: ``(field, value)`` pairs and words."""

    values: tuple[tuple[str, str], ...] = ()
    words: Mapping[str, str] = field(default_factory=dict)  # casefolded word -> its field
    #: casefolded starts and ends (MIN_FRAGMENT_CHARS+) of the free-text words -> their field
    fragments: Mapping[str, str] = field(default_factory=dict)
    #: every character of the request's values written in a script without spaces
    unspaced: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.values or self.words or self.unspaced)


def _leaves(value: Any, name: str) -> Iterator[tuple[str, str]]:
    """``(field, text)`` for every text leaf of a request (list items take their list's name)."""
    if isinstance(value, str):
        yield (name if name in MARKER_NAMES else "value"), value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if str(key) not in NOT_USER_DATA:
                yield from _leaves(item, str(key))
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _leaves(item, name)


def request_values(request: Mapping[str, Any] | None) -> RequestValues:
    """The text values of ``request`` (ids, query, message texts, any other text field) to keep out of logs.

    Numbers (``limit``, an ``embedding``) and the fixed-vocabulary fields (a message's ``role``) are
    not user data and are kept."""
    pairs: dict[str, str] = {}
    words: dict[str, str] = {}
    fragments: dict[str, str] = {}
    unspaced: set[str] = set()
    for name, text in _leaves(request or {}, "request"):
        if not text:
            continue
        pairs.setdefault(text, name)
        unspaced.update(*_UNSPACED_RE.findall(text))
        if name in FREE_TEXT_FIELDS:
            for word in _WORD_RE.findall(text):
                if len(word) >= MIN_WORD_CHARS:
                    words.setdefault(word.casefold(), name)
                    _add_fragments(fragments, word.casefold(), name)
    ordered = sorted(((name, text) for text, name in pairs.items()), key=lambda p: -len(p[1]))
    return RequestValues(tuple(ordered), words, fragments, frozenset(unspaced))


#: words up to this long give every piece of theirs; longer ones (a token, a hash) their starts and ends
_ALL_PIECES_UP_TO = 40


def _add_fragments(fragments: dict[str, str], word: str, name: str) -> None:
    """Every piece of ``word`` at least :data:`MIN_FRAGMENT_CHARS` long (an echo cut short at either
    end, or both); for a very long word, its starts and ends only."""
    if len(word) <= _ALL_PIECES_UP_TO:
        for start in range(len(word) - MIN_FRAGMENT_CHARS + 1):
            for end in range(start + MIN_FRAGMENT_CHARS, len(word) + 1):
                fragments.setdefault(word[start:end], name)
        return
    for size in range(MIN_FRAGMENT_CHARS, len(word)):
        fragments.setdefault(word[:size], name)
        fragments.setdefault(word[-size:], name)


def _forms(value: str) -> set[str]:
    """``value`` as an error message may show it: normalised, percent-encoded, JSON/Python/HTML-escaped."""
    spaced = _CONTROL_RE.sub(" ", value)  # as the text is matched: control characters made spaces
    forms = {value, spaced, " ".join(spaced.split())}
    forms |= {unicodedata.normalize(nf, form) for form in list(forms) for nf in ("NFC", "NFD", "NFKC")}
    forms |= {cased for form in list(forms) for cased in (form.upper(), form.lower(), form.casefold())}
    for base in list(forms):
        escaped = {
            json.dumps(base)[1:-1],
            json.dumps(base, ensure_ascii=False)[1:-1],
            repr(base)[1:-1],
            base.encode("unicode_escape").decode("ascii"),
            html.escape(base),
            html.escape(base, quote=False),
        }
        forms |= escaped
        for text in (base, *escaped):  # a lone surrogate has no UTF-8 form: its bytes as Python keeps them
            forms |= {
                quote(text, errors="surrogatepass"),
                quote(text, safe="", errors="surrogatepass"),
                quote_plus(text, safe="", errors="surrogatepass"),
            }
    return {form for form in forms if form}


def without_request_values(text: str, sensitive: RequestValues) -> str:
    """``text`` with every request value (in any of its forms) and every free-text word made ``<field>``.

    Control characters are spaces afterwards (the markers are placed with a NUL sentinel, so a
    value that looks like a marker -- ``<query>`` -- is never mistaken for one)."""
    text = unicodedata.normalize("NFC", _CONTROL_RE.sub(" ", text))
    if not sensitive or not text:
        return text
    folded = {text.casefold(), text.lower()}
    for name, value in sensitive.values:
        marker = f"\x00{name}\x00"
        for form in sorted(_forms(value), key=len, reverse=True):
            if len(form) > len(text) or not _may_occur(form, folded):
                continue
            pattern = re.escape(form)
            if len(form) < MIN_WORD_CHARS:
                pattern = rf"(?<!\w){pattern}(?!\w)"
            text = _outside_markers(text, re.compile(pattern, re.I), _constant(marker))
    if sensitive.unspaced:
        shared = sensitive.unspaced

        def run(match: re.Match[str]) -> str:
            return "\x00value\x00" if shared.intersection(match.group(0)) else match.group(0)

        text = _outside_markers(text, _UNSPACED_RE, run)
    if sensitive.words:
        words, fragments = sensitive.words, sensitive.fragments

        def word(match: re.Match[str]) -> str:
            folded = match.group(0).casefold()
            found = words.get(folded) or fragments.get(folded)
            return match.group(0) if found is None else f"\x00{found}\x00"

        text = _outside_markers(text, _WORD_RE, word)
    return _MARKER_RE.sub(r"<\1>", text)


def _constant(marker: str) -> Callable[[re.Match[str]], str]:
    """A replacement that is ``marker`` as is (a string replacement would read its backslashes)."""
    return lambda _match: marker


def _may_occur(form: str, folded: set[str]) -> bool:
    """A cheap test before a case-insensitive search: ``form`` folded occurs in a folded ``text``."""
    return any(f in t for t in folded for f in (form.casefold(), form.lower()))


def _outside_markers(
    text: str, pattern: re.Pattern[str], replacement: str | Callable[[re.Match[str]], str]
) -> str:
    """``pattern.sub(replacement)`` on the parts of ``text`` outside the markers already placed."""
    parts = _SENTINEL_RE.split(text)
    for i in range(0, len(parts), 2):  # even parts lie outside the markers
        parts[i] = pattern.sub(replacement, parts[i])
    return "".join(parts)


def _without_queries(text: str) -> str:
    """URLs as ``scheme://host/path`` (password hidden, no query, no fragment); bare ``?a=b`` dropped."""

    def short(match: re.Match[str]) -> str:
        url = redact_url(match.group(0)) or ""
        return url.split("?", 1)[0].split("#", 1)[0]

    return _BARE_QUERY_RE.sub("", _URL_RE.sub(short, text))


def _cap(text: str) -> str:
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1] + "…"


def _cleaned(text: str, sensitive: RequestValues) -> str:
    """The first non-empty line without body, query strings, request values or control characters."""
    line = next((ln for ln in str(text).strip().splitlines() if ln.strip()), "")[:_SCAN_CHARS]
    line = _HTTP_BODY_RE.sub(r"\1", line)
    line = _SERVER_TEXT_RE.sub("", line)
    line = _without_queries(line)
    return " ".join(without_request_values(line, sensitive).split())


def clean_reason(text: str, sensitive: RequestValues | None = None) -> str:
    """The loggable form of an error text (see the module docstring), without its code."""
    return _cap(_cleaned(text, sensitive or RequestValues()))


def _snake(name: str) -> str:
    return _SNAKE_RE.sub("_", name).lower()


def _code_of_text(text: str) -> str | None:
    status = _STATUS_RE.search(text)
    if status:
        return f"http_{status.group(1)}"
    for pattern, code in _TEXT_CODES:
        if pattern.search(text):
            return code
    return None


def code_of(error: BaseException | str | None) -> str:
    """The code of an exception (its type and attributes first) or of an error text (its wording)."""
    if error is None:
        return "error"
    if isinstance(error, str):
        named = _TYPE_NAME_RE.search(error)
        return _code_of_text(error) or (_snake(named.group(1)) if named else "error")
    status = getattr(error, "status", None)
    if not isinstance(status, int):
        status = getattr(error, "status_code", None)
    if isinstance(status, int) and 100 <= status <= 599:
        return f"http_{status}"
    kind = getattr(error, "kind", None)
    if isinstance(kind, str) and kind:
        return kind
    from memwork.errors import BackendTimeout, UsageError

    if isinstance(error, BackendTimeout | TimeoutError):
        return "timeout"
    if isinstance(error, UsageError):
        return "invalid_input"
    if isinstance(error, ConnectionRefusedError):
        return "connection_refused"
    if isinstance(error, ConnectionError):
        return "connection_error"
    found = _code_of_text(f"{type(error).__name__}: {error}")
    if found:
        return found
    if type(error).__module__.split(".", 1)[0] in _DATABASE_MODULES:
        return "database_error"
    return _snake(type(error).__name__)


def _message_of(error: BaseException | str | None) -> str:
    """The text to clean: an HTTP error's summary (never its body), else ``Type: message``."""
    if error is None:
        return ""
    if isinstance(error, str):
        return error
    summary = getattr(error, "summary", None)
    if isinstance(summary, str) and summary:
        return summary
    text = str(error).strip()
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def loggable_error(
    error: BaseException | str | None, sensitive: RequestValues | Mapping[str, Any] | None = None
) -> LoggableError:
    """``error`` (an exception, or an error text such as a payload's ``reason``) as it may be logged.

    ``sensitive``: the request's values (:func:`request_values`), or the request itself. The code of
    an error text is read from its cleaned form, so no word of the request can become a code."""
    values = sensitive if isinstance(sensitive, RequestValues) else request_values(sensitive)
    cleaned = _cleaned(_message_of(error), values)
    code = code_of(cleaned) if isinstance(error, str) else code_of(error)
    return LoggableError(code, _cap(cleaned))
