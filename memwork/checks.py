"""Small value checks written once: booleans from text, numbers from 0 to 1, vector dimensions, the
address a server listens on.

Each check turns user-supplied text into a value or raises :class:`~memwork.errors.UsageError` naming
the field, so environment variables, notebook parameters and CLI options agree on what is valid.
"""

from __future__ import annotations

import errno
import ipaddress
import math
import numbers
import re
import socket

from memwork.errors import MemworkError, UsageError

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})
BOOL_HINT = "expected 1/0/true/false/yes/no/on/off"
MAX_DIMENSION = 16000  #: pgvector's limit for the vector type, and every store's
UNIT_HINT = "must be a number from 0 to 1"
DIMENSION_HINT = f"must be an integer from 1 to {MAX_DIMENSION}"


def parse_bool(name: str, value: object, default: bool | None = None) -> bool:
    """``1/0/true/false/yes/no/on/off`` (any case, surrounding spaces ignored) -> bool.

    A real ``bool`` passes through. Unset (None) or blank text gives ``default``; when there is no
    default, or the word is not one of the eight, raises UsageError naming ``name``.
    """
    if isinstance(value, bool):
        return value
    text = "" if value is None else str(value).strip().lower()
    if text in TRUE_WORDS:
        return True
    if text in FALSE_WORDS:
        return False
    if text == "" and default is not None:
        return default
    raise UsageError(name, value, BOOL_HINT)


def unit(name: str, value: object) -> float:
    """A finite number from 0 to 1 (a similarity, a threshold, a recall) as float; UsageError naming
    ``name`` otherwise -- never silently clamped. A ``bool`` is not a number here."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise UsageError(name, value, UNIT_HINT)
    number = float(value)
    if not math.isfinite(number) or not 0.0 <= number <= 1.0:
        raise UsageError(name, value, UNIT_HINT)
    return number


def dimension(name: str, value: object) -> int:
    """A vector dimension: an integer from 1 to 16000 (pgvector's limit); UsageError naming ``name``
    otherwise. Every embedder, store and schema agrees on this range."""
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Integral)
        or not 1 <= int(value) <= MAX_DIMENSION
    ):
        raise UsageError(name, value, DIMENSION_HINT)
    return int(value)


def both_or_neither(first: str, first_value: str, second: str, second_value: str) -> None:
    """Two settings that only work together (a source and a target URL): a UsageError naming the
    missing one when exactly one of them is given."""
    if bool(first_value) != bool(second_value):
        given, missing = (first, second) if first_value else (second, first)
        raise UsageError(missing, "", f"give both {first} and {second}, or neither ({given} is set)")


_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")
LISTEN_HINT = "must be an IP address of this machine (127.0.0.1, 0.0.0.0, ::) or a host name it resolves"


def listen_address(host: str, port: int) -> tuple[str, int]:
    """An address a server can listen on, checked before anything starts: ``host`` is an IP address
    or a well-formed host name that resolves (a dotted quad out of range such as ``999.1.1.1`` is
    refused without a DNS lookup), and binding ``(host, port)`` works now.

    UsageError (exit 2) naming ``host`` for a malformed, unresolvable or foreign address; ``port``
    out of 0..65535 likewise; a :class:`~memwork.errors.MemworkError` (exit 1) when the address is
    fine but cannot be taken now (the port is in use, or needs privileges): not bad input."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise UsageError("port", port, "must be an integer from 0 to 65535")
    text = host.strip() if isinstance(host, str) else ""
    if not text or not (_is_ip_address(text) or _is_host_name(text)):
        raise UsageError("host", host, LISTEN_HINT)
    try:
        family, kind, proto, _name, address = socket.getaddrinfo(
            text, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (OSError, UnicodeError):
        raise UsageError("host", host, f"{LISTEN_HINT}; it does not resolve") from None
    _probe_bind(host, port, family, kind, proto, address)
    return text, port


def _is_ip_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _is_host_name(text: str) -> bool:
    """RFC 1123 labels; the last one not all digits (that is an IPv4 address, or a broken one)."""
    labels = text.rstrip(".").split(".")
    return (
        len(text) <= 253
        and all(_HOST_LABEL.fullmatch(label) for label in labels)
        and not labels[-1].isdigit()
    )


def _probe_bind(host: str, port: int, family: int, kind: int, proto: int, address: tuple) -> None:
    """Bind and release at once (no listen, so no TIME_WAIT): the error a server would hit, now."""
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRNOTAVAIL:
                raise UsageError("host", host, "not an address of this machine") from None
            reason = "in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
            raise MemworkError(f"cannot listen on {host} port {port}: {reason}") from None
