"""Secret redaction, written once: URLs lose their passwords, secret-named settings their values."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

_SECRET_NAME_RE = re.compile(r"(PASSWORD|PASSWD|SECRET|TOKEN|API_KEY|APIKEY|CREDENTIAL|PRIVATE_KEY)", re.I)
REDACTED = "***"


def is_secret_name(name: str) -> bool:
    """True for setting names whose values must never be printed (``*_PASSWORD``, ``*_API_KEY`` ...)."""
    return bool(_SECRET_NAME_RE.search(name))


def redact_url(url: str | None) -> str | None:
    """``scheme://user:***@host/db`` -- the password (and any ``password=`` query value) hidden."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return REDACTED
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        if ":" in userinfo:
            user = userinfo.split(":", 1)[0]
            netloc = f"{user}:{REDACTED}@{host}"
    query = re.sub(r"(?i)(password|token|secret|api_key)=[^&]*", rf"\1={REDACTED}", parts.query)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_value(name: str, value: str | None) -> str | None:
    """The value as it may be shown: secrets hidden, URLs without passwords."""
    if value is None or value == "":
        return value
    if is_secret_name(name):
        return REDACTED
    if "://" in value:
        return redact_url(value)
    return value
