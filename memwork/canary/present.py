"""What the canary_signoff notebook and ``memwork canary judge`` show of a judgement: the metric table,
the latency rows and figure, the status and the flat sign-off (same names as the in-process canary's
display calls). Presentation only: nothing here decides."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from memwork.canary.judge import Judgement, MetricResult


def _rounded(value: Any) -> Any:
    from memwork.canary.judge import _rounded as rounded

    return rounded(value)


def ci_text(m: MetricResult) -> str:
    if m.ci_low is None and m.ci_high is None:
        return ""
    return f"[{_rounded(m.ci_low)}, {_rounded(m.ci_high)}]"


def metric_rows(judgement: Judgement) -> list[dict[str, Any]]:
    """The per-metric table: classification, samples, estimate with its CI, threshold, p; the backend
    pair of each row when the log holds several."""
    several = len(judgement.pairs) > 1
    rows = []
    for m in judgement.metrics:
        row: dict[str, Any] = {"pair": m.pair or "(log)"} if several else {}
        row.update(
            {
                "metric": m.metric,
                "class": m.classification,
                "direction": m.direction,
                "n (baseline/target)": f"{m.n_baseline}/{m.n_target}",
                "baseline": _rounded(m.baseline),
                "target": _rounded(m.target),
                "estimate": _rounded(m.estimate),
                "CI": ci_text(m),
                "relative": _rounded(m.relative),
                "threshold": _rounded(m.threshold),
                "p": _rounded(m.p_value),
                "detectable": _rounded(m.detectable),
                "detail": m.detail,
            }
        )
        rows.append(row)
    return rows


def judgement_gate_frame(judgement: Judgement) -> Any:
    import pandas as pd

    return pd.DataFrame(metric_rows(judgement))


def judgement_latency_rows(judgement: Judgement) -> list[dict[str, Any]]:
    """Per pair and side: backend, sample size, p50, p95, max (ms) of the answers both sides gave."""
    from memwork.pgvector.canary import percentiles

    several = len(judgement.pairs) > 1
    rows = []
    for pair in judgement.pairs:
        for side, values in pair.latency_ms.items():
            name = pair.primary if side == "primary" else pair.shadow
            row: dict[str, Any] = {"pair": pair.label} if several else {}
            rows.append({**row, "side": side, "backend": name or "", **percentiles(values)})
    return rows


def judgement_status_fields(judgement: Judgement) -> dict[str, Any]:
    """The service as the judge saw it (when a base URL was given) and what the log held."""
    service = dict(judgement.signoff.get("service") or {})
    shadow = service.pop("shadow", None) or {}
    out: dict[str, Any] = {k: v for k, v in service.items() if v is not None}
    for key in ("enabled", "backend", "sample", "counters"):
        if key in shadow:
            out[f"shadow {key}"] = shadow[key]
    log = judgement.log
    out["comparisons read"] = judgement.records
    out["repeats counted once"] = log.get("duplicates", 0)
    out["requestIds reused with other content"] = log.get("conflicts", 0)
    out["damaged lines"] = log.get("damaged", 0)
    if log.get("damaged_examples"):
        out["first damaged lines"] = "; ".join(log["damaged_examples"])
    out["backend pairs"] = ", ".join(f"{p.label} ({p.records})" for p in judgement.pairs if p.label) or "none"
    return out


def judgement_backends_frame(judgement: Judgement) -> Any:
    import pandas as pd

    rows = [
        {"pair": pair.label, "side": side, "backend": name, "role": role, "verdict": pair.verdict}
        for pair in judgement.pairs
        for side, name, role in (("primary", pair.primary, "baseline"), ("shadow", pair.shadow, "target"))
        if name
    ]
    rows += [
        {"pair": f"{p['primary']} -> {p['shadow']}", "side": "-", "backend": "-", "role": "not judged",
         "verdict": f"{p['records']} comparisons not selected"}
        for p in judgement.not_judged
    ]  # fmt: skip
    return pd.DataFrame(rows)


def judgement_signoff_fields(judgement: Judgement) -> dict[str, Any]:
    """The sign-off block flat: whole digests, thresholds, every pair and the run ids of the inputs."""
    skipped = (
        "classification",
        "samples",
        "inputs",
        "service",
        "log_quality",
        "pairs",
        "pairs_not_judged",
        "method",
    )
    block = {k: v for k, v in judgement.signoff.items() if k not in skipped}
    block["thresholds"] = "; ".join(f"{k}={v}" for k, v in judgement.thresholds.__dict__.items())
    block["comparison_log_files"] = ", ".join(block.get("comparison_log_files") or [])
    block["backend pairs"] = (
        "; ".join(f"{p.label}: {p.verdict}" for p in judgement.pairs if p.label) or "none"
    )
    if judgement.not_judged:
        block["pairs not judged"] = "; ".join(
            f"{p['primary']} -> {p['shadow']}" for p in judgement.not_judged
        )
    method = judgement.signoff.get("method") or {}
    if method:
        block["minimum paired answers for GO"] = method.get("minimum_paired_answers")
    for name, shown in (judgement.signoff.get("inputs") or {}).items():
        block[f"{name} run id"] = (shown or {}).get("run_id") or "(not given)"
        if shown:
            block[f"{name} sha256"] = shown["summary_sha256"]
    return block


def latency_distributions_figure(judgement: Judgement) -> Any:
    """Every judged backend's resolve latency: overlaid histograms (shared bins) and ECDFs."""
    import matplotlib.pyplot as plt

    fig, (hist, ecdf) = plt.subplots(1, 2, figsize=(10, 3.4))
    several = len(judgement.pairs) > 1
    series: dict[str, np.ndarray] = {}
    for pair in judgement.pairs:
        for side, values in pair.latency_ms.items():
            name = pair.primary if side == "primary" else pair.shadow
            label = f"{side} ({name})" if name else side
            if values:
                series[f"{pair.label}: {label}" if several else label] = np.asarray(values, dtype=float)
    if series:
        everything = np.concatenate(list(series.values()))
        bins = np.histogram_bin_edges(everything, bins=min(40, max(10, everything.size // 10)))
        colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        for index, (label, sample) in enumerate(series.items()):
            colour = colours[index % len(colours)]
            hist.hist(sample, bins=bins, alpha=0.55, color=colour, label=f"{label}, n={sample.size}")
            ordered = np.sort(sample)
            ecdf.step(ordered, np.arange(1, ordered.size + 1) / ordered.size, where="post", color=colour,
                      label=f"{label}, p95 {np.percentile(ordered, 95):.1f} ms")  # fmt: skip
        hist.legend(fontsize=8)
        ecdf.legend(fontsize=8, loc="lower right")
    else:
        hist.text(0.5, 0.5, "no paired answers", ha="center", va="center", transform=hist.transAxes)
    hist.set_title("resolve latency (histogram)")
    hist.set_xlabel("ms")
    ecdf.set_title("resolve latency (ECDF)")
    ecdf.set_xlabel("ms")
    ecdf.set_ylabel("share of answers")
    fig.tight_layout()
    return fig
