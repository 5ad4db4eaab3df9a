"""Which metrics decide a rollout: the kind of rollout follows from how the two backends rank.

Every backend declares how ``resolve`` orders a user's memories
(:attr:`memwork.contracts.BaseBackend.ranking`: ``recency``, ``semantic`` or ``policy``). Agreement
between two answers (overlap@k, RBO, top-1) says something about the target only when both backends
try to return the same list:

============  ===================================  ==================================================
kind          when                                 what decides
============  ===================================  ==================================================
``alike``     both declare the same ranking        safety metrics, latency (SLO and relative band)
              (pgvector <-> Qdrant)                and agreement with the baseline
``different`` the rankings differ                  safety metrics and the latency SLO; agreement is
              (legacy newest first -> pgvector     shown and never decides; the quality gate is the
              nearest first)                       migration certificate (or a waiver with a reason)
``unknown``   a backend declares no ranking        as ``alike`` (the stricter judgement)
============  ===================================  ==================================================

Safety metrics decide in every kind: shadow errors, memories of another user, underfill (the shadow
answering fewer items than the baseline could), embedding dimension mismatch, and latency against
the stated SLO.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from memwork.contracts import RANKINGS
from memwork.errors import UsageError

ALIKE, DIFFERENT, UNKNOWN = "alike", "different", "unknown"
#: what a metric does in the verdict
DECIDES, SHOWN = "decides", "shown"
AGREEMENT_METRICS = ("overlapAtK", "rbo", "top1Agree")


#: how the backend of a name ranks (None: unknown); the judge is given one, it looks nothing up
RankingOf = Callable[[str | None], str | None]


def undeclared(name: str | None) -> str | None:
    """No backend's ranking known (every pair judged as alike: agreement decides)."""
    return None


def check_ranking(field: str, value: str) -> str:
    """An override of a backend's declared ranking: empty or one of :data:`RANKINGS`."""
    if value and value not in RANKINGS:
        raise UsageError(field, value, f"must be empty (as declared) or one of {', '.join(RANKINGS)}")
    return value


@lru_cache(maxsize=64)
def declared_ranking(name: str | None) -> str | None:
    """How the registered backend ``name`` (or an alias) ranks, None when unknown or undeclared."""
    if not name:
        return None
    from memwork.plugins import Registry

    registry = Registry({})
    try:
        backend = registry.find(name)
    except Exception:  # a plugin that fails to build declares nothing
        backend = None
    finally:
        registry.close()
    value = getattr(type(backend), "ranking", None) if backend is not None else None
    return value if value in RANKINGS else None


@dataclass(frozen=True)
class RolloutKind:
    """How the two backends of a pair rank, and so which metrics decide."""

    primary: str | None
    shadow: str | None
    primary_ranking: str | None
    shadow_ranking: str | None
    primary_origin: str = "declared"  # or "set" (an override in the parameters)
    shadow_origin: str = "declared"

    @property
    def kind(self) -> str:
        if self.primary_ranking is None or self.shadow_ranking is None:
            return UNKNOWN
        return ALIKE if self.primary_ranking == self.shadow_ranking else DIFFERENT

    @property
    def agreement_decides(self) -> bool:
        return self.kind != DIFFERENT

    @property
    def needs_certificate(self) -> bool:
        """Rankings differ: agreement cannot show the target right, the migration certificate must."""
        return self.kind == DIFFERENT

    def sentence(self) -> str:
        """``legacy ranks by recency, pgvector by semantic similarity: agreement is shown, not decided``."""

        def what(ranking: str | None) -> str:
            return {"recency": "recency", "semantic": "semantic similarity", "policy": "its own policy"}.get(
                ranking or "", "an undeclared order"
            )

        head = f"{self.primary or '(primary)'} ranks by {what(self.primary_ranking)}, " + (
            f"{self.shadow or '(shadow)'} by {what(self.shadow_ranking)}"
        )
        if self.kind == DIFFERENT:
            return f"{head}: agreement is shown, not decided; the migration certificate is the quality gate"
        if self.kind == ALIKE:
            return f"{head}: they rank alike, agreement with the baseline is required"
        return f"{head}: ranking not declared, agreement is required (the stricter judgement)"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "primary_ranking": self.primary_ranking,
            "shadow_ranking": self.shadow_ranking,
            "primary_origin": self.primary_origin,
            "shadow_origin": self.shadow_origin,
            "agreement": DECIDES if self.agreement_decides else SHOWN,
            "why": self.sentence(),
        }


def rollout_kind(
    primary: str | None,
    shadow: str | None,
    primary_ranking: str = "",
    shadow_ranking: str = "",
    ranking_of: RankingOf = declared_ranking,
) -> RolloutKind:
    """The kind of a pair: each side's ranking as its backend declares (``ranking_of``), or as
    overridden."""
    return RolloutKind(
        primary,
        shadow,
        primary_ranking or ranking_of(primary),
        shadow_ranking or ranking_of(shadow),
        "set" if primary_ranking else "declared",
        "set" if shadow_ranking else "declared",
    )
