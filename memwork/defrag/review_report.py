"""The duplicate review, computed in one call (:func:`duplicate_review`): what the ``duplicate_review``
notebook shows, unit-testable without a kernel.

It runs on real stores. The pairs in the duplicate band (``max(Jaccard, cosine) >= threshold``, and
with a policy its pairs from ``review`` up) are found exactly, by the engine's joins. Everything below
the band -- most of a store's pairs: on 5,000 FEBRL records nearly a third of the 12.5 million pairs
have a cosine of 0.5 or more, past ``MEMWORK_MAX_PAIRS`` -- is known through a seeded uniform random
sample of pairs (:mod:`memwork.defrag.pair_sample`) whose size the report states; each sampled pair
below the band stands for ``population / sample`` pairs. The histograms, the label-free estimate and
the next review queue all use these weights, so they estimate the whole store.

With labels (a filled review queue) the report calibrates a policy (:mod:`memwork.defrag.calibrate`)
and shows its threshold-selection curves and the labelled estimate beside the label-free one; with a
policy (or the calibrated one) the merge plan is the policy's.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from memwork.checks import unit
from memwork.coverage import count_out_of_range
from memwork.defrag.calibrate import DEFAULT_TARGET_PRECISION
from memwork.defrag.findings import Pair, find_duplicates
from memwork.defrag.pair_sample import DEFAULT_SAMPLE_PAIRS, PairSample, sample_scope_pairs
from memwork.defrag.review import write_review_csv
from memwork.defrag.review_queue import (
    DEFAULT_FLOOR,
    DEFAULT_SIZE,
    NEAR_BAND,
    ReviewRow,
    exact_band,
    weighted_population,
    weighted_queue,
    weighted_stratum,
    with_char_band,
    write_review_queue,
)
from memwork.defrag.scope_sample import DEFAULT_MAX_ENTRIES, ScopeSample, sample_scopes
from memwork.errors import UsageError

if TYPE_CHECKING:
    import pandas as pd

    from memwork.defrag.calibrate import Calibration, Policy
    from memwork.stores.base import Store

#: how a cluster's contradiction column reads when no contradiction check is given
NOT_CHECKED = "not checked"
#: how the rule names each signal a policy weighs (:attr:`memwork.defrag.calibrate.Policy.features`)
SIGNAL_NAMES = {
    "text_similarity": "text similarity (Jaccard)",
    "semantic_similarity": "semantic similarity (cosine)",
    "char_similarity": "character similarity (Indel)",
}
#: the store of :meth:`DuplicateReview.merge_command` when the review was given an open store
STORE_PLACEHOLDER = "STORE"
#: members of a cluster whose pairs are checked for a contradiction (a bigger cluster: its first ones)
CONTRADICTION_MEMBERS = 12
#: sampled pairs whose character similarity gives the 2-D plot's level when the policy keeps no pair
CHAR_LEVEL_SAMPLE = 2000


@dataclass
class DuplicateReview:
    """Candidate pairs, the sampled rest, the merge plan and its effect, and what labels or a policy add."""

    threshold: float
    strategy: str
    pairs: list[dict[str, Any]]  # every pair >= threshold (exact)
    sample: PairSample  # a uniform sample of all pairs (the part below the band is used)
    operations: list[dict[str, Any]]
    contents: dict[tuple[str, str], str]
    review_file: str = ""
    #: entries whose vector is out of its model's range: compared by text only
    out_of_range: int = 0
    floor: float = DEFAULT_FLOOR
    policy: Policy | None = None
    policy_file: str = ""
    #: the policy's pairs (score >= review), exact, each with ``policy_score`` and ``decision``
    policy_pairs: list[dict[str, Any]] = field(default_factory=list)
    calibration: Calibration | None = None
    labels_file: str = ""
    #: the labelled estimate of the guide's rule at ``threshold`` (point and 95 % interval)
    labelled_estimate: dict[str, Any] | None = None
    label_free: dict[str, Any] = field(default_factory=dict)
    plan_summary: dict[str, Any] = field(default_factory=dict)
    queue_file: str = ""
    queue_strata: dict[str, dict[str, float]] = field(default_factory=dict)
    embedding_model: str = ""
    #: the cluster table's contradiction check (None: not installed, "not checked")
    contradiction: Callable[[str, str], str | None] | None = None
    #: the scopes read (every one, weight 1, unless the store is larger than ``max_entries``)
    scope_sample: ScopeSample | None = None
    #: the store as the CLI opens it (empty: the review was given an open store) and the scope read
    store_spec: str = ""
    scope: str | None = None

    def scope_weight(self, scope: str) -> float:
        """How many of the store's scopes the pairs of ``scope`` stand for (1 when nothing was sampled)."""
        if self.scope_sample is None or self.scope_sample.complete:
            return 1.0
        return self.scope_sample.weight(scope)

    @property
    def sampled_scopes(self) -> bool:
        """The review read a sample of the store's scopes (its figures are weighted to the store)."""
        return self.scope_sample is not None and not self.scope_sample.complete

    def labelled_points(self) -> dict[str, list[tuple[float, float]]]:
        """The labelled pairs' (text, semantic) scores by label, for the 2-D plot (none without labels
        or a cosine)."""
        out: dict[str, list[tuple[float, float]]] = {"duplicate": [], "distinct": []}
        if not self.labels_file:
            return out
        from memwork.defrag.calibrate import read_labels

        labels = read_labels(self.labels_file)
        for text, sem, y in zip(labels.text, labels.semantic, labels.y, strict=True):
            if y >= 0 and not math.isnan(sem):
                out["duplicate" if y == 1 else "distinct"].append((float(text), float(sem)))
        return out

    # ---- the weighted population: exact above the band, sampled below ----
    def weighted(self, value: Callable[[dict[str, Any]], float | None], cutoff: float) -> tuple[
        list[float], list[float]
    ]:  # fmt: skip
        """``value`` of every pair the histograms stand on, with its weight: the exact pairs where
        ``value >= cutoff`` (weight 1), the sampled pairs where it is below (weight population /
        sample); each times its scope's weight when the scopes were sampled. None values (no cosine)
        are left out."""
        values: list[float] = []
        weights: list[float] = []
        for p in self.pairs:
            v = value(p)
            if v is not None and v >= cutoff:
                values.append(v)
                weights.append(self.scope_weight(p["scope"]))
        w = self.sample.weight
        for q in self.sample.pairs:
            v = value(q.to_dict())
            if v is not None and v < cutoff:
                values.append(v)
                weights.append(w * self.scope_weight(q.scope))
        return values, weights

    def series(self) -> dict[str, tuple[list[float], list[float]]]:
        """Per signal: the values and weights of the histograms (see :meth:`weighted`)."""
        t = self.threshold
        return {
            "text (Jaccard)": self.weighted(lambda p: p["text_similarity"], t),
            "semantic (cosine)": self.weighted(lambda p: p["semantic_similarity"], t),
            "combined (max)": self.weighted(lambda p: p["similarity"], t),
        }

    def band_counts(self, values: list[float], weights: list[float]) -> dict[str, int]:
        """Estimated pairs below the near-threshold band, in it, and at or above the threshold."""
        v, w = np.asarray(values, dtype=float), np.asarray(weights, dtype=float)
        low, t = self.threshold - NEAR_BAND, self.threshold
        return {
            "below": round(float(w[v < low].sum())),
            "near threshold": round(float(w[(v >= low) & (v < t)].sum())),
            "at or above threshold": round(float(w[v >= t].sum())),
        }

    def policy_series(self) -> tuple[list[float], list[float]]:
        """The policy's score of every pair (exact from ``review`` up, sampled below), weighted."""
        if self.policy is None:
            return [], []
        values = [float(p["policy_score"]) for p in self.policy_pairs]
        weights = [self.scope_weight(p["scope"]) for p in self.policy_pairs]
        sampled = self.sample.pairs
        if sampled:
            text = np.array([q.text_similarity for q in sampled])
            sem = np.array(
                [math.nan if q.semantic_similarity is None else q.semantic_similarity for q in sampled]
            )
            chars = None
            if self.policy.uses_char:
                from memwork.defrag.char_similarity import char_similarity

                chars = np.array(
                    [
                        char_similarity(
                            self.contents[(q.scope, q.path_a)], self.contents[(q.scope, q.path_b)]
                        )
                        for q in sampled
                    ]
                )
            scores = self.policy.scores(text, sem, chars)
            keep = scores < self.policy.review
            values += [float(s) for s in scores[keep]]
            weights += [
                self.sample.weight * self.scope_weight(q.scope)
                for q, kept in zip(sampled, keep.tolist(), strict=True)
                if kept
            ]
        return values, weights

    def scatter(self) -> dict[str, list[tuple[float, float]]]:
        """(text, semantic) points for the 2-D plot: the sampled pairs below the band and the band's."""
        below = [
            (q.text_similarity, q.semantic_similarity)
            for q in self.sample.pairs
            if q.semantic_similarity is not None and q.similarity < self.threshold
        ]
        band = [
            (p["text_similarity"], p["semantic_similarity"])
            for p in self.pairs
            if p["semantic_similarity"] is not None
        ]
        return {"sampled pairs below the band": below, "pairs at or above the threshold": band}

    # ---- tables ----
    def shown_pairs(self) -> list[dict[str, Any]]:
        """The pairs the cards show: the policy's (highest score first) with a policy, else the band's
        with near duplicates before identical ones (changed pairs need reading, copies do not)."""
        if self.policy is not None:
            return list(self.policy_pairs)
        return sorted(self.pairs, key=lambda p: (p["text_similarity"] >= 0.9999, -p["similarity"]))

    def side_by_side(self, limit: int = 25) -> pd.DataFrame:
        """The first pairs as a pandas table with their kind (exact / normalised / similar) and a word
        diff (HTML) of their contents."""
        import pandas as pd

        from memwork.reports.display import word_diff_html

        rows: list[dict[str, Any]] = []
        for p in self.shown_pairs()[:limit]:
            a = self.contents.get((p["scope"], p["path_a"]), "")
            b = self.contents.get((p["scope"], p["path_b"]), "")
            rows.append(
                {"scope": p["scope"], "a": p["path_a"], "b": p["path_b"], "kind": p.get("kind", "similar"),
                 "text (Jaccard)": round(p["text_similarity"], 3), "semantic (cosine)": _semantic(p),
                 "matched by": " + ".join(p.get("matched_by") or ()) or _policy_text(p),
                 "word diff (a → b)": word_diff_html(a, b)}
            )  # fmt: skip
        return pd.DataFrame(rows)

    def clusters(self) -> list[dict[str, Any]]:
        """The merge plan's clusters: size, density, chained (held for review), and whether a pair inside
        may be a contradiction (``not checked`` without a contradiction check)."""
        rows = []
        for c in self.plan_summary.get("clusters") or []:
            members = list(c.get("chained") or [c.get("survivor"), *c.get("merged", [])])
            members = [m for m in members if m]
            chained = bool(c.get("review"))
            rows.append(
                {
                    "scope": c.get("scope"),
                    "size": c.get("size", len(members)),
                    "density": c.get("density"),
                    "chained": chained,
                    "decision": "to review (chained)" if chained else f"merge into {c.get('survivor')}",
                    "contradiction": self._contradiction(str(c.get("scope")), members),
                    "members": members,
                }
            )
        return sorted(rows, key=lambda r: (-int(r["size"] or 0), str(r["scope"]), r["members"]))

    def _contradiction(self, scope: str, members: list[str]) -> str:
        if self.contradiction is None:
            return NOT_CHECKED
        found = []
        shown = members[:CONTRADICTION_MEMBERS]
        for k, a in enumerate(shown):
            for b in shown[k + 1 :]:
                why = self.contradiction(self.contents.get((scope, a), ""), self.contents.get((scope, b), ""))
                if why:
                    found.append(f"{a} / {b}: {why}")
        return "; ".join(found) or "none found"

    def effect(self) -> dict[str, Any]:
        """What the merge plan would do: entries merged, stubs created, bytes saved, pairs held."""
        ops = self.plan_summary.get("operations") or {}
        out: dict[str, Any] = {
            "entries merged": int(ops.get("merge", 0)),
            "stubs created": int(ops.get("stub", 0)),
            "stubs repointed": int(ops.get("repoint", 0)),
            "bytes saved": int(self.plan_summary.get("bytes_freed", 0)),
            "clusters": len(self.plan_summary.get("clusters") or []),
            "chained clusters held for review": int(self.plan_summary.get("chained_clusters", 0)),
        }
        if self.sampled_scopes:
            sampled = self.scope_sample
            assert sampled is not None
            out["of"] = f"the {len(sampled.weights):,} sampled scopes only (of {sampled.total_scopes:,})"
        if self.policy is not None:
            out["pairs auto-merged (score >= auto_merge)"] = int(self.plan_summary.get("auto_merge_pairs", 0))
            out["pairs to a person (review band)"] = int(self.plan_summary.get("review_pairs", 0))
        return out

    def thresholds(self) -> dict[str, Any]:
        """The rule the plan follows: the guide's threshold, or the policy's two thresholds."""
        if self.policy is None:
            return {"rule": "max(Jaccard, cosine) >= threshold", "threshold": self.threshold}
        return {
            "rule": f"calibrated policy (logistic score of {policy_signals(self.policy)})",
            "policy file": self.policy_file,
            "auto_merge": self.policy.auto_merge if self.policy.auto_merge is not None else "none",
            "review": self.policy.review,
            "target precision": self.policy.target_precision,
            "embedding model": self.policy.embedding_model,
        }

    def merge_command(self, *, apply: bool = True) -> str:
        """The ``memwork defrag merge-duplicates`` command that plans this review's merge plan again on
        the store -- journaled and undoable with ``--apply`` (``memwork defrag undo RUN_ID``) -- as one
        shell line: the policy file by its absolute path (the one calibrated here lies beside the
        report), else the threshold; the strategy and scope as reviewed. The store is the spec the
        review opened, its password shown as ``***`` (:data:`STORE_PLACEHOLDER` for an open store). A
        review of sampled scopes planned those scopes only: the command plans every scope (or the one
        given)."""
        args = ["memwork", "defrag", "merge-duplicates", "--store", self._shown_store()]
        if self.scope:
            args += ["--scope", self.scope]
        if self.policy_file:
            args += ["--policy", str(Path(self.policy_file).resolve())]
        else:
            args += ["--similarity-threshold", str(self.threshold)]
        args += ["--strategy", self.strategy]
        return shlex.join([*args, "--apply"] if apply else args)

    def undo_command(self) -> str:
        """How to undo the applied merge (its run id is printed by the applying command)."""
        return shlex.join(["memwork", "defrag", "undo", "RUN_ID", "--store", self._shown_store()])

    def _shown_store(self) -> str:
        from memwork.redaction import redact_value

        return redact_value("store", self.store_spec) or STORE_PLACEHOLDER

    def policy_char_level(self) -> tuple[float, str] | None:
        """The character similarity at which the 2-D plot draws a policy's boundaries, and what it is
        (a policy weighing the character similarity has no boundary in the text-semantic plane: it has
        one per character similarity). The median of the policy's pairs (score >= review), else of the
        sampled pairs; None for a policy without it (or no policy)."""
        if self.policy is None or not self.policy.uses_char:
            return None
        from memwork.defrag.char_similarity import char_similarity

        def char(p: dict[str, Any]) -> float:
            a = self.contents.get((p["scope"], p["path_a"]), "")
            return char_similarity(a, self.contents.get((p["scope"], p["path_b"]), ""))

        if self.policy_pairs:
            values = [char(p) for p in self.policy_pairs]
            what = f"the median of the policy's {len(values):,} pairs at or above review"
        else:
            sampled = self.sample.pairs[:CHAR_LEVEL_SAMPLE]
            values = [char(q.to_dict()) for q in sampled]
            what = f"the median of {len(values):,} sampled pairs (the policy keeps none)"
        if not values:
            return 1.0, "no pairs to take a median of"
        return float(np.median(values)), what

    def estimates(self) -> list[dict[str, Any]]:
        """Precision and recall of the guide's rule at ``threshold``: label-free, and labelled when
        labels were given (each with its 95 % interval)."""
        rows = []
        free = self.label_free.get("at_threshold")
        if free:
            rows.append(_estimate_row("label-free (Fellegi-Sunter EM)", free))
        if self.labelled_estimate:
            rows.append(_estimate_row(f"labelled ({Path(self.labels_file).name})", self.labelled_estimate))
        return rows

    def out_of_range_text(self) -> str:
        """One line for the report: how many entries were compared by text only, and why."""
        if not self.out_of_range:
            return "every embedded entry is inside its model's range: both signals apply to every pair"
        return (
            f"{self.out_of_range:,} entries are embedded out of the model's range (text it cannot read, "
            "e.g. Chinese for an English model): their vectors are never compared, so they pair by text "
            "similarity only"
        )

    def scope_text(self) -> str:
        """What the review read: every scope, or a stated sample of them (the report's first statement)."""
        if self.scope_sample is None:
            return "every scope of the store was read"
        return self.scope_sample.describe()[:1].upper() + self.scope_sample.describe()[1:] + "."

    def pairs_estimated(self) -> int:
        """Pairs at or above the threshold in the whole store: exact, or weighted from the sampled scopes."""
        return round(float(np.sum([self.scope_weight(p["scope"]) for p in self.pairs], dtype=float)))

    def sample_text(self) -> str:
        """What the figures below the duplicate band stand on (stated in the report)."""
        if self.sampled_scopes:
            return (
                f"In the sampled scopes, pairs at or above the threshold ({len(self.pairs):,}; "
                f"~{self.pairs_estimated():,} in the whole store, weighted) are exact. Below it: "
                + self.sample.describe().replace("the store's", "the sampled scopes'")
                + "; each also stands for its scope's weight."
            )
        return (
            f"Pairs at or above the threshold ({len(self.pairs):,}) are exact. Below it: "
            f"{self.sample.describe()}."
        )

    def summary(self) -> dict[str, Any]:
        from memwork.reports.display import histogram_data

        return {
            "verdict": "INFO",
            "threshold": self.threshold,
            "strategy": self.strategy,
            "pairs": len(self.pairs),
            "pairs_estimated": self.pairs_estimated(),
            "scopes": sorted({p["scope"] for p in self.pairs}),
            "scope_sample": None if self.scope_sample is None else self.scope_sample.to_dict(),
            "operations": len(self.operations),
            "review_file": self.review_file,
            "review_queue": self.queue_file,
            "embedded_out_of_range": self.out_of_range,
            "matched_by": _signal_counts(self.pairs),
            "sample": {
                "pairs": self.sample.size,
                "population": self.sample.population,
                "seed": self.sample.seed,
                "complete": self.sample.complete,
            },
            "histograms": {
                k: histogram_data([x + 1e-9 for x in v], weights=w) for k, (v, w) in self.series().items()
            },
            "bands": {k: self.band_counts(v, w) for k, (v, w) in self.series().items()},
            "policy": None if self.policy is None else self.thresholds(),
            "labels": self.labels_file or None,
            "merge_command": self.merge_command(),
            "estimates": self.estimates(),
            "effect": self.effect(),
            "reasons": self.reasons(),
        }

    def reasons(self) -> list[str]:
        """Why the verdict is INFO, said when it matters: the review informs, nothing here gates, and a
        sampled review's approve/reject file cannot merge anything outside its sampled scopes."""
        if not self.sampled_scopes:
            return []
        return [
            f"INFO: {self.scope_text()} The verdict stays INFO (the review gates nothing): the pairs and "
            "merge operations listed are exact for the sampled scopes, so approving them merges only "
            "there; the other scopes' duplicates are estimated, not listed (review one with the scope "
            "parameter, or all with max_entries 0)."
        ]


