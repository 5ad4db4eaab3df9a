"""Self-contained HTML for an executed report notebook.

nbconvert's lab template pulls require.js, MathJax and fonts from CDNs; an approver may read the
report offline or years later, so every ``<script>`` and every external ``<link>``/``url()``/
``@import`` is removed. Figures are already inline (``data:image/png;base64``). Code is hidden by
default: the reader wants results; the executed ``.ipynb`` beside it has the code.
"""

from __future__ import annotations

import html
import logging
import re
import threading
from typing import Any

import nbformat

_SCRIPT_RE = re.compile(r"<script\b[^>]*>.*?</script\s*>", re.IGNORECASE | re.DOTALL)
_LINK_RE = re.compile(r"<link\b[^>]*>", re.IGNORECASE)
_IMPORT_RE = re.compile(r"@import\s+(url\()?\s*['\"]?[^;]*;", re.IGNORECASE)
_EXT_URL_RE = re.compile(r"url\(\s*['\"]?(?:https?:)?//[^)]*\)", re.IGNORECASE)
_EXT_ATTR_RE = re.compile(r"""\s(?:src|href)\s*=\s*["']?(?:https?:)?//[^"'\s>]*["']?""", re.IGNORECASE)
#: what a self-contained page must not contain (used by tests and by :func:`external_references`)
EXTERNAL_REF_RE = re.compile(
    r"""(?:<script\b[^>]*\bsrc\s*=|<link\b[^>]*href\s*=\s*["']?(?:https?:)?//|"""
    r"""\b(?:src|href)\s*=\s*["']?(?:https?:)?//|url\(\s*['"]?(?:https?:)?//|@import)""",
    re.IGNORECASE,
)


_STYLE_RE = re.compile(r"(<style\b[^>]*>)(.*?)(</style\s*>)", re.IGNORECASE | re.DOTALL)
_CSS_COMMENT_RE = re.compile(r"/\*.*?\*/", re.DOTALL)


def strip_external(page: str) -> str:
    """Remove scripts, external stylesheets and fonts, and any other reference off the page."""
    page = _STYLE_RE.sub(lambda m: m.group(1) + _CSS_COMMENT_RE.sub("", m.group(2)) + m.group(3), page)
    page = _SCRIPT_RE.sub("", page)
    page = _LINK_RE.sub("", page)
    page = _IMPORT_RE.sub("", page)
    page = _EXT_URL_RE.sub("none", page)
    return _EXT_ATTR_RE.sub("", page)


def external_references(page: str) -> list[str]:
    """Every reference to something outside the page (empty for a self-contained page)."""
    return [m.group(0) for m in EXTERNAL_REF_RE.finditer(page)]


_COLOURS = {"PASS": "#1a7f37", "GO": "#1a7f37", "INFO": "#0969da", "INCONCLUSIVE": "#9a6700"}
_STATE_COLOURS = {"pass": "#1a7f37", "fail": "#cf222e", "nodata": "#9a6700", "off": "#6e7781"}


def _table(pairs: list[tuple[str, Any]]) -> str:
    cells = "".join(
        f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>" for k, v in pairs
    )
    return f"<table class='mw-prov'>{cells}</table>"


def _value(value: Any, unit: str = "") -> str:
    if value is None or value == "":
        return "–"
    if isinstance(value, float):
        value = f"{value:.4g}"
    return f"{value} {unit}".strip()


def _signed(value: Any) -> str:
    text = _value(value)
    return f"+{text}" if isinstance(value, (int, float)) and value > 0 else text


def verdict_sentence(verdict: str, gates: list[dict[str, Any]]) -> str:
    """``PASS: 9 of 9 gates passed`` -- what a verdict stands on; a report without gates says so."""
    from memwork.reports.gates import passed_sentence, tally

    if not gates:
        return f"{verdict}: this report records no gates (it informs, it does not decide)"
    counts = tally(gates)
    if counts["on"] == 0:
        return f"{verdict}: every gate is off -- nothing was checked"
    return f"{verdict}: {passed_sentence(gates)}"


