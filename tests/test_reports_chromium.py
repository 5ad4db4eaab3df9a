"""Every report page the suite produces, opened in headless Chromium as an approver would open it.

One small ``memwork demo`` (the run that already produces every report: health_report,
duplicate_review, backfill_verification, both canary_signoff runs and ``reports/index.html``) plus
the rollout page built from the artifacts the runbook names, taken from that run. Each page is loaded
from disk with every host name unresolvable (``--host-resolver-rules``), and a probe (a copy of the
page with a small script added at the top, which only observes) reports what loaded. Asserted:

- self-contained: no element tried to load anything outside the page (no http(s) resource, no failed
  load), and the images still decode with the network gone;
- the verdict and, on a report, the gate strip with at least one gate are in the rendered DOM;
- every ``<img>`` (and inline SVG marked ``role=img``) has alt text carrying numbers;
- the screenshot is not blank.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import ClassVar

import pytest

REQUIRE_SERVICES = os.environ.get("MEMWORK_REQUIRE_SERVICES") == "1"
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser")
REPORTS = ("health_report", "duplicate_review", "backfill_verification", "canary_signoff")
SHADOW = ("canary_signoff (shadow reads)", "canary_signoff (real text)")  #: the demo's judged shadow reads
PAGES = (*REPORTS, *SHADOW, "index", "rollout")
#: the figures each page draws (an <img> each), at least
FIGURES = {"health_report": 3, "duplicate_review": 1, "canary_signoff": 1, **dict.fromkeys(SHADOW, 1)}
VERDICTS = {"PASS", "FAIL", "GO", "NO-GO", "INCONCLUSIVE", "INFO", "WARN", "NOT JUDGED", "SKIP"}

#: added at the top of <head> of a copy of the page: records every failed element load as it happens,
#: and after the load event writes what an approver would see into <pre id="mw-probe"> as JSON
PROBE = """<script>
window.__mwFailed = [];
document.addEventListener("error", function (e) {
  var t = e.target;
  if (t && t !== window) window.__mwFailed.push(t.currentSrc || t.src || t.href || t.tagName);
}, true);
window.addEventListener("load", function () {
  var q = function (s) { return Array.prototype.slice.call(document.querySelectorAll(s)); };
  var out = {
    failed: window.__mwFailed,
    resources: performance.getEntriesByType("resource").map(function (r) { return r.name; }),
    images: q("img").map(function (i) {
      return {alt: i.getAttribute("alt") || "", ok: i.complete && i.naturalWidth > 0,
              src: i.src.slice(0, 22)};
    }),
    svgs: q("svg[role=img]").map(function (s) { return s.getAttribute("aria-label") || ""; }),
    verdicts: q(".mw-verdict, h1 .v").map(function (v) { return v.textContent.trim(); }),
    badges: q("span.v").map(function (v) { return v.textContent.trim(); }),
    gates: q("table.mw-gates tr.mw-gate").map(function (r) { return r.cells[0].textContent.trim(); }),
    nogates: !!document.querySelector(".mw-provenance .mw-nogates"),
    sentence: (document.querySelector(".mw-sentence") || {textContent: ""}).textContent.trim(),
    text: document.body.innerText.length
  };
  var pre = document.createElement("pre"); pre.id = "mw-probe"; pre.hidden = true;  // not in the screenshot
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def _chromium() -> str:
    """Chromium's path; skips (locally) or fails (MEMWORK_REQUIRE_SERVICES=1) without it."""
    for candidate in CHROMIUM_CANDIDATES:
        found = shutil.which(candidate)
        if found:
            return found
    if REQUIRE_SERVICES:
        pytest.fail("chromium not installed (MEMWORK_REQUIRE_SERVICES=1 turns this skip into a failure)")
    pytest.skip("chromium not installed (apt-get install -y chromium, as .ci/run does)")


@pytest.fixture(scope="module")
def pages(tmp_path_factory, pg_server) -> dict[str, Path]:
    """A small demo's report pages, its index and a rollout page built from its artifacts: name -> HTML."""
    _chromium()  # no browser: skip before paying for the demo
    from memwork.reports.index import build_index
    from memwork.reports.rollout_page import build_rollout_page
    from memwork.samples.demo import run_demo

    root = tmp_path_factory.mktemp("chromium")
    reports = root / "reports"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MEMWORK_REPORTS_DIR", str(reports))
        mp.setenv("MEMWORK_HOME", str(root / "home"))
        result = run_demo(root / "ws", reports=reports, users=20, entries=200)
        runs = {r["name"]: r for r in result.runs}
        _rollout_artifacts(root / "ws", reports, runs)
        rollout, _ = build_rollout_page(root / "ws", reports)
        index = build_index(reports)  # again: now it links the rollout page
    found = {name: Path(runs[name]["html"]) for name in (*REPORTS, *SHADOW)}
    return {**found, "index": Path(index), "rollout": rollout}


def _rollout_artifacts(folder: Path, reports: Path, runs: dict[str, dict]) -> None:
    """The files runbooks/pgvector_rollout.md leaves, from the demo's own runs: its verification, its
    shadow log as the 100 % stage, the shadow canary's judgement and sign-off."""
    verify, signoff = runs["backfill_verification"], runs["canary_signoff (shadow reads)"]
    summary = json.loads(Path(signoff["summary_file"]).read_text(encoding="utf-8"))
    log = folder / "demo" / "shadow" / "comparisons.jsonl"
    shutil.copy(log, folder / "shadow-100pct.jsonl")
    for name, run in (("verification.json", verify), ("signoff.json", signoff)):
        record = {"run_dir": run["run_dir"], "html": run["html"], "verdict": run["verdict"]}
        if name == "signoff.json":
            record["parameters"] = {"comparison_log": "shadow-100pct.jsonl"}
        (folder / name).write_text(json.dumps(record), encoding="utf-8")
    judge = {k: summary.get(k) for k in ("verdict", "reasons", "records")}
    (folder / "judge-100pct.json").write_text(json.dumps(judge), encoding="utf-8")


class _Resources(HTMLParser):
    """Every URL the page would fetch by itself: src of scripts, images, frames and media, <link>
    hrefs, and url(...) / @import in inline CSS (an <a href> is a link the reader follows, not a fetch)."""

    FETCHING: ClassVar[set[str]] = {
        "script",
        "img",
        "iframe",
        "source",
        "video",
        "audio",
        "embed",
        "object",
        "input",
    }

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag in self.FETCHING:
            self.urls += [v for k, v in values.items() if k in ("src", "data", "srcset") and v]
        if tag == "link":  # stylesheet, icon, preload, manifest: a <link> fetches what it names
            self.urls.append(values.get("href") or "")
        style = values.get("style") or ""
        self.urls += re.findall(r"url\(\s*['\"]?([^'\")]+)", style)

    def handle_data(self, data: str) -> None:
        self.urls += re.findall(r"url\(\s*['\"]?([^'\")]+)", data)
        self.urls += re.findall(r"@import\s+['\"]([^'\"]+)", data)


def _external(urls: list[str]) -> list[str]:
    return [u for u in urls if re.match(r"^\s*(https?:)?//", u)]


def render(page: Path, out: Path, chromium: str) -> tuple[dict, Path]:
    """Open a probed copy of ``page`` (beside it, so relative links resolve the same) with no network;
    returns the probe's findings and the screenshot."""
    html = page.read_text(encoding="utf-8")
    head = re.search(r"<head[^>]*>", html, re.IGNORECASE)
    probed = html[: head.end()] + PROBE + html[head.end() :] if head else PROBE + html
    copy = page.with_name(f".probe-{page.name}")
    copy.write_text(probed, encoding="utf-8")
    png = out / f"{page.stem}.png"
    try:
        done = subprocess.run(
            [
                chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--hide-scrollbars", "--host-resolver-rules=MAP * ~NOTFOUND",
                f"--user-data-dir={out / 'profile'}", "--window-size=1280,1600",
                "--virtual-time-budget=10000", f"--screenshot={png}", "--dump-dom", copy.as_uri(),
            ],
            capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
    finally:
        copy.unlink(missing_ok=True)
    found = re.search(r'<pre id="mw-probe"[^>]*>(.*?)</pre>', done.stdout, re.DOTALL)
    assert found, f"{page.name}: the page did not finish loading\n{done.stderr[-2000:]}"
    import html as html_module

    return json.loads(html_module.unescape(found.group(1))), png


def _has_number(text: str) -> bool:
    return re.search(r"\d", text) is not None


@pytest.mark.parametrize("name", PAGES)
def test_a_report_page_reads_offline_in_chromium(pages, name, tmp_path):
    chromium = _chromium()
    page = pages[name]
    parser = _Resources()
    parser.feed(page.read_text(encoding="utf-8"))
    assert _external(parser.urls) == [], f"{name} fetches from outside the page"
    probe, png = render(page, tmp_path, chromium)

    # self-contained: nothing failed or was fetched from the network, every image decoded without it
    assert probe["failed"] == [], probe["failed"]
    assert _external(probe["resources"]) == [], probe["resources"]
    assert all(img["ok"] for img in probe["images"]), [i for i in probe["images"] if not i["ok"]]
    # alt text an approver (or a screen reader) can use: non-empty and carrying the numbers
    for alt in [i["alt"] for i in probe["images"]] + probe["svgs"]:
        assert alt.strip() and _has_number(alt), f"{name}: alt text without numbers: {alt!r}"

    # the verdict, and on a report the gate strip with what passed
    if name == "index":  # every run with its verdict (a trend line needs two comparable runs: one here)
        assert len(probe["badges"]) >= 5 and set(probe["badges"]) <= VERDICTS, probe["badges"]
    else:
        assert probe["verdicts"] and set(probe["verdicts"]) <= VERDICTS, probe["verdicts"]
    if name == "rollout":
        assert len(probe["badges"]) >= 3, "the rollout page shows each stage's verdict"
    elif name != "index" and probe["verdicts"] == ["INFO"]:  # a finding to review, not a gate: said so
        assert probe["nogates"] and "does not decide" in probe["sentence"], probe["sentence"]
    elif name != "index":  # "GO: 9 of 9 gates passed"
        assert probe["gates"], f"{name}: no gate strip"
        assert len(set(probe["gates"])) == len(probe["gates"]), (
            f"{name}: a gate shown twice: {probe['gates']}"
        )
        assert _has_number(probe["sentence"]), probe["sentence"]
    if name in FIGURES:
        assert len(probe["images"]) >= FIGURES[name], f"{name}: a figure is missing"

    _assert_not_blank(png)


def _assert_not_blank(png: Path) -> None:
    from PIL import Image

    with Image.open(png) as shot:
        rgb = shot.convert("RGB")
        colours = rgb.getcolors(maxcolors=1 << 16)
        assert rgb.size[0] >= 1000
    assert colours is None or len(colours) > 1, "the screenshot is one colour: a blank page"
    if colours is not None:  # more than a few stray pixels off the background
        background = max(colours)[0]
        assert sum(n for n, _ in colours) - background > 0.01 * rgb.size[0] * rgb.size[1]


def test_without_chromium_it_skips_locally_and_fails_under_required_services(monkeypatch):
    module = sys.modules[__name__]
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    monkeypatch.setattr(module, "REQUIRE_SERVICES", False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install -y chromium"):
        _chromium()
    monkeypatch.setattr(module, "REQUIRE_SERVICES", True)
    with pytest.raises(pytest.fail.Exception, match="MEMWORK_REQUIRE_SERVICES=1"):
        _chromium()
