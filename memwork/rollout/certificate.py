"""The migration certificate as the rollout's quality gate, referenced by run id and digest.

When the two backends rank differently (legacy newest first -> pgvector nearest first), agreement
cannot show that the target answers right; the certificate of the migration can (retrieval per user
and bucket, vectors against their model). The judge takes it as a ``summary.json`` (or the run folder
holding one) written by the migration's verification: ``memwork verify`` (alias ``certify``) or the
``backfill_verification`` report, which records the same summary. Anything else is refused:

* the kind -- a report's summary of another kind (a ``health_report``) or a JSON without the
  certificate's fields (``digest``, ``source``, ``table``, ``gates``, ``rows``,
  ``input_fingerprint``) is not a certificate;
* the digest -- the ``digest`` the certificate declares is the SHA-256 of its measured content
  (:meth:`memwork.certify.certificate.Certificate.summary`: every field but the digest, the timings
  and the execution, and those a report run adds, :data:`UNDIGESTED`); a file whose content no
  longer hashes to it was edited after it was written; in a report's run folder, the file must also
  match the SHA-256 its ``manifest.json`` lists;
* the pair -- a certificate covers its ``source`` migrated to pgvector (table ``table``); judged on a
  pair of other backends it does not count (:meth:`Certificate.for_pair`).

It records the run id (``run.run_id`` or ``run_id``), the declared digest and the SHA-256 of the
file. Required when the backends rank differently, unless waived with a reason
(``certificate_waiver``) that the sign-off records; a certificate whose verdict does not pass is a
NO-GO naming its reasons.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from memwork.errors import UsageError
from memwork.workspace import read_json_input, sha256_file

#: the verdicts of a certificate that let a rollout pass
PASSING = ("PASS", "GO", "CERTIFIED")
#: the verdict of a file read as the certificate but refused (not one, edited, another pair)
REFUSED = "REFUSED"
#: the report whose summary is a certificate (its notebook records ``memwork.certify``'s summary)
CERTIFICATE_REPORT = "backfill_verification"
#: the fields of a certificate's summary.json
CERTIFICATE_FIELDS = ("digest", "source", "table", "gates", "rows", "input_fingerprint")
#: left out of the digest: by memwork.certify (timings, execution), and what a report run adds after
#: its notebook recorded the summary (memwork.reports.runner: report, run; .history: the rest)
UNDIGESTED = ("digest", "timings", "execution", "report", "run", "group", "fingerprint", "key_numbers",
              "comparison")  # fmt: skip
#: the migration's destination: what every certificate's target is
TARGET_BACKEND = "pgvector"
#: a source whose backend is registered under another name
SOURCE_BACKENDS = {"legacy-mysql": "legacy"}
MANIFEST = "manifest.json"  #: a report run's artifact list (memwork.reports.runner.MANIFEST_FILE)


@dataclass(frozen=True)
class Certificate:
    """A certificate as read once: where, which run, its verdict and digests, what it covers."""

    path: str
    run_id: str
    verdict: str
    digest: str
    sha256: str
    reasons: list[str] = field(default_factory=list)
    kind: str = ""  #: "memwork verify" or the report that wrote it
    source: str = ""  #: the migrated source (legacy-mysql, qdrant, ...)
    target: str = TARGET_BACKEND
    table: str = ""

    @property
    def passed(self) -> bool:
        return self.verdict.upper() in PASSING

    @property
    def covers(self) -> str:
        """``legacy-mysql -> pgvector (memory_embeddings)``."""
        table = f" ({self.table})" if self.table else ""
        return f"{self.source or '(no source)'} -> {self.target}{table}"

    def for_pair(self, primary: str | None, shadow: str | None) -> Certificate:
        """This certificate judged on the pair ``primary`` -> ``shadow``: itself when the pair is its
        source's backend and pgvector (either way round: before or after the flip), else a REFUSED
        copy naming what it covers and what was judged."""
        if self.verdict == REFUSED or (_is(self.source_backend, primary) and _is(self.target, shadow)):
            return self
        if _is(self.source_backend, shadow) and _is(self.target, primary):
            return self
        why = f"covers {self.covers}, not the pair judged, {primary or '(primary)'} -> {shadow or '(shadow)'}"
        return replace(self, verdict=REFUSED, reasons=[why])

    @property
    def source_backend(self) -> str:
        return SOURCE_BACKENDS.get(self.source, self.source)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "run_id": self.run_id,
            "verdict": self.verdict,
            "digest": self.digest,
            "summary_sha256": self.sha256,
            "reasons": self.reasons,
            "kind": self.kind,
            "source": self.source,
            "target": self.target,
            "table": self.table,
        }


def _is(one: str, other: str | None) -> bool:
    """``one`` names backend ``other`` (or an alias of it)."""
    if not one or not other:
        return False
    from memwork.rollout.app_canary import same_backend

    return same_backend(one, other)


def content_digest(data: dict[str, Any]) -> str:
    """The digest of a certificate's measured content, as :mod:`memwork.certify` computes it."""
    measured = {k: v for k, v in data.items() if k not in UNDIGESTED}
    canonical = json.dumps(measured, sort_keys=True, default=str, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def _refusal(path: Path, data: dict[str, Any]) -> str | None:
    """Why ``data`` (read from ``path``) is not a usable certificate, None when it is one."""
    report = data.get("report")
    if report is not None and report != CERTIFICATE_REPORT:
        return (
            f"is a {report} report, not a migration certificate "
            f"({CERTIFICATE_REPORT} report or memwork verify's summary.json)"
        )
    missing = [name for name in CERTIFICATE_FIELDS if name not in data]
    if missing:
        return f"is not a migration certificate: no {', '.join(missing)}"
    declared = data.get("digest")
    if not isinstance(declared, str) or not declared.startswith("sha256:"):
        return f"digest {declared!r} is not a sha256: digest"
    actual = content_digest(data)
    if actual != declared:
        return (
            f"digest mismatch: the certificate declares {declared[:23]}..., its content hashes to "
            f"{actual[:23]}... (changed after it was written)"
        )
    manifest = path.parent / MANIFEST
    if manifest.is_file():
        try:
            listed = json.loads(manifest.read_text(encoding="utf-8")).get("artifacts") or []
        except (OSError, ValueError, AttributeError) as exc:
            return f"its {MANIFEST} is unreadable ({exc})"
        expected = next(
            (a.get("sha256") for a in listed if isinstance(a, dict) and a.get("file") == path.name), None
        )
        if expected is not None and expected != sha256_file(path):
            listed_sha = f"sha256 {str(expected)[:16]}..."
            return f"digest mismatch: {path.name} is not the file its {MANIFEST} lists ({listed_sha})"
    return None


def read_certificate(
    value: str, field_name: str = "certificate", *, strict: bool = True
) -> Certificate | None:
    """The certificate ``value`` names (a summary.json or its run folder); None when empty. A missing
    or unreadable file, or one without a verdict, is a :class:`UsageError` naming ``field_name``; so is
    one refused (another kind of report, no certificate fields, a digest that does not match) when
    ``strict``, else it is read as a certificate with verdict ``REFUSED`` and the refusal as its
    reason (the default certificate, the verification summary, then fails the gate naming why)."""
    if not value:
        return None
    path = Path(value)
    path = path / "summary.json" if path.is_dir() else path
    data = read_json_input(field_name, value, path, "no such summary.json")
    if not isinstance(data, dict) or not isinstance(data.get("verdict"), str):
        raise UsageError(field_name, value, "has no verdict")
    found = data.get("run")
    run: dict[str, Any] = found if isinstance(found, dict) else {}
    run_id = str(run.get("run_id") or data.get("run_id") or "(no run id)")
    reasons = [str(r) for r in data.get("reasons") or [] if isinstance(r, str)]
    declared = data.get("digest") if isinstance(data.get("digest"), str) else ""
    cert = Certificate(
        str(path),
        run_id,
        data["verdict"],
        str(declared or ""),
        sha256_file(path),
        reasons,
        kind=str(data.get("report") or "memwork verify"),
        source=str(data.get("source") or ""),
        table=str(data.get("table") or ""),
    )
    refusal = _refusal(path, data)
    if refusal is None:
        return cert
    if strict:
        raise UsageError(field_name, value, refusal)
    return replace(cert, verdict=REFUSED, reasons=[f"{field_name} {refusal}"])
