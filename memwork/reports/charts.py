"""Bar charts drawn as SVG text, without matplotlib: the health report's figures (issue 20).

A report's fixed cost is mostly its kernel's imports; matplotlib (~0.4 s to import, ~0.15 s to lay out
and rasterise each figure) was the largest of them, for three bar charts. A horizontal bar chart is a
few rectangles and labels, so :func:`bar_chart` writes it directly: the same bars, value labels, title,
axis labels and ticks as :func:`memwork.reports.display.bar_figure`, shown as an ``<img>`` whose source
is the SVG inline (``data:image/svg+xml``: the page stays self-contained, the figure scales without
blur and is a few kB instead of a PNG's tens) with the alt text carrying every bar's number.
"""

from __future__ import annotations

import base64
import html
import math
from dataclasses import dataclass

#: matplotlib's ``tab:blue`` and its default font, so the charts look like the other reports' figures
BAR_COLOR = "#1f77b4"
FONT = "DejaVu Sans, Verdana, Arial, sans-serif"
#: pixels per inch of bar_figure's size at show()'s dpi: the same size on the page
DPI = 90
#: font sizes in pixels: matplotlib's 10 pt ticks, 8 pt value labels and 12 pt title at 90 dpi
TICK_FONT = 12
VALUE_FONT = 10
TITLE_FONT = 15
#: average glyph width of the font as a share of its size (for the label column's width)
GLYPH = 0.6


@dataclass(frozen=True)
class Chart:
    """An SVG figure and its alt text; shown in a notebook as an inline ``<img>``."""

    svg: str
    alt: str

    def img_html(self) -> str:
        """``<img>`` with the SVG as a data URI and the alt text (what :func:`show` displays)."""
        data = base64.b64encode(self.svg.encode("utf-8")).decode("ascii")
        return f'<img src="data:image/svg+xml;base64,{data}" alt="{html.escape(self.alt, quote=True)}">'

    def _repr_html_(self) -> str:
        return self.img_html()


def nice_ticks(top: float, *, integer: bool, most: int = 8) -> list[float]:
    """Ticks from 0 up to ``top`` at a step of 1, 2, 2.5 or 5 x 10^k (whole steps for counts)."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / max(most - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    if integer:
        step = max(1.0, float(math.ceil(step)))
    count = math.floor(top / step + 1e-9)
    return [round(i * step, 10) for i in range(count + 1)]


def _number(value: float) -> str:
    """Whole numbers with thousands separators, others to at most 3 decimals (as the tables show them)."""
    number = float(value)
    if number.is_integer():
        return f"{int(number):,}"
    return f"{number:.3f}".rstrip("0").rstrip(".")


def _axis_end(right: float, left: float, fractions: list[float], labels: list[str]) -> float:
    """Where the axis ends so that every bar's value label fits on the figure (matplotlib's
    ``bbox_inches="tight"`` grows the figure instead; a label past a full bar would be cut off)."""
    span = right - left
    overflow = max(
        [
            f * span + 4 + len(label) * VALUE_FONT * GLYPH - span
            for f, label in zip(fractions, labels, strict=True)
        ]
        or [0.0]
    )
    return right - max(overflow, 0.0)


def _text(x: float, y: float, text: str, size: int, anchor: str = "start", extra: str = "") -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}"{extra}>'
        f"{html.escape(text)}</text>"
    )


def bar_chart(
    values: dict[str, float],
    title: str,
    *,
    xlabel: str = "",
    ylabel: str = "",
    limit: float | None = None,
    unit: str = "",
) -> Chart:
    """Horizontal bars in the order given (first at the top), each labelled with its value; whole
    numbers get whole ticks; the axis runs to ``limit`` or 15 % past the largest bar (room for the
    labels). Alt text: the title and every bar's value, as :func:`~memwork.reports.display.bar_figure`."""
    labels = list(values)
    numbers = [float(values[k]) for k in labels]
    top = max(numbers, default=0.0)
    end = float(limit) if limit is not None else (top * 1.15 if top > 0 else 1.0)
    ticks = [t for t in nice_ticks(end, integer=all(n.is_integer() for n in numbers)) if t <= end + 1e-9]
    width, height = 7 * DPI, round((0.45 * max(len(labels), 2) + 1) * DPI)
    label_width = max([len(k) for k in labels] or [1]) * TICK_FONT * GLYPH
    left = 12 + label_width + 8 + (TICK_FONT + 8 if ylabel else 0)
    # the last tick's label is centred on the axis end: half of it must fit on the figure too
    last_tick = len(_number(ticks[-1])) * TICK_FONT * GLYPH / 2 if ticks else 0.0
    right = _axis_end(
        width - max(16.0, last_tick + 4),
        left,
        [min(max(n, 0.0), end) / end for n in numbers],
        [f"{_number(n)}{unit}" for n in numbers],
    )
    top_y = 12 + TITLE_FONT + 10
    bottom = height - (12 + TICK_FONT + 6 + (TICK_FONT + 6 if xlabel else 0))

    def x_of(value: float) -> float:
        return left + (right - left) * min(max(value, 0.0), end) / end

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="{FONT}" fill="#000">',
        f'<rect width="{width}" height="{height}" fill="#fff"/>',
        _text((left + right) / 2, 12 + TITLE_FONT, title, TITLE_FONT, "middle"),
    ]
    for tick in ticks:
        x = x_of(tick)
        parts.append(f'<line x1="{x:.1f}" y1="{bottom}" x2="{x:.1f}" y2="{bottom + 4}" stroke="#000"/>')
        parts.append(_text(x, bottom + 6 + TICK_FONT, _number(tick), TICK_FONT, "middle"))
    slot = (bottom - top_y) / max(len(labels), 1)
    for i, (label, value) in enumerate(zip(labels, numbers, strict=True)):
        y, bar = top_y + slot * i + slot * 0.1, slot * 0.8
        parts.append(
            f'<rect x="{left}" y="{y:.1f}" width="{x_of(value) - left:.1f}" height="{bar:.1f}" '
            f'fill="{BAR_COLOR}"/>'
        )
        middle = y + bar / 2 + TICK_FONT * 0.35
        parts.append(_text(left - 6, middle, label, TICK_FONT, "end"))
        parts.append(_text(x_of(value) + 4, middle, f"{_number(value)}{unit}", VALUE_FONT))
    parts.append(
        f'<rect x="{left}" y="{top_y}" width="{right - left}" height="{bottom - top_y}" '
        'fill="none" stroke="#000"/>'
    )
    if xlabel:
        parts.append(_text((left + right) / 2, height - 10, xlabel, TICK_FONT, "middle"))
    if ylabel:
        middle = (top_y + bottom) / 2
        parts.append(
            _text(14, middle, ylabel, TICK_FONT, "middle", f' transform="rotate(-90 14 {middle:.1f})"')
        )
    parts.append("</svg>")
    spelled = ", ".join(f"{k} {_number(v)}{unit}" for k, v in values.items())
    return Chart("".join(parts), f"{title}: {spelled}" if spelled else f"{title}: no values")
