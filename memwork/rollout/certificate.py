"""The migration certificate as the rollout's quality gate, referenced by run id and digest.

When the two backends rank differently (legacy newest first -> pgvector nearest first), agreement
cannot show that the target answers right; the certificate of the migration can (retrieval per user
and bucket, vectors against their model). The judge takes it as a ``summary.json`` (or the run folder
holding one) with at least a ``verdict``; it records the run id (``run.run_id`` or ``run_id``), the
digest the certificate declares (``digest``, ``certificate_digest`` or ``certificate.digest``) and
the SHA-256 of the file itself. A verification summary of ``memwork report backfill_verification``
has that shape, so it serves until a certificate is given.

Required when the backends rank differently, unless waived with a reason (``certificate_waiver``)
that the sign-off records; a certificate whose verdict does not pass is a NO-GO naming its reasons.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memwork.errors import UsageError
from memwork.workspace import sha256_file

#: the verdicts of a certificate that let a rollout pass
PASSING = ("PASS", "GO", "CERTIFIED")


@dataclass(frozen=True)
class Certificate:
    """A certificate as read once: where, which run, its verdict and digests."""

    path: str
    run_id: str
    verdict: str
    digest: str
    sha256: str
    reasons: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.verdict.upper() in PASSING

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "run_id": self.run_id,
            "verdict": self.verdict,
            "digest": self.digest,
            "summary_sha256": self.sha256,
            "reasons": self.reasons,
        }


def _declared_digest(data: dict[str, Any]) -> str:
    nested = data.get("certificate")
    for value in (
        data.get("digest"),
        data.get("certificate_digest"),
        nested.get("digest") if isinstance(nested, dict) else None,
    ):
        if isinstance(value, str) and value:
            return value
    return ""


def read_certificate(value: str, field_name: str = "certificate") -> Certificate | None:
    """The certificate ``value`` names (a summary.json or its run folder); None when empty. A missing
    or unreadable file, or one without a verdict, is a :class:`UsageError` naming ``field_name``."""
    if not value:
        return None
    path = Path(value)
    path = path / "summary.json" if path.is_dir() else path
    if not path.is_file():
        raise UsageError(field_name, value, "no such summary.json")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(field_name, value, f"not a JSON summary ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("verdict"), str):
        raise UsageError(field_name, value, "has no verdict")
    found = data.get("run")
    run: dict[str, Any] = found if isinstance(found, dict) else {}
    run_id = str(run.get("run_id") or data.get("run_id") or "(no run id)")
    reasons = [str(r) for r in data.get("reasons") or [] if isinstance(r, str)]
    return Certificate(str(path), run_id, data["verdict"], _declared_digest(data), sha256_file(path), reasons)
