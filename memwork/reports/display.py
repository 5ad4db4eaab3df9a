"""What the report notebooks display with: parameter checks, tables, chart data, figures, word diffs.

The notebooks only display; what they display is computed by the library (the defrag health report and
duplicate review, the canary, verification) and shaped here, where it is unit-tested. Figures are shown
with :func:`show`, which embeds a PNG whatever matplotlib backend the kernel uses.
"""

from __future__ import annotations

import difflib
import html
import io
import json
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from memwork import checks
from memwork.errors import UsageError
from memwork.reports.summary import REPORT_DIR_ENV

if TYPE_CHECKING:
    from matplotlib.figure import Figure


# ---- parameter checks (the notebooks' validation cells) -----------------------------------------
# UsageError (not ValueError) so a bad notebook parameter reads like bad CLI input: field, value, problem.
def check_unit(name: str, value: float) -> None:
    """UsageError naming the parameter unless 0 <= value <= 1."""
    checks.unit(name, value)


def check_range(name: str, value: float, low: float, high: float) -> None:
    """UsageError naming the parameter unless low <= value <= high."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise UsageError(name, value, f"must be from {low} to {high}")


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    """UsageError naming the parameter unless value is one of choices."""
    if value not in choices:
        raise UsageError(name, value, f"must be one of {', '.join(choices)}")


def check_file(name: str, value: str) -> None:
    """UsageError unless value is empty or an existing file (or a run folder with summary.json)."""
    if value and not (Path(value).is_file() or (Path(value) / "summary.json").is_file()):
        raise UsageError(name, value, "no such file")


# ---- where a notebook writes side files -----------------------------------------------------------
def output_dir() -> Path:
    """The run folder under the report runner; a temp folder otherwise (never the repository)."""
    import os

    target = os.environ.get(REPORT_DIR_ENV)
    return Path(target) if target else Path(tempfile.mkdtemp(prefix="memwork-nb-"))


# ---- tables --------------------------------------------------------------------------------------
def cell_text(value: Any) -> str:
    """A value as an approver should read it: blank for None/NaN, lists joined, dicts as ``k: v``."""
    if value is None:
        return ""
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, float | np.floating):
        number = float(value)
        if not np.isfinite(number):
            return ""
        if number.is_integer() and abs(number) < 1e15:
            return f"{int(number):,}" if abs(number) >= 10_000 else str(int(number))
        return f"{number:.3f}".rstrip("0").rstrip(".")
    if isinstance(value, int | np.integer):
        return f"{int(value):,}" if abs(int(value)) >= 10_000 else str(int(value))
    if isinstance(value, dict):
        return "; ".join(f"{k}: {cell_text(v)}" for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return ", ".join(cell_text(v) for v in value)
    try:
        import pandas as pd

        if value is pd.NA or value is pd.NaT:
            return ""
    except ImportError:  # pragma: no cover - pandas is a dependency
        pass
    return str(value)


_SEPARATORS_RE = re.compile(r"([/_-])(?=\S)")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(
        value, bool | np.bool_
    )


class Table:
    """A table shown for reading, not for pandas: every value whole (no ``...`` truncation), blanks
    instead of NaN, lists and dicts spelled out, text left-aligned and numbers right-aligned (inline
    styles, so the HTML report and JupyterLab agree), no row index, and a sentence when empty."""

    def __init__(
        self,
        rows: Any,
        *,
        empty: str = "none",
        html_columns: tuple[str, ...] = (),
        limit: int | None = None,
        align_numbers: bool = True,
    ) -> None:
        import pandas as pd

        frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows)
        self.total = len(frame)
        self.frame = frame.head(limit) if limit is not None else frame
        self.empty = empty
        self.html_columns = set(html_columns)
        self.align_numbers = align_numbers

    def _cell(self, column: str, value: Any) -> str:
        if column in self.html_columns:
            text, wrap = str(value), "white-space:normal"
        else:
            plain = cell_text(value)
            text = html.escape(plain)
            if len(plain) <= 24:  # short values (bands, scopes, yes/no) never wrap
                wrap = "white-space:nowrap"
            elif _SEPARATORS_RE.search(plain):  # paths and ids break after / - _ , not mid-word
                text = _SEPARATORS_RE.sub(r"\1<wbr>", text)
                wrap = "white-space:normal;overflow-wrap:break-word"
            else:  # digests and other long unbroken tokens may break anywhere
                wrap = "white-space:normal;overflow-wrap:anywhere"
        align = "right" if self.align_numbers and _is_number(value) else "left"
        return f"<td style='text-align:{align};vertical-align:top;{wrap}'>{text}</td>"

    def _repr_html_(self) -> str:
        if self.frame.empty:
            return f"<p><em>{html.escape(self.empty)}</em></p>"
        head = "".join(
            f"<th style='text-align:left;vertical-align:bottom'>{html.escape(str(c))}</th>"
            for c in self.frame.columns
        )
        body = "".join(
            "<tr>" + "".join(self._cell(c, v) for c, v in zip(self.frame.columns, row, strict=True)) + "</tr>"
            for row in self.frame.itertuples(index=False, name=None)
        )
        more = (
            f"<p><em>first {len(self.frame)} of {self.total} rows</em></p>"
            if self.total > len(self.frame)
            else ""
        )
        return (
            f"<table class='dataframe mw-table'><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table>{more}"
        )

    def __repr__(self) -> str:
        if self.frame.empty:
            return self.empty
        return self.frame.map(cell_text).to_string(index=False)


def table(
    rows: Any, *, empty: str = "none", html_columns: tuple[str, ...] = (), limit: int | None = None
) -> Table:
    """``rows`` (DataFrame, list of dicts) as a readable :class:`Table` for a notebook cell."""
    return Table(rows, empty=empty, html_columns=html_columns, limit=limit)


def fields(mapping: dict[str, Any], *, name: str = "value", empty: str = "none") -> Table:
    """A dict as a two-column table (label, value): counts, vector checks, the sign-off block."""
    return Table([{"": k, name: v} for k, v in mapping.items()], empty=empty, align_numbers=False)


def human_bytes(n: float) -> str:
    """1234567 -> '1.2 MB'."""
    size = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(size) < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"  # pragma: no cover


# ---- figures --------------------------------------------------------------------------------------
def show(fig: Figure) -> None:
    """Display a matplotlib figure as an inline PNG and close it (works under any backend)."""
    import matplotlib.pyplot as plt
    from IPython.display import Image, display

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    display(Image(data=buffer.getvalue(), format="png"))


def bar_figure(
    values: dict[str, float], title: str, *, xlabel: str = "", limit: float | None = None
) -> Figure:
    """Horizontal bars, largest at top (coverage, distributions)."""
    import matplotlib.pyplot as plt

    labels = list(values)
    fig, ax = plt.subplots(figsize=(7, 0.45 * max(len(labels), 2) + 1))
    ax.barh(labels[::-1], [values[k] for k in labels][::-1], color="tab:blue")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    if limit is not None:
        ax.set_xlim(0, limit)
    fig.tight_layout()
    return fig


def histogram_data(
    values: list[float], bins: int = 20, low: float = 0.0, high: float = 1.0
) -> dict[str, list[float]]:
    """Counts and bin edges (what a histogram draws), for summary.json and tests."""
    counts, edges = np.histogram(np.asarray(values, dtype=float), bins=bins, range=(low, high))
    return {"counts": counts.tolist(), "edges": [round(float(e), 4) for e in edges]}


def histograms_figure(series: dict[str, list[float]], threshold: float, *, title: str) -> Figure:
    """One histogram per similarity kind, the threshold marked in each."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(series), figsize=(4 * len(series), 3), squeeze=False)
    for ax, (name, values) in zip(axes[0], series.items(), strict=True):
        ax.hist([v for v in values if v is not None], bins=20, range=(0, 1), color="tab:blue")
        ax.axvline(threshold, color="tab:red", linestyle="--", label=f"threshold {threshold}")
        ax.set_title(name)
        ax.legend(loc="upper left", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


# ---- word diff (the duplicate review) -------------------------------------------------------------
def word_diff_html(a: str, b: str) -> str:
    """Word-level diff of two texts as HTML (<del> removed from a, <ins> added in b)."""
    wa, wb = a.split(), b.split()
    out: list[str] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=wa, b=wb, autojunk=False).get_opcodes():
        if op == "equal":
            out.append(html.escape(" ".join(wa[i1:i2])))
            continue
        if i2 > i1:
            out.append(f"<del style='background:#ffebe9'>{html.escape(' '.join(wa[i1:i2]))}</del>")
        if j2 > j1:
            out.append(f"<ins style='background:#dafbe1'>{html.escape(' '.join(wb[j1:j2]))}</ins>")
    return " ".join(out)