def gate_strip(gates: list[dict[str, Any]]) -> str:
    """The gates as a strip: state, observed value, threshold, default or set, why."""
    if not gates:
        return "<p class='mw-nogates'>no gates recorded</p>"
    rows = []
    for g in gates:
        state = str(g.get("state", "off"))
        threshold = (
            "off"
            if state == "off" and g.get("threshold") is None
            else _value(g.get("threshold"), g.get("unit", ""))
        )
        if threshold not in ("off", "–"):
            threshold = f"{g.get('comparison', '')} {threshold}".strip()
        origin = "–" if threshold in ("off", "–") else str(g.get("origin", "default"))
        rows.append(
            f"<tr class='mw-gate mw-{html.escape(state)}'><td>{html.escape(str(g.get('name')))}</td>"
            f"<td><span class='mw-state' style='background:{_STATE_COLOURS.get(state, '#6e7781')}'>"
            f"{html.escape(state.upper())}</span></td>"
            f"<td>{html.escape(_value(g.get('observed'), g.get('unit', '')))}</td>"
            f"<td>{html.escape(threshold)}</td><td>{html.escape(origin)}</td>"
            f"<td>{html.escape(str(g.get('why') or ''))}</td></tr>"
        )
    return (
        "<table class='mw-gates'><thead><tr><th>gate</th><th>state</th><th>observed</th><th>threshold</th>"
        "<th>threshold is</th><th>why</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )


def comparison_block(comparison: dict[str, Any] | None) -> str:
    """First whether the previous run is comparable, then the delta against the previous comparable run."""
    if not comparison:
        return ""
    if not comparison.get("previous"):
        return (
            "<div class='mw-compare'><h3>Since the previous run</h3>"
            "<p>first run of this report on this data: nothing to compare with</p></div>"
        )

    def link(run_id: Any, href: Any) -> str:
        text = html.escape(str(run_id))
        return f"<a href='{html.escape(str(href))}'>{text}</a>" if href else text

    prev = link(comparison["previous"], comparison.get("previous_html"))
    if comparison.get("comparable"):
        head = (
            f"<p><b>comparable</b> with the previous run {prev}: "
            "same parameters, memwork version, embedder and inputs</p>"
        )
    else:
        why = "".join(f"<li>{html.escape(str(w))}</li>" for w in comparison.get("why_not") or [])
        head = (
            f"<p><b>not comparable</b> with the previous run {prev}; no delta against it:</p><ul>{why}</ul>"
        )
        if comparison.get("previous_comparable"):
            other = link(comparison["previous_comparable"], comparison.get("previous_comparable_html"))
            head += f"<p>delta below against the previous comparable run {other}</p>"
        else:
            head += "<p>no earlier comparable run: no delta</p>"
    rows = comparison.get("delta") or []
    body = "".join(
        f"<tr><td>{html.escape(str(r['number']))}</td><td>{_value(r['previous'])}</td>"
        f"<td>{_value(r['now'])}</td><td>{_signed(r['delta'])}</td></tr>"
        for r in rows
    )
    table = (
        "<table class='mw-delta'><thead><tr><th>number</th><th>previous</th><th>now</th>"
        "<th>delta</th></tr></thead>"
        f"<tbody>{body}</tbody></table>"
        if rows
        else ""
    )
    return f"<div class='mw-compare'><h3>Since the previous run</h3>{head}{table}</div>"


def provenance_block(meta: dict[str, Any]) -> str:
    """The header an approver reads first: verdict and what it stands on (the gate strip), the reasons,
    the comparison with the previous run, then the run and its parameters (every one, default or set)."""
    from memwork.reports.gates import gates_of

    verdict = str(meta.get("verdict") or "UNKNOWN")
    colour = _COLOURS.get(verdict, "#cf222e")
    summary = meta.get("summary") or {"gates": meta.get("gates")}
    gates = gates_of(summary) if isinstance(summary, dict) else []
    rows = [
        ("report", meta.get("name")),
        ("run", meta.get("run_id")),
        ("started (UTC)", meta.get("started_at")),
        ("finished (UTC)", meta.get("finished_at")),
        ("duration", f"{meta.get('duration_s', 0):.2f} s"),
        ("memwork", meta.get("memwork_version") or (meta.get("versions") or {}).get("memwork")),
        ("git commit (memwork)", meta.get("git_commit")),
    ]
    if meta.get("runner"):
        rows.append(("run by", meta["runner"]))
    if meta.get("working_folder_commit"):
        rows.append(("working folder commit", meta["working_folder_commit"]))
    if meta.get("error"):
        rows.append(("error", meta["error"]))
    reasons = [str(r) for r in meta.get("reasons") or []]
    reason_block = (
        "<div class='mw-reasons'><h3>Reasons for the verdict</h3><ul>"
        + "".join(f"<li>{html.escape(r)}</li>" for r in reasons)
        + "</ul></div>"
        if reasons
        else ""
    )
    given = meta.get("parameters") or {}
    declared = meta.get("declared") or {}
    params = [(k, f"{v}  (set)") for k, v in sorted(given.items())]
    params += [(k, f"{v!r}  (default)") for k, v in sorted(declared.items()) if k not in given]
    return f"""
<section class="mw-provenance">
<style>
.mw-provenance, .mw-footer {{font-family: system-ui, sans-serif; border: 1px solid #d0d7de;
  border-radius: 6px; padding: 12px 16px; margin: 12px 24px; background: #f6f8fa;}}
.mw-provenance h1 {{font-size: 20px; margin: 0 0 8px 0;}}
.mw-verdict {{display: inline-block; padding: 2px 10px; border-radius: 4px; color: #fff;
  background: {colour}; font-weight: 600; white-space: nowrap;}}
.mw-sentence {{font-size: 16px; font-weight: 600; margin: 4px 0 8px 0;}}
.mw-cols {{display: flex; flex-wrap: wrap; gap: 24px;}}
.mw-prov th {{text-align: left; padding-right: 12px; font-weight: 600; vertical-align: top;}}
.mw-prov td {{font-family: ui-monospace, monospace; word-break: break-all;}}
.mw-gates, .mw-delta {{border-collapse: collapse; background: #fff; margin: 4px 0 8px 0;}}
.mw-gates td, .mw-gates th, .mw-delta td, .mw-delta th {{border-bottom: 1px solid #d0d7de; padding: 3px 10px;
  text-align: left; vertical-align: top;}}
.mw-state {{color: #fff; padding: 0 6px; border-radius: 3px; font-weight: 600; font-size: 12px;}}
.mw-off td {{color: #6e7781;}}
.mw-reasons {{border-left: 4px solid {colour}; padding: 0 12px; margin: 8px 0; background: #fff;}}
.mw-reasons li {{font-family: ui-monospace, monospace;}}
/* report tables: text reads left to right (the lab template right-aligns every cell) */
.jp-RenderedHTMLCommon td, .jp-RenderedHTMLCommon th {{text-align: left; vertical-align: top;}}
</style>
<h1>memwork report: {html.escape(str(meta.get("name")))}
 <span class="mw-verdict">{html.escape(verdict)}</span></h1>
<p class="mw-sentence">{html.escape(verdict_sentence(verdict, gates))}</p>
{reason_block}
<h3>Gates</h3>
{gate_strip(gates)}
{comparison_block(meta.get("comparison"))}
<div class="mw-cols">
<div><h3>Run</h3>{_table(rows)}</div>
<div><h3>Parameters</h3>{_table(params) if params else "<p>none</p>"}</div>
</div>
</section>
"""


def footer_block(meta: dict[str, Any]) -> str:
    """Below the findings: package versions and the slowest cells (provenance, not the verdict)."""
    versions = sorted((meta.get("versions") or {}).items())
    slow = meta.get("cell_timings") or []
    timings = [(f"cell {c['index']}", f"{c['duration_s']:.2f} s") for c in slow[:5]]
    return f"""
<section class="mw-footer">
<div class="mw-cols">
<div><h3>Versions</h3>{_table(versions)}</div>
<div><h3>Slowest cells</h3>{_table(timings) if timings else "<p>-</p>"}</div>
</div>
</section>
"""


_EXPORTERS: dict[bool, Any] = {}
_EXPORTER_LOCK = threading.RLock()


def html_exporter(show_code: bool = False) -> Any:
    """nbconvert's lab exporter, configured once per process and code setting: importing nbconvert
    and compiling its template on first use cost ~0.8 s, which a report paid every time."""
    with _EXPORTER_LOCK:
        exporter = _EXPORTERS.get(show_code)
        if exporter is None:
            from nbconvert import HTMLExporter

            exporter = HTMLExporter(template_name="lab")
            exporter.exclude_input = not show_code
            exporter.exclude_input_prompt = True
            exporter.exclude_output_prompt = True
            exporter.embed_images = True
            # validate once after the preprocessors, not after each of the twelve (papermill wrote it valid)
            exporter.optimistic_validation = True
            exporter.log.setLevel(logging.ERROR)  # not "alternative text is missing" once per figure
            _EXPORTERS[show_code] = exporter
        return exporter


_WARM_UPS: dict[bool, threading.Thread] = {}
_WARM_UPS_LOCK = threading.Lock()  # not the exporter's: a running warm-up holds that one


def warm_up(show_code: bool = False) -> threading.Thread:
    """Import nbconvert and compile the template in the background while the kernel runs, so the
    render after it does not wait for them (a failure here only means the render does the work).
    Once per process and code setting: a second report in the same process finds it warm, and a
    conversion each time (~0.1 s of CPU) would only compete with that report's kernel (issue 20)."""

    def work() -> None:
        with _EXPORTER_LOCK:
            try:
                cell = nbformat.v4.new_code_cell("x = 1")
                html_exporter(show_code).from_notebook_node(nbformat.v4.new_notebook(cells=[cell]))
            except Exception:
                pass

    with _WARM_UPS_LOCK:
        thread = _WARM_UPS.get(show_code)
        if thread is None:
            thread = threading.Thread(target=work, name="memwork-html-warm-up", daemon=True)
            thread.start()
            _WARM_UPS[show_code] = thread
        return thread


def render_html(nb: nbformat.NotebookNode, meta: dict[str, Any], *, show_code: bool = False) -> str:
    """The executed notebook as one offline HTML page with the provenance header on top."""
    with _EXPORTER_LOCK:  # one conversion at a time per exporter (and after a warm-up's)
        body, _ = html_exporter(show_code).from_notebook_node(nb)
    body = strip_external(body)
    title = html.escape(f"memwork report: {meta.get('name')} ({meta.get('run_id')})")
    body = re.sub(r"<title>.*?</title>", f"<title>{title}</title>", body, count=1, flags=re.DOTALL)
    header = provenance_block(meta)
    footer = footer_block(meta)
    end = body.rfind("</body>")
    if end >= 0:
        body = body[:end] + footer + body[end:]
    else:
        body += footer
    match = re.search(r"<body[^>]*>", body)
    if match:
        return body[: match.end()] + header + body[match.end() :]
    return header + body
