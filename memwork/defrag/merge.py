"""Pure entry transformations used by plans: merging, stubs, re-pointing and linking.

Metadata union for ``combine`` (nothing is dropped):

- keys only one side has are kept;
- lists are unioned in order (survivor's items first, then the other's new items);
- nested mappings are merged key by key with the same rules;
- conflicting scalars keep the survivor's value, and the other value is recorded under
  ``merged_values[<dotted key>]`` as ``[{"from": <path>, "value": <value>}, ...]`` (the title too);
- ``merged_from`` lists every path merged into the entry (all strategies record it).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from memwork.coverage import MARK_KEYS
from memwork.entry import SUPERSEDED_BY, VALID_UNTIL, Entry

STRATEGIES = ("keep_newer", "keep_larger", "combine")
COMBINE_SEPARATOR = "\n\n---\n\n"
STUB_REASON = "merged"
LINK_PREFIX = "memory://"
#: never unioned from a merged-away entry: the survivor's own (the mark describes the survivor's vector)
_BOOKKEEPING = (
    "merged_from", "merged_values", "embedding_stale", *MARK_KEYS, "stub", "redirect_to", "reason",
    SUPERSEDED_BY, VALID_UNTIL, "supersede_reason",
)  # fmt: skip


def _union_list(left: list[Any], right: list[Any]) -> list[Any]:
    out = list(left)
    for item in right:
        if item not in out:
            out.append(item)
    return out


def _record_conflict(conflicts: dict[str, list[Any]], key: str, source: str, value: Any) -> None:
    entry = {"from": source, "value": value}
    bucket = conflicts.setdefault(key, [])
    if entry not in bucket:
        bucket.append(entry)


def union_metadata(
    survivor: Mapping[str, Any],
    other: Mapping[str, Any],
    source: str,
    conflicts: dict[str, list[Any]],
    prefix: str = "",
) -> dict[str, Any]:
    """Union ``other`` into ``survivor`` (see module docstring); conflicts go into ``conflicts``."""
    out = dict(survivor)
    for key, value in other.items():
        if not prefix and key in _BOOKKEEPING:
            continue
        dotted = f"{prefix}{key}"
        if key not in out or out[key] is None:
            out[key] = value
        elif out[key] == value:
            continue
        elif isinstance(out[key], list) and isinstance(value, list):
            out[key] = _union_list(out[key], value)
        elif isinstance(out[key], Mapping) and isinstance(value, Mapping):
            out[key] = union_metadata(out[key], value, source, conflicts, prefix=f"{dotted}.")
        elif value is not None:
            _record_conflict(conflicts, dotted, source, value)
    return out


def choose_survivor(entries: list[Entry], strategy: str) -> Entry:
    """The entry a cluster merges into: newest (keep_newer, combine) or largest (keep_larger).

    Ties break on the other criterion, then on path, so the choice never depends on input order.
    """
    if strategy == "keep_larger":
        return max(entries, key=lambda e: (e.size, e.updated_at, _rev(e.path)))
    return max(entries, key=lambda e: (e.updated_at, e.size, _rev(e.path)))


def _rev(path: str) -> tuple[int, ...]:
    """Sort key that prefers the lexicographically smallest path under ``max``."""
    return tuple(-ord(c) for c in path)


def merge_entries(survivor: Entry, source: Entry, strategy: str, now: datetime) -> Entry:
    """The survivor after ``source`` is merged into it.

    keep_newer / keep_larger keep the survivor's content (the source's is kept in the audit journal);
    combine appends the source's content (unless already contained) and unions all metadata. The
    survivor inherits the source's hits. A changed content makes the embedding stale: the caller
    re-embeds it or drops the vector.
    """
    merged = survivor.copy()
    meta = merged.metadata
    if strategy == "combine":
        conflicts: dict[str, list[Any]] = {k: list(v) for k, v in (meta.get("merged_values") or {}).items()}
        for k, v in (source.metadata.get("merged_values") or {}).items():
            for item in v:
                _record_conflict(conflicts, k, item.get("from", source.path), item.get("value"))
        meta = union_metadata(meta, source.metadata, source.path, conflicts)
        if source.title and source.title != survivor.title:
            _record_conflict(conflicts, "title", source.path, source.title)
        if conflicts:
            meta["merged_values"] = conflicts
        if source.content.strip() and source.content.strip() not in merged.content:
            merged.content = merged.content + COMBINE_SEPARATOR + source.content
            merged.size = len(merged.content.encode("utf-8"))
            merged.updated_at = now
    meta["merged_from"] = _union_list(
        list(meta.get("merged_from") or []),
        [*(source.metadata.get("merged_from") or []), source.path],
    )
    merged.metadata = meta
    merged.hits = survivor.hits + source.hits
    return merged


def make_stub(entry: Entry, target: str, now: datetime) -> Entry:
    """A redirect stub at ``entry``'s path (fresh hits and age, same creation date)."""
    return Entry(
        path=entry.path,
        scope=entry.scope,
        content=f"# {STUB_REASON} → {target}\n\nThis entry was {STUB_REASON} into {target}.",
        title=f"[STUB] → {target}",
        metadata={"stub": True, "redirect_to": target, "reason": STUB_REASON},
        embedding=None,
        created_at=entry.created_at,
        updated_at=now,
        hits=0,
    )


def repoint_stub(stub: Entry, target: str) -> Entry:
    """The stub redirecting straight to ``target``; its age and hits are kept (cleanup still applies)."""
    reason = str(stub.metadata.get("reason") or STUB_REASON)
    out = stub.copy()
    out.metadata["redirect_to"] = target
    out.content = f"# {reason} → {target}\n\nThis entry was {reason} into {target}."
    out.title = f"[STUB] → {target}"
    out.size = len(out.content.encode("utf-8"))
    return out


def supersede(older: Entry, newer: Entry, reason: str | None) -> Entry:
    """``older`` kept but marked superseded by ``newer``: ``superseded_by`` its path, ``valid_until``
    its ``updated_at``, ``supersede_reason`` why; content, vector, times and hits are unchanged."""
    out = older.copy()
    out.metadata[SUPERSEDED_BY] = newer.path
    out.metadata[VALID_UNTIL] = newer.updated_at.isoformat()
    if reason:
        out.metadata["supersede_reason"] = reason
    return out


def link_target(path: str) -> str:
    return f"{LINK_PREFIX}{path}"


def links_to(entry: Entry, path: str) -> bool:
    """Does ``entry.metadata.related`` link ``path`` (as ``memory://path`` or bare)?"""
    related = entry.metadata.get("related") or []
    if not isinstance(related, list):
        related = [related]
    return link_target(path) in related or path in related


def add_link(entry: Entry, path: str) -> Entry:
    """``entry`` with ``memory://path`` appended to ``related`` (unchanged if already linked)."""
    if links_to(entry, path):
        return entry
    out = entry.copy()
    related = out.metadata.get("related") or []
    if not isinstance(related, list):
        related = [related]
    out.metadata["related"] = [*related, link_target(path)]
    return out
