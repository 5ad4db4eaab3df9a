"""What the ``canary_signoff`` report shows of a rollout verdict, the in-process gates' or the judge's:
the gate (or metric) table, the latency rows and figure, the status, the backends and the flat
sign-off. Presentation only: nothing here decides.

Each function takes the result :func:`memwork.rollout.run.run_signoff` returns and shows it by its
``mode`` (``gates`` or ``judge``), so the notebook's cells are the same for both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np

from memwork.percentiles import percentiles

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from memwork.rollout.gates import GateResult
    from memwork.rollout.judge import Judgement, MetricResult

    Result = GateResult | Judgement

#: the columns of the backends table of the gates' status
BACKEND_COLUMNS = ("name", "available", "reason", "supports")
#: the status fields the gates show (the backends table is shown apart)
STATUS_KEYS = ("enabled", "backend", "selectedBackend", "selectedBackends", "fallbacks", "vectorEnabled",
               "failOpen", "configErrors", "pluginErrors")  # fmt: skip


def _judgement(result: Result) -> Judgement | None:
    """The result as the judge's, None for the gates' (told apart by ``mode``: reports import no
    rollout module, the rollout reads reports' summaries)."""
    return cast("Judgement", result) if result.mode == "judge" else None


def _gates(result: Result) -> GateResult:
    return cast("GateResult", result)


def _rounded(value: Any) -> Any:
    import math

    if isinstance(value, float):
        return None if not math.isfinite(value) else round(value, 4)
    return value


# ---- the tables every result has ----------------------------------------------------------------


def gate_rows(result: Result) -> list[dict[str, Any]]:
    """The gates (gate, status, detail), or the judge's metric table."""
    judgement = _judgement(result)
    if judgement is not None:
        return metric_rows(judgement)
    return [g.to_dict() for g in _gates(result).gates]


def latency_rows(result: Result) -> list[dict[str, Any]]:
    """Per backend (gates) or per pair and side (judge): sample size, p50, p95, max (ms), and the
    failed resolves of each backend the gates timed."""
    judgement = _judgement(result)
    if judgement is None:
        gates = _gates(result)
        return [
            {"backend": name, **percentiles(values), "errors": gates.errors.get(name, 0)}
            for name, values in gates.latency_ms.items()
        ]
    several = len(judgement.pairs) > 1
    rows = []
    for pair in judgement.pairs:
        for side, values in pair.latency_ms.items():
            name = pair.primary if side == "primary" else pair.shadow
            row: dict[str, Any] = {"pair": pair.label} if several else {}
            rows.append({**row, "side": side, "backend": name or "", **percentiles(values)})
    return rows


def latency_figure(result: Result, limit_ms: float | None = None) -> Figure:
    """The gates: box plots per backend, the p95 limit marked. The judge: every judged backend's
    latency as overlaid histograms and ECDFs."""
    judgement = _judgement(result)
    if judgement is None:
        from memwork.reports.display import latency_figure as boxplots

        return boxplots(_gates(result).latency_ms, limit_ms)
    return latency_distributions_figure(judgement)


def status_fields(result: Result) -> dict[str, Any]:
    """The facade's status as the gates saw it; or the service as the judge saw it (when a base URL
    was given) and what the log held."""
    judgement = _judgement(result)
    if judgement is None:
        status = _gates(result).status
        out = {k: status.get(k) for k in STATUS_KEYS if k in status}
        for key in ("configErrors", "pluginErrors", "fallbacks"):
            if key in out and not out[key]:
                out[key] = "none"
        return out
    service = dict(judgement.signoff.get("service") or {})
    shadow = service.pop("shadow", None) or {}
    shown: dict[str, Any] = {k: v for k, v in service.items() if v is not None}
    for key in ("enabled", "backend", "sample", "counters"):
        if key in shadow:
            shown[f"shadow {key}"] = shadow[key]
    log = judgement.log
    shown["comparisons read"] = judgement.records
    shown["repeats counted once"] = log.get("duplicates", 0)
    shown["requestIds reused with other content"] = log.get("conflicts", 0)
    shown["damaged lines"] = log.get("damaged", 0)
    if log.get("damaged_examples"):
        shown["first damaged lines"] = "; ".join(log["damaged_examples"])
    pairs = ", ".join(f"{p.label} ({p.records})" for p in judgement.pairs if p.label)
    shown["backend pairs"] = pairs or "none"
    return shown


def backend_rows(result: Result) -> list[dict[str, Any]]:
    """The gates: every backend of the status (name, availability, reason, supported operations).
    The judge: each side of each pair judged, and the pairs not selected."""
    judgement = _judgement(result)
    if judgement is None:
        return [{k: b.get(k) for k in BACKEND_COLUMNS} for b in _gates(result).status.get("backends") or []]
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
    return rows


def signoff_fields(result: Result) -> dict[str, Any]:
    """The sign-off block flat, every digest whole: the input reports by run id and digest; for the
    judge also its thresholds, every pair and the log's files."""
    signoff = result.signoff
    nested = ("inputs", "classification", "samples", "service", "log_quality", "pairs", "pairs_not_judged",
              "method")  # fmt: skip
    block = {k: v for k, v in signoff.items() if k not in nested}
    judgement = _judgement(result)
    if judgement is not None:
        block["thresholds"] = "; ".join(f"{k}={v}" for k, v in judgement.thresholds.__dict__.items())
        block["comparison_log_files"] = ", ".join(block.get("comparison_log_files") or [])
        block["backend pairs"] = (
            "; ".join(f"{p.label}: {p.verdict}" for p in judgement.pairs if p.label) or "none"
        )
        if judgement.not_judged:
            block["pairs not judged"] = "; ".join(
                f"{p['primary']} -> {p['shadow']}" for p in judgement.not_judged
            )
        # the A/A noise floor in words: measured (its log, its agreement and p95 spread) or why not
        block.pop("noise_floor", None)
        block["noise floor (A/A)"] = judgement.noise_floor.detail
        method = signoff.get("method") or {}
        if method:
            block["minimum paired answers for GO"] = method.get("minimum_paired_answers")
    for name, shown in (signoff.get("inputs") or {}).items():
        block[f"{name} run id"] = (shown or {}).get("run_id") or "(not given)"
        block[f"{name} sha256"] = (shown or {}).get("summary_sha256") or "(not given)"
    return block


# ---- the judge's own -----------------------------------------------------------------------------


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


def latency_distributions_figure(judgement: Judgement) -> Figure:
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
    from memwork.reports.display import ALT_ATTRIBUTE

    setattr(fig, ALT_ATTRIBUTE, _latency_alt(series))
    return fig


def _latency_alt(series: dict[str, np.ndarray]) -> str:
    """The figure's numbers in words (its alt text): per backend, answers, median, p95 and p99."""
    if not series:
        return "resolve latency (histogram and ECDF): 0 paired answers"
    parts = [
        f"{label}: n={s.size}, median {np.median(s):.1f} ms, p95 {np.percentile(s, 95):.1f} ms, "
        f"p99 {np.percentile(s, 99):.1f} ms"
        for label, s in series.items()
    ]
    return "resolve latency (histogram and ECDF): " + "; ".join(parts)
