"""``memwork defrag review`` and ``memwork defrag calibrate``: the review queue and the calibrated
policy (thin: parse, call :mod:`memwork.defrag.review_queue` / :mod:`memwork.defrag.calibrate`, print)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from memwork.cli.options import emit_json, json_option, scope_option, stage_progress, store_option
from memwork.defrag.params import SINCE
from memwork.errors import UsageError

if TYPE_CHECKING:
    from memwork.entry import Entry


@click.command("review")
@store_option()
@scope_option
@click.option("--size", type=int, default=200, show_default=True, help="Pairs in the review file.")
@click.option("--floor", type=float, default=0.5, show_default=True, help="Lowest similarity sampled, 0..1.")
@click.option(
    "--similarity-threshold",
    type=float,
    default=0.85,
    show_default=True,
    help="The threshold the strata are around.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random sample.")
@click.option(
    "--sample-pairs",
    type=int,
    default=None,
    help="Below the threshold, score a uniform random sample of this many pairs instead of finding "
    "every pair from the floor (for a store whose pairs pass MEMWORK_MAX_PAIRS); the weights include it.",
)
@click.option("-o", "--output", default="review.csv", show_default=True, help="The review CSV to write.")
@click.option("--since", default=None, help=SINCE.help)
@json_option
def review_command(
    store_spec: str,
    scope: str | None,
    size: int,
    floor: float,
    similarity_threshold: float,
    seed: int,
    sample_pairs: int | None,
    output: str,
    since: str | None,
    as_json: bool,
) -> None:
    """Write a review queue: a stratified sample of candidate pairs for a person to label.

    Pairs from --floor up (never across scopes), stratified by both signals (text high/semantic low,
    semantic high/text low, both high, near the threshold, below it) and the character similarity
    (char_high: both below but the characters alike, typo-style duplicates; counted exactly, even
    with --sample-pairs), most uncertain first; each row has its stratum, sampling weight and character
    similarity. Reviewers write duplicate, distinct or unsure in `decision`, then
    `memwork defrag calibrate --labels FILE`. Only reads the store.

    \b
    Example:
        memwork defrag review --store ./memory --size 200 -o review.csv
    """
    from memwork.cli.defrag import _open
    from memwork.defrag.actions import load_entries
    from memwork.defrag.review_queue import build_review_queue
    from memwork.defrag.since import resolve_since
    from memwork.entry import validate_scope

    scope = validate_scope(scope) if scope is not None else None
    given = resolve_since(since) if since is not None else None
    with _open(store_spec) as store, stage_progress(quiet=as_json) as bar:
        entries = load_entries(store, scope, bar)
        queue = build_review_queue(
            entries, output, size=size, floor=floor, threshold=similarity_threshold, seed=seed,
            progress=bar, pair_sample=sample_pairs, since=given.at if given is not None else None,
        )  # fmt: skip
    if given is not None:
        queue.since = given.to_dict()
    if as_json:
        emit_json(queue.to_dict())
        return
    estimated = "an estimated " if sample_pairs is not None else ""
    click.echo(
        f"Wrote {len(queue.rows)} pairs of {estimated}{queue.population} candidates to {queue.output} "
        f"(embedding model {queue.embedding_model})."
    )
    for name, counts in queue.strata.items():
        click.echo(f"  {name}: {int(counts['sampled'])} of {int(counts['population'])}")


@click.command("calibrate")
@click.option("--labels", "labels", default=None, help="A labelled review CSV (defrag review).")
@store_option(required=False)
@scope_option
@click.option(
    "-o",
    "--output",
    default=None,
    help="The JSON to write. Default: policy.json with --labels, label-free.json without.",
)
@click.option(
    "--target-precision",
    type=float,
    default=0.99,
    show_default=True,
    help="Estimated precision of auto_merge.",
)
@click.option(
    "--floor", type=float, default=0.5, show_default=True, help="Without labels: lowest similarity."
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap intervals.")
@click.option(
    "--sample-pairs",
    type=int,
    default=None,
    help="With --store: know the pairs below the threshold through a uniform random sample of this many "
    "pairs instead of finding every pair from the floor (for a store whose pairs pass MEMWORK_MAX_PAIRS); "
    "the output states it.",
)
@json_option
def calibrate_command(
    labels: str | None,
    store_spec: str | None,
    scope: str | None,
    output: str | None,
    target_precision: float,
    floor: float,
    seed: int,
    sample_pairs: int | None,
    as_json: bool,
) -> None:
    """Learn a two-threshold duplicate policy from a labelled review file, or estimate without labels.

    Precision, recall and F1 against threshold for each signal and a learned combination of text,
    semantic and character similarity (of text and semantic for a review file without the
    char_similarity column), weighted by the sampling weights (estimates of the whole store) with
    95 % intervals (bootstrap widened to a Wilson interval on the effective labels, never [1, 1]); the
    policy merges from `auto_merge` (estimated precision >= target) and sends pairs from `review` up
    to a person. Use it with --policy on find-duplicates, merge-duplicates and full.

    Without --labels, --store gives a label-free estimate: a two-component Fellegi-Sunter mixture
    fitted by EM over the candidate pairs' (Jaccard, cosine) levels, estimated precision and recall
    per threshold and scope size class, with bootstrap intervals. With both, the policy gains a
    `label_free` section. A store whose pairs at the floor pass MEMWORK_MAX_PAIRS is refused (exit 2)
    unless --sample-pairs N: then the pairs below the threshold are a uniform sample (stated in the
    output). Only reads the store.

    \b
    Examples:
        memwork defrag calibrate --labels review.csv -o policy.json --target-precision 0.99
        memwork defrag calibrate --store ./memory
        memwork defrag calibrate --store ./febrl3 --sample-pairs 50000
    """
    if labels is None and store_spec is None:
        raise UsageError("labels", None, "give --labels FILE, --store STORE or both")
    if sample_pairs is not None and (store_spec is None or sample_pairs < 1):
        raise UsageError("sample_pairs", sample_pairs, "needs --store and a whole number >= 1")
    entries = _entries(store_spec, scope, as_json) if store_spec is not None else None
    if labels is None:
        assert entries is not None
        _label_free(entries, output or "label-free.json", floor, seed, as_json, sample_pairs)
        return
    from memwork.defrag.calibrate import calibrate, write_policy

    output = output or "policy.json"
    result = calibrate(
        labels, target_precision=target_precision, seed=seed, entries=entries, pair_sample=sample_pairs
    )
    write_policy(result, output)
    if as_json:
        emit_json(result.to_dict() | {"output": output})
        return
    policy = result.policy
    auto = "none (nothing merges automatically)" if policy.auto_merge is None else f"{policy.auto_merge:.2f}"
    click.echo(
        f"Wrote {output}: auto_merge {auto}, review {policy.review:.2f} (model {policy.embedding_model})."
    )
    for name, est in policy.report["estimates"].items():
        at = est["auto_merge"]
        if at is None:
            click.echo(f"  {name}: no threshold reaches precision {policy.target_precision}")
            continue
        click.echo(
            f"  {name}: at {at['threshold']:.2f} precision {at['precision']} {at['precision_ci']}, "
            f"recall {at['recall']} {at['recall_ci']}"
        )
    free = policy.report.get("label_free")
    if free:
        row = next(
            (r for r in free["classes"].get("all", {}).get("thresholds", []) if r["threshold"] == 0.85), None
        )
        if row:
            click.echo(
                f"  label-free at 0.85: precision {row['precision']} {row['precision_ci']} "
                f"(pairs: {free['population']})"
            )
    if result.unlabelled_strata:
        click.echo(f"Warning: no labels in {', '.join(result.unlabelled_strata)}; not estimated.", err=True)


def _entries(store_spec: str, scope: str | None, quiet: bool) -> list[Entry]:
    from memwork.cli.defrag import _open
    from memwork.defrag.actions import load_entries
    from memwork.entry import validate_scope

    scope = validate_scope(scope) if scope is not None else None
    with _open(store_spec) as store, stage_progress(quiet=quiet) as bar:
        return load_entries(store, scope, bar)


#: thresholds printed by the label-free summary (the JSON has every one)
_SHOWN = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95)


def _label_free(
    entries: list[Entry], output: str, floor: float, seed: int, as_json: bool, sample_pairs: int | None
) -> None:
    from memwork.defrag.label_free import estimate_without_labels, write_estimate

    estimate = estimate_without_labels(entries, floor=floor, seed=seed, pair_sample=sample_pairs)
    write_estimate(estimate, output)
    if as_json:
        emit_json(estimate.to_dict() | {"output": output})
        return
    estimated = "an estimated " if sample_pairs is not None else ""
    click.echo(
        f"Wrote {output}: label-free estimate over {estimated}{estimate.pairs:,} candidate pairs from "
        f"{floor} ({estimate.population})."
    )
    for name, cls in estimate.classes.items():
        click.echo(
            f"  {name} ({cls['scopes']} scopes, {cls['pairs']} pairs, duplicate share {cls['lambda']}):"
        )
        for row in cls["thresholds"]:
            if any(abs(row["threshold"] - t) < 1e-9 for t in _SHOWN):
                click.echo(
                    f"    {row['threshold']:.2f}: precision {row['precision']} {row['precision_ci']}, "
                    f"recall {row['recall']} {row['recall_ci']}"
                )
