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
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from memwork import checks
from memwork.errors import UsageError
from memwork.reports.summary import REPORT_DIR_ENV

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from memwork.reports.charts import Chart


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

    target = os.environ.get(REPORT_DIR_ENV, "")
    if target and target.strip().lower() not in ("off", "none", "-"):
        return Path(target)
    return Path(tempfile.mkdtemp(prefix="memwork-nb-"))


# ---- tables --------------------------------------------------------------------------------------
def cell_text(value: Any) -> str:
    """A value as an approver should read it: blank for None/NaN, lists joined, dicts as ``k: v``."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
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
    pd = sys.modules.get("pandas")  # pandas' missing values exist only once pandas is loaded
    if pd is not None and (value is pd.NA or value is pd.NaT):
        return ""
    return str(value)


_SEPARATORS_RE = re.compile(r"([/_-])(?=\S)")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(
        value, bool | np.bool_
    )


def _columns_and_rows(rows: Any) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Column names and row tuples of a table given as a list of dicts (read here, without pandas:
    the health report's kernel never imports it, issue 20) or anything ``pandas.DataFrame`` takes."""
    if isinstance(rows, list | tuple) and all(isinstance(r, dict) for r in rows):
        columns = list(dict.fromkeys(k for r in rows for k in r))  # first appearance, as pandas
        return [str(c) for c in columns], [tuple(r.get(c) for c in columns) for r in rows]
    import pandas as pd

    frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows)
    return [str(c) for c in frame.columns], list(frame.itertuples(index=False, name=None))


class Table:
    """A table shown for reading, not for pandas: every value whole (no ``...`` truncation), blanks
    instead of NaN, lists and dicts spelled out, text left-aligned and numbers right-aligned (inline
    styles, so the HTML report and JupyterLab agree), no row index, and a sentence when empty.

    Rows given as a list of dicts are shown without pandas; a DataFrame is read once."""

    def __init__(
        self,
        rows: Any,
        *,
        empty: str = "none",
        html_columns: tuple[str, ...] = (),
        limit: int | None = None,
        align_numbers: bool = True,
        csv: str = "",
        full: Any = None,
    ) -> None:
        columns, body = _columns_and_rows(rows)
        # ``full``: the whole table, when ``rows`` were cut before (e.g. the first pairs with their
        # word diffs): the count and the CSV are the whole table's
        whole = (columns, body) if full is None else _columns_and_rows(full)
        self.total = max(len(whole[1]), len(body))
        self.columns = columns
        self.rows = body[:limit] if limit is not None else body
        self.empty = empty
        self.html_columns = set(html_columns)
        self.align_numbers = align_numbers
        #: the whole table as CSV beside the report (written only when the table is cut)
        self.csv_path = _write_csv(*whole, csv) if self.total > len(self.rows) else None

    @property
    def frame(self) -> Any:
        """The rows shown, as a pandas DataFrame (built when asked for)."""
        import pandas as pd

        return pd.DataFrame(self.rows, columns=self.columns)

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
        if not self.rows:
            return f"<p><em>{html.escape(self.empty)}</em></p>"
        head = "".join(
            f"<th style='text-align:left;vertical-align:bottom'>{html.escape(str(c))}</th>"
            for c in self.columns
        )
        body = "".join(
            "<tr>" + "".join(self._cell(c, v) for c, v in zip(self.columns, row, strict=True)) + "</tr>"
            for row in self.rows
        )
        more = ""
        if self.total > len(self.rows):
            whole = (
                f" -- all {self.total} rows: <a href='{html.escape(self.csv_path.name)}'>"
                f"{html.escape(self.csv_path.name)}</a>"
                if self.csv_path is not None
                else ""
            )
            more = f"<p><em>first {len(self.rows)} of {self.total} rows</em>{whole}</p>"
        return (
            f"<table class='dataframe mw-table'><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table>{more}"
        )

    def __repr__(self) -> str:
        """Plain text, columns right-aligned to their widest value (the text/plain a notebook keeps)."""
        if not self.rows:
            return self.empty
        cells = [list(self.columns)] + [[cell_text(v) for v in row] for row in self.rows]
        widths = [max(len(line[i]) for line in cells) for i in range(len(self.columns))]
        return "\n".join(" ".join(t.rjust(w) for t, w in zip(line, widths, strict=True)) for line in cells)


