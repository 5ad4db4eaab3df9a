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


def provenance_block(meta: dict[str, Any]) -> str:
    """The header an approver reads first: verdict, parameters, timings, versions, commit."""
    verdict = str(meta.get("verdict") or "UNKNOWN")
    colours = {"PASS": "#1a7f37", "GO": "#1a7f37", "INFO": "#0969da", "INCONCLUSIVE": "#9a6700"}
    colour = colours.get(verdict, "#cf222e")
    rows = [
        ("report", meta.get("name")),
        ("run", meta.get("run_id")),
        ("started (UTC)", meta.get("started_at")),
        ("finished (UTC)", meta.get("finished_at")),
        ("duration", f"{meta.get('duration_s', 0):.2f} s"),
        ("memwork", meta.get("memwork_version") or (meta.get("versions") or {}).get("memwork")),
        ("git commit (memwork)", meta.get("git_commit")),
    ]
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

    def table(pairs: list[tuple[str, Any]]) -> str:
        cells = "".join(
            f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>" for k, v in pairs
        )
        return f"<table class='mw-prov'>{cells}</table>"

    params = sorted((meta.get("parameters") or {}).items())
    versions = sorted((meta.get("versions") or {}).items())
    slow = meta.get("cell_timings") or []
    timings = [(f"cell {c['index']}", f"{c['duration_s']:.2f} s") for c in slow[:5]]
    return f"""
<section class="mw-provenance">
<style>
.mw-provenance {{font-family: system-ui, sans-serif; border: 1px solid #d0d7de; border-radius: 6px;
  padding: 12px 16px; margin: 12px 24px; background: #f6f8fa;}}
.mw-provenance h1 {{font-size: 20px; margin: 0 0 8px 0;}}
.mw-verdict {{display: inline-block; padding: 2px 10px; border-radius: 4px; color: #fff;
  background: {colour}; font-weight: 600;}}
.mw-cols {{display: flex; flex-wrap: wrap; gap: 24px;}}
.mw-prov th {{text-align: left; padding-right: 12px; font-weight: 600; vertical-align: top;}}
.mw-prov td {{font-family: ui-monospace, monospace; word-break: break-all;}}
.mw-reasons {{border-left: 4px solid {colour}; padding: 0 12px; margin: 8px 0; background: #fff;}}
.mw-reasons li {{font-family: ui-monospace, monospace;}}
/* report tables: text reads left to right (the lab template right-aligns every cell) */
.jp-RenderedHTMLCommon td, .jp-RenderedHTMLCommon th {{text-align: left; vertical-align: top;}}
</style>
<h1>memwork report: {html.escape(str(meta.get("name")))}
 <span class="mw-verdict">{html.escape(verdict)}</span></h1>
{reason_block}
<div class="mw-cols">
<div><h3>Run</h3>{table(rows)}</div>
<div><h3>Parameters</h3>{table(params) if params else "<p>defaults</p>"}</div>
<div><h3>Versions</h3>{table(versions)}</div>
<div><h3>Slowest cells</h3>{table(timings) if timings else "<p>-</p>"}</div>
</div>
</section>
"""


def render_html(nb: nbformat.NotebookNode, meta: dict[str, Any], *, show_code: bool = False) -> str:
    """The executed notebook as one offline HTML page with the provenance header on top."""
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="lab")
    exporter.exclude_input = not show_code
    exporter.exclude_input_prompt = True
    exporter.exclude_output_prompt = True
    exporter.embed_images = True
    exporter.log.setLevel(logging.ERROR)  # not "alternative text is missing" once per figure
    body, _ = exporter.from_notebook_node(nb)
    body = strip_external(body)
    title = html.escape(f"memwork report: {meta.get('name')} ({meta.get('run_id')})")
    body = re.sub(r"<title>.*?</title>", f"<title>{title}</title>", body, count=1, flags=re.DOTALL)
    match = re.search(r"<body[^>]*>", body)
    header = provenance_block(meta)
    if match:
        return body[: match.end()] + header + body[match.end() :]
    return header + body
