"""What the ``backfill_verification`` report shows of a migration certificate: the gate table, the
per-user and per-size-bucket tables, per-field diffs of the first bad rows (the whole list as CSV beside
the HTML), the repair command and the claim. Presentation only: nothing here decides.

Each function takes the :class:`~memwork.certify.Certificate` that
:func:`memwork.certify.parameters.verify_from_parameters` returns (reports import no certify module at
run time: the certificate is read through its attributes).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from memwork.reports.display import Table, write_full_csv

if TYPE_CHECKING:
    from memwork.certify import Certificate

#: bad rows shown field by field in the report; the rest are in the CSV
FIRST_BAD_ROWS = 20
BAD_ROWS_CSV = "bad_rows"


def _rounded(value: Any) -> Any:
    return round(value, 4) if isinstance(value, float) else value


def _threshold(cert: Certificate, gate: dict[str, Any]) -> str:
    """A gate's threshold as set: the retrieval gate with each size bucket's own recall bar, and
    ``(set)`` after a threshold the run was given (not the documented default)."""
    if gate["threshold"] is None:
        return ""
    text = f"{gate['comparison']} {_rounded(gate['threshold'])}"
    given = set(cert.thresholds.get("set", ()))
    if gate["name"] == "retrieval":
        bars = cert.thresholds.get("min_recall_by_bucket") or {}
        text += "".join(f"; bucket {b} >= {_rounded(v)}" for b, v in bars.items())
        if given & {"min_recall", "min_recall_by_bucket", "max_underfill"}:
            return text + " (set)"
    return text + (" (set)" if gate["origin"] == "set" else "")


def gate_rows(cert: Certificate) -> list[dict[str, Any]]:
    """One row per gate: its state, observed value against its threshold (as set), and every reason."""
    return [
        {
            "gate": g["name"],
            "state": g["state"].upper(),
            "observed": _rounded(g["observed"]),
            "threshold": _threshold(cert, g),
            "unit": g["unit"],
            "why it failed, or what it checks": "; ".join(cert.gates.get(g["name"], [])) or g["why"],
        }
        for g in cert.gate_strip()
    ]


def _checksum(value: Any) -> str:
    return "" if value is None else " / ".join(str(part) for part in value)


def user_rows(cert: Certificate) -> list[dict[str, Any]]:
    """Every user with a problem (:meth:`Certificate.user_table`: bad rows, or only a bad vector), worst
    first: both sides' row counts and checksums, the ids missing, extra or changed, the bad vectors."""
    rows = [
        {
            "user": user,
            "source rows": t["source"],
            "destination rows": t["dest"],
            "source checksum": _checksum(t["source_checksum"]),
            "destination checksum": _checksum(t["dest_checksum"]),
            "checksums match": "yes" if t["checksums_match"] else "no",
            "missing": ", ".join(t["missing"]),
            "extra": ", ".join(t["extra"]),
            "changed": ", ".join(t["changed"]),
            "bad vectors": ", ".join(f"{v['key']} ({v['kind']})" for v in t["vectors"]),
            "_problems": len(t["missing"]) + len(t["extra"]) + len(t["changed"]) + len(t["vectors"]),
        }
        for user, t in cert.user_table().items()
    ]
    rows.sort(key=lambda r: (-r["_problems"], r["user"]))
    return [{k: v for k, v in r.items() if k != "_problems"} for r in rows]


def users_fields(cert: Certificate) -> dict[str, Any]:
    """How many users were compared, how many disagree, how many have only a bad vector."""
    table = cert.user_table()
    only_vectors = sum(
        1
        for t in table.values()
        if t["vectors"] and t["checksums_match"] and not (t["missing"] or t["extra"] or t["changed"])
    )
    return {
        "users compared": len(cert.rows.users),
        "users with a row discrepancy": len(cert.rows.bad_users),
        "users with only a bad vector": only_vectors,
    }


def bucket_rows(cert: Certificate) -> list[dict[str, Any]]:
    """Per user-size bucket: users, sampled users and queries, recall@k, underfill, the worst users."""
    if cert.retrieval is None:
        return []
    k = cert.retrieval.k
    return [
        {
            "bucket (memories per user)": name,
            "users": b.users,
            "sampled users": b.sampled_users,
            "queries": b.queries,
            f"recall@{k}": _rounded(b.recall),
            "underfill rate": _rounded(b.underfill_rate),
            "worst users (recall)": ", ".join(f"{u} ({r})" for u, r in b.worst_users),
        }
        for name, b in cert.retrieval.buckets.items()
    ]


def diff_rows(cert: Certificate) -> list[dict[str, Any]]:
    """Every failure, one line per differing field (a missing or extra row is one line, ``(row)``)."""
    out: list[dict[str, Any]] = []
    for failure in cert.failures():
        base = {"key": failure["key"], "kind": failure["kind"], "user": failure["user"]}
        fields = failure["fields"] or {}
        if not fields:
            out.append(base | {"field": "(row)", "source": "", "destination": ""})
        for name, values in fields.items():
            if isinstance(values, dict) and ({"source", "dest"} & values.keys()):
                source, dest = values.get("source", values.get("expected")), values.get("dest")
            else:
                source, dest = "", values
            out.append(base | {"field": name, "source": source, "destination": dest})
    return out


def bad_rows_table(cert: Certificate, limit: int = FIRST_BAD_ROWS) -> tuple[Table, Path | None]:
    """The per-field diffs of the first ``limit`` failures, and the whole list written as
    ``bad_rows.csv`` in the run folder (None outside a run, or with nothing bad)."""
    import pandas as pd

    rows = diff_rows(cert)
    frame = pd.DataFrame(rows, columns=["key", "kind", "user", "field", "source", "destination"])
    shown = Table(frame, limit=limit, empty="no bad rows or vectors", csv=BAD_ROWS_CSV)
    path = shown.csv_path or (write_full_csv(frame, BAD_ROWS_CSV) if rows else None)
    return shown, path


def repair_text(cert: Certificate, csv_path: Path | None = None) -> str:
    """The repair command to run (a dry run first), or that nothing needs repairing."""
    lines = []
    command = cert.repair_command()
    if command is None:
        lines.append("nothing to repair")
    else:
        lines.append(f"repair (a dry run; add --apply to write): {command}")
        lines.append("then run this report again: the repaired keys are gone from the failures")
    if csv_path is not None:
        lines.append(f"every failure, field by field: {csv_path.name}")
    return "\n".join(lines)


def headline_fields(cert: Certificate) -> dict[str, Any]:
    """The run: source, table, run id, what was compared, the consistency boundary."""
    r = cert.rows
    return {
        "source": cert.source_key,
        "table": cert.table,
        "certificate run id (failures table)": cert.run_id,
        "active source rows": r.source_rows,
        "destination rows of this source": r.dest_rows,
        "bad rows by kind": r.by_kind() or "none",
        "high-water mark (verified up to)": r.high_water_mark or "(none)",
        "source rows changed after it": r.changed_after_mark,
        "vectors": f"{cert.vectors_mode}: {cert.vectors.checked} checked",
        "checksum round trips": r.round_trips,
    }
