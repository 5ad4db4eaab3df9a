"""Operations and plans: what a modifying action intends to do, as plain data.

A plan is computed from a snapshot of entries without touching the store, so a dry run can show it
and ``apply`` can execute exactly it (see :mod:`memwork.defrag.apply`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

OpKind = Literal["merge", "stub", "repoint", "link", "delete", "supersede"]


@dataclass(frozen=True)
class Operation:
    """One step of a plan, always inside one scope.

    - ``merge``: merge ``path`` into ``target`` with ``strategy`` (the target survives)
    - ``stub``: replace ``path`` with a stub redirecting to ``target``
    - ``repoint``: make the existing stub at ``path`` redirect straight to ``target``
    - ``link``: add ``memory://`` links between ``path`` and ``target`` in both directions
    - ``delete``: remove ``path`` (``reason`` says why)
    - ``supersede``: mark ``path`` superseded by the newer ``target`` (``reason``: the contradiction);
      it is kept, with ``superseded_by`` and ``valid_until`` (the target's time) in its metadata
    """

    kind: OpKind
    scope: str
    path: str
    target: str | None = None
    strategy: str | None = None
    reason: str | None = None
    similarity: float | None = None
    step: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"op": self.kind, "scope": self.scope, "path": self.path}
        for name in ("target", "strategy", "reason", "similarity", "step"):
            value = getattr(self, name)
            if value is not None:
                data[name] = round(value, 6) if isinstance(value, float) else value
        return data

    def describe(self) -> str:
        """One human line, e.g. ``merge a.md -> b.md (keep_newer)``."""
        if self.kind == "merge":
            return f"merge {self.path} into {self.target} ({self.strategy})"
        if self.kind == "stub":
            return f"stub {self.path} -> {self.target}"
        if self.kind == "repoint":
            return f"re-point stub {self.path} -> {self.target}"
        if self.kind == "link":
            return f"link {self.path} <-> {self.target}"
        if self.kind == "supersede":
            return f"supersede {self.path} by {self.target} ({self.reason})"
        return f"delete {self.path} ({self.reason})"


@dataclass
class Plan:
    """An ordered list of operations produced by one action."""

    action: str
    operations: list[Operation] = field(default_factory=list)

    def __iter__(self) -> Iterator[Operation]:
        return iter(self.operations)

    def __len__(self) -> int:
        return len(self.operations)

    def add(self, op: Operation) -> None:
        self.operations.append(op if op.step else _with_step(op, self.action))

    def extend(self, other: Plan) -> None:
        for op in other.operations:
            self.add(op)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for op in self.operations:
            out[op.kind] = out.get(op.kind, 0) + 1
        return out

    def to_dict(self) -> list[dict[str, Any]]:
        return [op.to_dict() for op in self.operations]


def _with_step(op: Operation, step: str) -> Operation:
    from dataclasses import replace

    return replace(op, step=step)