def policy_signals(policy: Policy) -> str:
    """The signals a policy weighs, by name: "text similarity (Jaccard), semantic ... and ..."."""
    names = [SIGNAL_NAMES.get(f, f) for f in policy.features]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _estimate_row(name: str, at: dict[str, Any]) -> dict[str, Any]:
    def ci(key: str) -> str:
        low, high = at.get(f"{key}_ci") or (None, None)
        return "" if low is None or high is None else f"{low:.3f}-{high:.3f}"

    return {
        "estimate": name,
        "threshold": at.get("threshold"),
        "precision": at.get("precision"),
        "precision 95% CI": ci("precision"),
        "recall": at.get("recall"),
        "recall 95% CI": ci("recall"),
    }


def _semantic(pair: dict[str, Any]) -> float | str:
    """The cosine (3 digits), or why there is none."""
    if pair.get("semantic_similarity") is not None:
        return round(float(pair["semantic_similarity"]), 3)
    return "out of model range" if pair.get("out_of_range") else "-"


def _policy_text(pair: dict[str, Any]) -> str:
    if pair.get("policy_score") is not None:
        return f"policy score {pair['policy_score']:.3f}: {pair.get('decision')}"
    return "held for review (chained cluster)" if pair.get("decision") == "review" else ""


def _signal_counts(pairs: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Pairs found by text only, by semantics only, by both, and by the same content alone (text
    without a word, which neither signal reads: ``matched_by`` names the exact or normalised pass)."""
    counts = {"text": 0, "semantic": 0, "both": 0, "same content": 0}
    for pair in pairs:
        fired = tuple(pair.get("matched_by") or ())
        if len(fired) == 2:
            counts["both"] += 1
        elif fired:
            counts[fired[0] if fired[0] in counts else "same content"] += 1
    return counts


def contradiction_check() -> Callable[[str, str], str | None]:
    """Why two texts may contradict each other (:func:`memwork.defrag.contradictions.detect`: a
    negation, a number or date, a changed value), or None."""
    from memwork.defrag.contradictions import detect

    def reason(a: str, b: str) -> str | None:
        found = detect(a, b)
        return None if found is None else found.reason

    return reason


# ---- the one call ----------------------------------------------------------------------------------
def duplicate_review(
    store: str | Store,
    scope: str | None = None,
    *,
    threshold: float = 0.85,
    strategy: str = "keep_newer",
    review_file: str = "",
    floor: float = DEFAULT_FLOOR,
    labels: str = "",
    policy: str = "",
    sample_pairs: int = DEFAULT_SAMPLE_PAIRS,
    queue_size: int = DEFAULT_SIZE,
    seed: int = 0,
    out_dir: str | Path | None = None,
    max_entries: int = DEFAULT_MAX_ENTRIES,
    target_precision: float = DEFAULT_TARGET_PRECISION,
) -> DuplicateReview:
    """The duplicate review of ``store`` in one call (module docstring). Writes, into ``out_dir`` (the
    report's run folder by default): the approve/reject file of the band's pairs (``review_file``,
    for ``merge-duplicates --approved``), the next review queue to label (``review_queue.csv``) and,
    when ``labels`` are given without a ``policy``, the calibrated ``policy.json`` (its ``auto_merge``
    the lowest score whose precision reaches ``target_precision`` at 95 % confidence). Only reads the
    store: :meth:`DuplicateReview.merge_command` is the CLI command that applies the plan.

    A store of more than ``max_entries`` entries (0: no limit) is reviewed on a seeded sample of its
    scopes (:mod:`memwork.defrag.scope_sample`): only those scopes' entries are read, every stage runs on
    them, and the store-wide figures weight each scope's pairs by the scopes it stands for."""
    from memwork.defrag.actions import run_action
    from memwork.defrag.calibrate import calibrate, load_policy, write_policy
    from memwork.defrag.label_free import estimate_weighted
    from memwork.defrag.review_queue import store_embedding_model
    from memwork.reports.display import output_dir
    from memwork.stores import opened_store
    from memwork.stores.memory import MemoryStore

    threshold = unit("similarity_threshold", threshold)
    floor = unit("floor", floor)
    if floor > threshold:
        raise UsageError("floor", floor, f"must not exceed the threshold ({threshold})")
    folder = Path(out_dir) if out_dir else output_dir()
    calibration = calibrate(labels, seed=seed, target_precision=target_precision) if labels else None
    policy_path = policy
    if calibration is not None and not policy:
        policy_path = str(write_policy(calibration, folder / "policy.json"))
    loaded = load_policy(policy_path) if policy_path else None
    with opened_store(store) as opened:
        scopes = _scopes_read(opened, scope, max_entries, seed)
        source: Store = opened
        if not scopes.complete:  # only the sampled scopes' entries are read, once
            source = MemoryStore((e for s in scopes.scopes for e in opened.iter_entries(scope=s)), copy=False)
        params: dict[str, Any] = {"similarity_threshold": threshold, "strategy": strategy}
        if policy_path:
            params["policy"] = policy_path
        plan = run_action(source, "merge_duplicates", scope=scope, **params)
        entries = [e for e in source.all_entries(scope=scope) if not e.is_stub]
    band = plan.pairs if loaded is None else find_duplicates(entries, threshold)
    sample = sample_scope_pairs(entries, sample_pairs, seed=seed, check_from=floor)
    path = Path(review_file) if review_file else folder / "duplicate_review.csv"
    write_review_csv(band, path)
    model = store_embedding_model(entries)
    deep, cutoff = exact_band(entries, threshold, floor) if not sample.complete else (band, threshold)
    population, chars = with_char_band(
        weighted_population(deep, sample, cutoff), entries, threshold, floor, cutoff
    )
    if not scopes.complete:  # each sampled scope's pairs stand for the scopes of its stratum
        population = [(p, w * scopes.weight(p.scope), s) for p, w, s in population]
    at_floor = [k for k, p in enumerate(population) if p[0].similarity >= floor]
    queue_rows = weighted_queue(
        [population[k] for k in at_floor],
        size=queue_size, floor=floor, threshold=threshold, seed=seed, chars=chars[at_floor],
    )  # fmt: skip
    queue_file = write_review_queue(queue_rows, folder / "review_queue.csv", embedding_model=model)
    free = estimate_weighted(
        [p for p, _, _ in population], np.array([w for _, w, _ in population]), floor=floor, seed=seed
    )
    label_free = free.to_dict() | {"at_threshold": free.at(round(threshold, 2))}
    review = DuplicateReview(
        threshold, strategy, [p.to_dict() for p in band], sample,
        list(plan.to_dict().get("operations") or []), {(e.scope, e.path): e.content for e in entries},
        str(path), count_out_of_range(entries), floor=floor, policy=loaded, policy_file=policy_path,
        policy_pairs=[p.to_dict() for p in plan.pairs] if loaded is not None else [],
        calibration=calibration, labels_file=labels,
        labelled_estimate=_labelled_at(labels, threshold, seed) if labels else None,
        label_free=label_free, plan_summary=dict(plan.summary), queue_file=str(queue_file),
        queue_strata=_strata_counts(population, chars, queue_rows, threshold, floor),
        embedding_model=model, contradiction=contradiction_check(), scope_sample=scopes,
        store_spec=store if isinstance(store, str) else "", scope=scope,
    )  # fmt: skip
    return review


def _scopes_read(store: Store, scope: str | None, max_entries: int, seed: int) -> ScopeSample:
    """The scopes the review reads: ``scope`` alone when given (never sampled), else every scope, or a
    seeded sample of them when the store holds more than ``max_entries`` entries."""
    if scope is not None:
        counts = {scope: store.count(scope=scope)}
        return sample_scopes(counts, 0, seed=seed)
    return sample_scopes(store.scope_counts(), max_entries, seed=seed)


def _strata_counts(
    population: list[tuple[Pair, float, bool]],
    chars: np.ndarray,
    rows: list[ReviewRow],
    threshold: float,
    floor: float,
) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for row in rows:
        out.setdefault(row.stratum, {"pairs (estimated)": 0.0, "sampled": 0})["sampled"] += 1
    for (pair, weight, sampled), char in zip(population, chars.tolist(), strict=True):
        if pair.similarity < floor:
            continue
        name = weighted_stratum(pair, sampled, threshold, floor, char)
        if name in out:
            out[name]["pairs (estimated)"] += weight
    return {
        k: {"pairs (estimated)": round(v["pairs (estimated)"]), "sampled": v["sampled"]}
        for k, v in sorted(out.items())
    }


def _labelled_at(labels_path: str, threshold: float, seed: int) -> dict[str, Any] | None:
    """The labelled estimate of the guide's rule at ``threshold`` with its bootstrap interval."""
    from memwork.defrag.calibrate import (
        BOOTSTRAP_SAMPLES,
        _at,
        bootstrap_weights,
        curve,
        read_labels,
        stratum_weights,
    )

    labels = read_labels(labels_path)
    weight = stratum_weights(labels)
    point = curve(labels.similarity, labels.y, weight)
    boot = curve(labels.similarity, labels.y, bootstrap_weights(labels, weight, BOOTSTRAP_SAMPLES, seed))
    return _at(point, boot, round(threshold, 2))