def table(
    rows: Any,
    *,
    empty: str = "none",
    html_columns: tuple[str, ...] = (),
    limit: int | None = None,
    csv: str = "",
    full: Any = None,
) -> Table:
    """``rows`` (DataFrame, list of dicts) as a readable :class:`Table` for a notebook cell."""
    return Table(rows, empty=empty, html_columns=html_columns, limit=limit, csv=csv, full=full)


_CSV_NAME_RE = re.compile(r"[^A-Za-z0-9_.-]+")


def _csv_value(value: Any) -> Any:
    """A value as the CSV holds it: blank for None/NaN, lists and dicts spelled out as the table shows."""
    if value is None or (isinstance(value, float | np.floating) and not np.isfinite(value)):
        return ""
    if isinstance(value, list | tuple | set | frozenset | dict):
        return cell_text(value)
    return value


def write_full_csv(rows: Any, name: str = "") -> Path | None:
    """A cut table written whole as ``<name>.csv`` in the run folder (None outside a run: nothing is
    written by hand). ``rows``: a DataFrame or a list of dicts. Lists and dicts are spelled out as the
    table shows them."""
    return _write_csv(*_columns_and_rows(rows), name)


def _write_csv(columns: list[str], body: list[tuple[Any, ...]], name: str) -> Path | None:
    import csv
    import os

    target = os.environ.get(REPORT_DIR_ENV, "")
    if not target or target.strip().lower() in ("off", "none", "-"):
        return None
    folder = Path(target)
    stem = _CSV_NAME_RE.sub("_", name).strip("._") or "table"
    path = folder / f"{stem}.csv"
    n = 1
    while not name and path.exists():
        n += 1
        path = folder / f"{stem}-{n}.csv"
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        writer.writerows([_csv_value(v) for v in row] for row in body)
    return path


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
#: the attribute a figure carries its alt text in (set by the figure builders below)
ALT_ATTRIBUTE = "_memwork_alt"


def figure_alt(fig: Figure) -> str:
    """The alt text a figure builder attached (its numbers in words), else its titles."""
    alt = getattr(fig, ALT_ATTRIBUTE, "")
    if alt:
        return str(alt)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    return "; ".join(titles) or "figure"


