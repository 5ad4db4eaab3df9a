"""Secret redaction, written once: URLs lose their passwords, secret-named settings their values.

URLs are not parsed with :func:`urllib.parse.urlsplit`: a password may hold an unencoded ``#``, ``/``,
``?`` or ``@`` that SQLAlchemy and the drivers accept, and ``urlsplit`` would end the netloc early and
print it. The userinfo here runs from ``://`` to the *last* ``@`` that is followed by a plausible
``host[:port]``, so whatever any parser takes for the password is hidden (an ``@`` inside a query
value may hide a little more than the password; never less).
"""

from __future__ import annotations

import re
from urllib.parse import unquote

_SECRET_NAME_RE = re.compile(r"(PASSWORD|PASSWD|SECRET|TOKEN|API_KEY|APIKEY|CREDENTIAL|PRIVATE_KEY)", re.I)
_SCHEME_RE = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>.*)\Z", re.S)
# what may follow the userinfo's '@': a host (name, IPv4, [IPv6], empty for a socket) and a port
_HOST_RE = re.compile(r"[\w.\-~%]*(?:\[[0-9A-Fa-f:.%\w]*\])?(?::\w*)?(?=[/?#]|\Z)")
_QUERY_SECRET_RE = re.compile(
    r"(?i)((?:^|(?<=[?&;]))[\w.-]*(?:password|passwd|token|secret|api_key)=)([^&;]*)"
)
_URL_IN_TEXT_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")
REDACTED = "***"


def is_secret_name(name: str) -> bool:
    """True for setting names whose values must never be printed (``*_PASSWORD``, ``*_API_KEY`` ...)."""
    return bool(_SECRET_NAME_RE.search(name))


def _split_userinfo(rest: str) -> tuple[str, str] | None:
    """``rest`` (after ``://``) -> (userinfo, the remainder after its '@'), or None without userinfo."""
    for at in reversed([m.start() for m in re.finditer("@", rest)]):
        userinfo, after = rest[:at], rest[at + 1 :]
        user = userinfo.split(":", 1)[0]
        if "/" in user or "?" in user or "#" in user:
            continue  # a path ('sqlite:////tmp/a:b@c.db') or a query, not a user name
        if _HOST_RE.match(after):
            return userinfo, after
    return None


def userinfo_has_at(url: str) -> bool:
    """True when the userinfo of ``url`` holds an unencoded ``@``: SQLAlchemy and the drivers cut at the
    first ``@``, take the password's tail for the host and print it in their errors, so such a URL can
    never connect and must be refused before it is used (``%40`` is the way to write it)."""
    match = _SCHEME_RE.match(url or "")
    split = _split_userinfo(match["rest"]) if match else None
    return split is not None and "@" in split[0]


def _redact_query(text: str) -> str:
    """``password=``, ``sslpassword=``, ``token=``... values of the query string hidden."""
    head, sep, query = text.partition("?")
    if not sep:
        return text
    return head + sep + _QUERY_SECRET_RE.sub(rf"\1{REDACTED}", query)


def redact_url(url: str | None) -> str | None:
    """``scheme://user:***@host/db`` -- the password (and any ``password=`` query value) hidden.

    The rest of the URL is kept as given (``postgresql:///x?host=/tmp`` stays that)."""
    if not url:
        return url
    match = _SCHEME_RE.match(url)
    if not match:
        return url
    scheme, rest = match["scheme"], match["rest"]
    split = _split_userinfo(rest)
    if split is not None:
        userinfo, after = split
        if ":" in userinfo:
            userinfo = f"{userinfo.split(':', 1)[0]}:{REDACTED}"
        rest = f"{userinfo}@{_redact_query(after)}"
    else:
        rest = _redact_query(rest)
    return f"{scheme}://{rest}"


