"""Percentiles of a sample: the p50 / p95 / max / count summary every latency table shows.

Neutral: the rollout's gates sign latencies with it, the report views show them with it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """p50, p95, max (rounded to 3 places) and count of a sample; NaN for each of an empty one."""
    if not len(values):
        return {"count": 0, "p50": float("nan"), "p95": float("nan"), "max": float("nan")}
    arr = np.asarray(values, dtype=float)
    return {
        "count": len(values),
        "p50": round(float(np.percentile(arr, 50)), 3),
        "p95": round(float(np.percentile(arr, 95)), 3),
        "max": round(float(arr.max()), 3),
    }