def show(fig: Figure | Chart, alt: str = "") -> None:
    """Display a figure as an inline image with alt text carrying its numbers: a
    :class:`~memwork.reports.charts.Chart` as its SVG, a matplotlib figure as a PNG (then closed; works
    under any backend). The alt text makes the figure accessible and its numbers diffable."""
    from IPython.display import HTML, display

    from memwork.reports.charts import Chart

    if isinstance(fig, Chart):
        chart = fig if not alt else Chart(fig.svg, alt)
        display(HTML(chart.img_html()))
        return
    import base64

    import matplotlib.pyplot as plt

    text = alt or figure_alt(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    display(HTML(f'<img src="data:image/png;base64,{data}" alt="{html.escape(text, quote=True)}">'))


def _number(value: float) -> str:
    return cell_text(float(value)) if not float(value).is_integer() else f"{int(value):,}"


def bar_figure(
    values: dict[str, float],
    title: str,
    *,
    xlabel: str = "",
    ylabel: str = "",
    limit: float | None = None,
    unit: str = "",
) -> Figure:
    """Horizontal bars, largest at top (coverage, distributions), each labelled with its value; whole
    numbers get whole ticks. Alt text: the title and every bar's value."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    labels = list(values)
    fig, ax = plt.subplots(figsize=(7, 0.45 * max(len(labels), 2) + 1))
    bars = ax.barh(labels[::-1], [values[k] for k in labels][::-1], color="tab:blue")
    ax.bar_label(bars, labels=[f"{_number(values[k])}{unit}" for k in labels][::-1], padding=3, fontsize=8)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    if all(float(v).is_integer() for v in values.values()):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    top = max([float(v) for v in values.values()] or [0.0])
    if limit is not None:
        ax.set_xlim(0, limit)
    elif top > 0:
        ax.set_xlim(0, top * 1.15)  # room for the value labels
    fig.tight_layout()
    numbers = ", ".join(f"{k} {_number(v)}{unit}" for k, v in values.items())
    setattr(fig, ALT_ATTRIBUTE, f"{title}: {numbers}" if numbers else f"{title}: no values")
    return fig


def histogram_data(
    values: list[float],
    bins: int = 20,
    low: float = 0.0,
    high: float = 1.0,
    *,
    weights: list[float] | None = None,
) -> dict[str, list[float]]:
    """Counts and bin edges (what a histogram draws), for summary.json and tests. With ``weights``
    (a sampled pair stands for many) the counts are estimates, rounded to whole pairs; values below
    ``low`` count in the first bin (a negative cosine is as unlike as 0)."""
    data = np.clip(np.asarray(values, dtype=float), low, high)
    counts, edges = np.histogram(data, bins=bins, range=(low, high), weights=weights)
    return {"counts": [round(float(c)) for c in counts], "edges": [round(float(e), 4) for e in edges]}


def _plain_log_axis(ax: Any) -> None:
    """A log count axis labelled 1, 2, 5, 10, 20, 50 ... in plain numbers: matplotlib's default labels
    every minor tick of a short range as 2×10⁰, 3×10⁰ ..., a pile of overlapping labels."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(
        FuncFormatter(lambda value, _pos: f"{value:,.0f}" if value >= 1 else f"{value:g}")
    )
    ax.yaxis.set_minor_formatter(NullFormatter())


def histograms_figure(
    series: dict[str, list[float]], threshold: float, *, title: str, xlabel: str = "similarity"
) -> Figure:
    """One histogram per similarity kind, the threshold marked, axes titled; a log count axis when
    the counts span more than 20x, so the tail above the threshold stays visible. Alt text: per kind,
    how many pairs in all and at or above the threshold."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(series), figsize=(4 * len(series), 3.2), squeeze=False)
    alt = []
    for ax, (name, raw) in zip(axes[0], series.items(), strict=True):
        values = [v for v in raw if v is not None]
        counts, _ = np.histogram(np.asarray(values, dtype=float), bins=20, range=(0, 1))
        ax.hist(values, bins=20, range=(0, 1), color="tab:blue")
        nonzero = counts[counts > 0]
        log = bool(len(nonzero)) and nonzero.max() > 20 * nonzero.min()
        if log:
            _plain_log_axis(ax)
        ax.axvline(threshold, color="tab:red", linestyle="--", label=f"threshold {threshold}")
        above = sum(1 for v in values if v >= threshold)
        ax.set_title(f"{name}: {above:,} of {len(values):,} at ≥ {threshold}", fontsize=9)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("pairs (log scale)" if log else "pairs")
        ax.legend(loc="best", fontsize=8)  # not over the bars
        alt.append(f"{name}: {len(values):,} pairs, {above:,} at or above {threshold}")
    fig.suptitle(title)
    fig.tight_layout()
    setattr(fig, ALT_ATTRIBUTE, f"{title}. " + "; ".join(alt))
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
    ax.set_xlabel("resolve latency (ms)")
    ax.set_title("resolve latency (whiskers: p5-p95)")
    fig.tight_layout()
    medians = ", ".join(f"{n} median {float(np.median(latency_ms[n])):.1f} ms" for n in names)
    setattr(fig, ALT_ATTRIBUTE, f"resolve latency per backend: {medians or 'none timed'}")
    return fig
