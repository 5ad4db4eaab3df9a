"""A seeded, stratified random sample of a store's scopes: what the duplicate review reads when the store
is larger than its ``max_entries``.

Why scopes: pairs never cross scopes, so a scope is the natural unit -- every stage of the review (the
merge plan, the exact band, the character band, the pair sample, the estimates, the queue) runs on the
sampled scopes as it would on a small store, and the sampled scopes' figures are exact for them.

The design (decided for issue 20, "Reports at 1M"):

* When the store holds no more than ``max_entries`` entries (stubs included: a store counts them
  cheaply per scope, the stub flag lives in an entry's metadata), or one ``scope`` is asked for, nothing
  is sampled: every scope, weight 1 (small stores such as FEBRL and the tests are unaffected).
* Otherwise a scope with ``max_entries`` entries or more is always included (weight 1: a scope is never
  split, so the sample then holds more than ``max_entries``), and the other scopes are stratified by size
  class (``floor(log2(entries))``: scopes of 512..1,023 entries are one stratum). Stratum ``h`` with
  ``S_h`` scopes gets ``k_h = min(S_h, max(1, floor(S_h * budget / rest)))`` scopes, drawn uniformly
  without replacement (seeded), where ``budget`` is what the always-included scopes leave of
  ``max_entries`` and ``rest`` the entries of the other scopes: about ``max_entries`` entries in all, and
  every stratum at least one scope. Each sampled scope stands for ``S_h / k_h`` scopes (its ``weight``).
* Store-wide totals (pairs per band, the label-free estimate's counts, the queue's strata) weight each
  sampled scope's pairs by its scope's weight: the Horvitz-Thompson estimator of a stratified sample,
  unbiased for any total over scopes. Within the sample, the pair sample below the band weighs as before
  (``population / sample`` of the sampled scopes' pairs), so a sampled pair weighs the product.

The approve/reject file, the merge plan and the cluster table list the sampled scopes' pairs only: an
approved merge from this review touches no other scope.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memwork.errors import UsageError

#: entries the duplicate review reads whole; a larger store is reviewed on a stated sample of scopes.
#: Why 50,000: the review costs ~6 ms of CPU per entry in scopes of 1,000 (1,148 CPU-s at 200,000, see
#: benchmarks/README.md, ``reports_1m.py``), so 50,000 is ~5 CPU-minutes, leaving health, verification
#: and the canary the rest of issue 20's 15 minutes at 1,000,000; and 50 scopes of 1,000 (25 million
#: same-scope pairs) already carry the 50,000-pair sample and thousands of band pairs.
DEFAULT_MAX_ENTRIES = 50_000


@dataclass(frozen=True)
class ScopeSample:
    """The sampled scopes, each with its weight (how many of the store's scopes it stands for)."""

    weights: dict[str, float]  # sampled scope -> weight
    total_scopes: int
    sampled_entries: int  # stubs included
    total_entries: int  # stubs included
    seed: int
    max_entries: int
    strata: list[dict[str, Any]] = field(default_factory=list)

    @property
    def scopes(self) -> list[str]:
        return sorted(self.weights)

    @property
    def complete(self) -> bool:
        """Every scope was read (nothing was sampled; every weight is 1)."""
        return len(self.weights) == self.total_scopes

    def weight(self, scope: str) -> float:
        return self.weights.get(scope, 0.0)

    def describe(self) -> str:
        """One sentence for the report: what the review reads."""
        if self.complete:
            scopes = "1 scope" if self.total_scopes == 1 else f"{self.total_scopes:,} scopes"
            entries = f"{self.total_entries:,} entries"
            return f"every scope asked for ({scopes}, {entries}) was read: nothing was sampled"
        return (
            f"a seeded sample of {len(self.weights):,} of {self.total_scopes:,} scopes "
            f"({self.sampled_entries:,} of {self.total_entries:,} entries, stubs included), "
            f"seed {self.seed}, "
            f"stratified by scope size (the store holds more than max_entries = {self.max_entries:,}); "
            "estimates are weighted to the whole store; the approve/reject file, the merge plan and the "
            "clusters list the sampled scopes' pairs only"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "complete": self.complete,
            "scopes": len(self.weights),
            "total_scopes": self.total_scopes,
            "entries": self.sampled_entries,
            "total_entries": self.total_entries,
            "seed": self.seed,
            "max_entries": self.max_entries,
            "strata": self.strata,
            "sampled_scopes": self.scopes if not self.complete else [],
        }


def size_class(entries: int) -> int:
    """The stratum of a scope of ``entries`` entries: ``floor(log2(entries))``."""
    return math.floor(math.log2(max(entries, 1)))


def sample_scopes(counts: Mapping[str, int], max_entries: int, *, seed: int = 0) -> ScopeSample:
    """The scopes the review reads out of ``counts`` (scope -> entries); see the module docstring.
    ``max_entries`` 0 reads every scope. Deterministic for a given ``seed``."""
    if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 0:
        raise UsageError("max_entries", max_entries, "must be a whole number >= 0 (0: every scope)")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UsageError("seed", seed, "must be a whole number >= 0")
    total = sum(counts.values())
    if max_entries == 0 or total <= max_entries:
        return ScopeSample({s: 1.0 for s in counts}, len(counts), total, total, seed, max_entries)
    certain = sorted(s for s, n in counts.items() if n >= max_entries)
    weights = {s: 1.0 for s in certain}
    strata: list[dict[str, Any]] = []
    if certain:
        n = sum(counts[s] for s in certain)
        strata.append({"stratum": f">= {max_entries:,} entries (always read)", "scopes": len(certain),
                       "sampled": len(certain), "entries": n, "weight": 1.0})  # fmt: skip
    rest = {s: n for s, n in counts.items() if n < max_entries}
    rest_entries = sum(rest.values())
    budget = max(max_entries - sum(counts[s] for s in certain), 0)
    groups: dict[int, list[str]] = {}
    for s in sorted(rest):
        groups.setdefault(size_class(rest[s]), []).append(s)
    rng = np.random.default_rng(seed)
    for h in sorted(groups):
        members = groups[h]
        k = min(len(members), max(1, math.floor(len(members) * budget / rest_entries)))
        chosen = sorted(members[int(i)] for i in rng.choice(len(members), size=k, replace=False))
        w = len(members) / k
        weights.update({s: w for s in chosen})
        strata.append({"stratum": f"{2**h:,}-{2 ** (h + 1) - 1:,} entries", "scopes": len(members),
                       "sampled": k, "entries": sum(rest[s] for s in members), "weight": w})  # fmt: skip
    sampled = sum(counts[s] for s in weights)
    return ScopeSample(weights, len(counts), sampled, total, seed, max_entries, strata)
