"""``--since RUN_ID|TIMESTAMP``: the instant an incremental defrag starts from.

An incremental run (``find-duplicates``, ``find-related``, ``merge-duplicates``, ``defrag review``)
compares only the entries created or changed at or after that instant against their whole scope and
returns exactly the full run's pairs that hold such an entry
(:func:`memwork.defrag.findings.changed_since`).

A TIMESTAMP is ISO-8601 with a timezone (``2026-01-02T03:04:05Z``, ``...+01:00``); a naive time is
refused rather than guessed. A RUN_ID (``memwork defrag journal``) means the *start* of that run: the
earlier of its journal's ``started_at`` and ``clock`` (the time the run stamped on what it wrote,
taken before it loaded the entries), so neither an entry another writer changed while the run was
planning nor one the run itself rewrote is missed; a journal written before ``clock`` was recorded
gives ``started_at``. An undo restores entries with their old timestamps, so pairs it brings back
are "changed" only as of their original times: after an undo, give a time before the undone run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memwork.entry import as_utc
from memwork.errors import UsageError

#: what a bad ``--since`` value is told
_FORMS = "--since takes a run id of the journal or an ISO-8601 time with a timezone"


@dataclass(frozen=True)
class Since:
    """What was given and the instant it resolves to (``run_id`` when it named a run)."""

    given: str
    at: datetime
    run_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"given": self.given, "from": self.at.isoformat(), "run_id": self.run_id}


def _timestamp(text: str) -> datetime | None:
    """The aware time ``text`` spells, None when it is not a time at all; naive is a usage error."""
    try:
        parsed = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    except ValueError:
        return None
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise UsageError("since", text, f"a time needs a timezone (Z or +HH:MM); {_FORMS}")
    return as_utc(parsed)


def run_start(header: dict[str, Any]) -> datetime:
    """The start of a journaled run: the earlier of ``started_at`` and ``clock`` (module docstring)."""
    times = [as_utc(header[key]) for key in ("started_at", "clock") if header.get(key)]
    if not times:
        raise UsageError("since", header.get("run_id"), "the run's journal header holds no start time")
    return min(times)


def resolve_since(value: str | datetime) -> Since:
    """``value`` (a run id, an ISO-8601 time with a timezone, or an aware datetime) as a :class:`Since`;
    anything else is a usage error naming ``since`` and the value."""
    from memwork.defrag.journal import read_run

    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise UsageError("since", value.isoformat(), f"a time needs a timezone; {_FORMS}")
        moment = as_utc(value)
        return Since(moment.isoformat(), moment)
    if not isinstance(value, str) or not value.strip():
        raise UsageError("since", value, _FORMS)
    text = value.strip()
    at = _timestamp(text)
    if at is not None:
        return Since(text, at)
    try:
        run = read_run(text)
    except UsageError:
        raise UsageError("since", text, f"neither a time nor a run in the journal; {_FORMS}") from None
    return Since(text, run_start(run.header), run.run_id)


def check_since(name: str, value: Any) -> str | None:
    """The parameter check: None, or the value as given once it resolves (else a usage error)."""
    if value is None:
        return None
    return resolve_since(value).given