def url_secrets(url: str) -> list[str]:
    """The secret parts of ``url`` (password, secret query values), raw and percent-decoded."""
    match = _SCHEME_RE.match(url or "")
    if not match:
        return []
    rest = match["rest"]
    found: list[str] = []
    split = _split_userinfo(rest)
    if split is not None:
        userinfo, rest = split
        if ":" in userinfo:
            found.append(userinfo.split(":", 1)[1])
    _, _, query = rest.partition("?")
    found += [m.group(2) for m in _QUERY_SECRET_RE.finditer(query)]
    found += [unquote(s) for s in found]
    return [s for s in dict.fromkeys(found) if s and s != REDACTED]


_SCHEME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+.-")
_NOT_FIRST = frozenset("0123456789+.-")


def redact_text(text: str) -> str:
    """Free text (an error line, a reason, a whole HTML page) with every URL's password hidden.

    The same matches as ``_URL_IN_TEXT_RE.sub``, found from each ``://`` instead of by scanning: the
    regex alone retries its scheme at every letter of a long run (a base64 figure in a report page
    took ~0.5 s); here a URL is looked for only where a ``://`` is.
    """
    pieces: list[str] = []
    done = 0  # text[:done] is handled (a match's end: the next scheme starts at or after it)
    at = text.find("://")
    while at != -1:
        start = at
        while start > done and text[start - 1] in _SCHEME_CHARS:
            start -= 1
        while start < at and text[start] in _NOT_FIRST:
            start += 1  # a scheme starts with a letter
        match = _URL_IN_TEXT_RE.match(text, start) if start < at else None
        if match is None:
            at = text.find("://", at + 1)
            continue
        pieces += [text[done:start], redact_url(match.group(0)) or ""]
        done = match.end()
        at = text.find("://", done)
    return "".join(pieces) + text[done:] if pieces else text


def redact_value(name: str, value: str | None) -> str | None:
    """The value as it may be shown: secrets hidden, URLs without passwords."""
    if value is None or value == "":
        return value
    if is_secret_name(name):
        return REDACTED
    if _ASSIGNMENT_RE.match(value):  # a VAR=VALUE list (a URL starts with its scheme, never VAR=)
        return redact_assignments(value)
    if "://" in value:
        return redact_url(value)
    return value


_ASSIGNMENT_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=(.*)$", re.S)


def _assignments(text: str) -> list[tuple[str, str, str]]:
    """The ``VAR=VALUE`` parts of a ``;``- or newline-separated list: (part, name, value) each."""
    found = []
    for part in re.split(r"[;\n]", text):
        match = _ASSIGNMENT_RE.match(part)
        if match:
            found.append((part, match.group(1), match.group(2).strip()))
    return found


def redact_assignments(text: str) -> str:
    """A ``VAR=VALUE; VAR=VALUE`` list (a source's settings) as it may be shown: each value redacted by
    its variable's name (:func:`redact_value`), so an API key or a URL password in one never shows."""
    for part, name, value in _assignments(text):
        shown = redact_value(name, value)
        if shown != value:
            text = text.replace(part, part.replace(value, str(shown)), 1)
    return text


def assignment_secrets(text: str) -> list[str]:
    """The secret values inside a ``VAR=VALUE`` list: each secret-named variable's value and each URL
    password (what a scrubber must hide wherever it appears on its own)."""
    found: list[str] = []
    for _, name, value in _assignments(text):
        if value and is_secret_name(name):
            found.append(value)
        elif "://" in value:
            found.extend(url_secrets(value))
    return found


MAX_REASON_CHARS = 300  #: the longest error line :func:`describe_error` returns


def first_line(error: BaseException | str | None) -> str:
    """The first line of an error's message with every URL password hidden ("" when it has none).

    The one "first line, password hidden" rule: later lines of driver errors hold the SQL and its
    parameters, which a one-line report must not print. Pass ``exc.orig`` for the driver's own
    message inside a SQLAlchemy error.
    """
    text = "" if error is None else str(error).strip()
    return redact_text(text.splitlines()[0]) if text else ""


def describe_error(exc: BaseException) -> str:
    """``Type: first line of the message`` -- URLs redacted, SQL and parameters (later lines) dropped.

    The one way memwork shows an exception it caught (a backend's unavailable reason, a failed call).
    """
    text = first_line(exc)
    line = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return line[:MAX_REASON_CHARS]