def verdict_text(summary: dict[str, Any]) -> str:
    """``PASS`` / ``FAIL`` and every reason, one per line, for a notebook's result cell."""
    reasons = summary.get("reasons") or []
    lines = [f"verdict: {summary.get('verdict')}"]
    lines += [f"  - {r}" for r in reasons] if reasons else []
    return "\n".join(lines)


def as_json(data: Any) -> str:
    """Pretty JSON for a notebook cell."""
    return json.dumps(data, indent=2, ensure_ascii=False, default=str)


def latency_figure(latency_ms: dict[str, list[float]], limit_ms: float | None = None) -> Figure:
    """Box plots of resolve latency per backend, the p95 limit marked."""
    import matplotlib.pyplot as plt

    names = [n for n, v in latency_ms.items() if v]
    fig, ax = plt.subplots(figsize=(7, 3))
    if names:
        ax.boxplot([latency_ms[n] for n in names], vert=False, whis=(5, 95))
        ax.set_yticks(range(1, len(names) + 1), names)
    if limit_ms is not None:
        ax.axvline(limit_ms, color="tab:red", linestyle="--", label=f"p95 limit {limit_ms} ms")
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xlabel("ms")
    ax.set_title("resolve latency (whiskers: p5-p95)")
    fig.tight_layout()
    return fig
