"""Reports that say why they passed, and a record across runs: the gate strip, the defaults that
decide, the CSVs beside a cut table, comparability and the grouped index -- without a kernel."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from memwork.defrag.report import DEFAULT_MIN_SCORE, HealthReport
from memwork.errors import UsageError, VerdictError, VerdictInconclusive
from memwork.reports import gate_on_verdict, notebooks_dir, read_parameters
from memwork.reports.charts import bar_chart, nice_ticks
from memwork.reports.display import Table, bar_figure, figure_alt, histograms_figure
from memwork.reports.gates import gates_of, judged, needs_input, parse_waivers
from memwork.reports.history import compare, differences, fingerprint, group_of, key_numbers
from memwork.reports.html import footer_block, provenance_block, verdict_sentence
from memwork.reports.index import build_index, comparable_chain, scan_runs
from memwork.reports.standalone import cells_run, refuse_unknown


def _health(score: int, min_score: int, set_parameters: tuple[str, ...] = ()) -> HealthReport:
    analysis = {"health": {"score": score, "band": "good", "entries": 10, "coverage": {}}}
    report = HealthReport(
        "sqlite:///x.db", None, analysis, [], [], [], min_score, set_parameters=set_parameters
    )
    if score < min_score:
        report.reasons.append(f"health: score {score} below {min_score}")
    return report


# ---- defaults that decide -------------------------------------------------------------------------
def test_the_health_gate_decides_by_default_and_says_whether_its_threshold_was_set():
    assert DEFAULT_MIN_SCORE == 60
    assert read_parameters(notebooks_dir() / "health_report.ipynb")["min_score"].default == DEFAULT_MIN_SCORE
    low = _health(45, DEFAULT_MIN_SCORE)
    assert low.verdict == "FAIL"
    [gate] = low.summary()["gates"]
    assert (gate["state"], gate["observed"], gate["threshold"], gate["origin"]) == ("fail", 45, 60, "default")
    [gate] = _health(83, 70, ("min_score",)).summary()["gates"]
    assert (gate["state"], gate["origin"]) == ("pass", "set")
    # 0 switches the gate off, and the strip says so instead of a vacuous pass
    off = _health(10, 0, ("min_score",))
    assert off.verdict == "PASS" and off.summary()["gates"][0]["state"] == "off"
    assert (
        verdict_sentence("PASS", off.summary()["gates"]) == "PASS: every gate is off -- nothing was checked"
    )


def test_a_missing_input_fails_unless_waived_with_a_reason():
    assert needs_input("health_summary", "").state == "fail"
    assert needs_input("health_summary", "reports/x/summary.json").state == "pass"
    waived = needs_input("health_summary", "", waived=parse_waivers("health_summary: new store, no history"))
    assert (waived.state, waived.why, waived.origin) == ("off", "waived: new store, no history", "set")
    with pytest.raises(UsageError, match=r"waive='health_summary': needs a reason"):
        parse_waivers("health_summary")
    assert parse_waivers({"a": "why"}) == {"a": "why"} and parse_waivers("") == {}


# ---- the gate strip --------------------------------------------------------------------------------
def test_the_strip_shows_every_gate_with_value_threshold_origin_and_off_as_off():
    gates = [
        judged("health score", 83, 60).to_dict(),
        judged("recall@10", 0.99, 0.9, origin="set").to_dict(),
        judged("p95 ratio", 4.7, None, "<=").to_dict(),
    ]
    meta = {
        "name": "health_report",
        "verdict": "PASS",
        "summary": {"gates": gates},
        "declared": {"age_days": 90},
    }
    page = provenance_block(meta)
    assert "PASS: 2 of 2 gates passed (1 off)" in page
    rows = re.findall(r"<tr class='mw-gate mw-(\w+)'>(.*?)</tr>", page)
    assert [state for state, _ in rows] == ["pass", "pass", "off"]
    cells = [re.findall(r"<td>(.*?)</td>", row) for _, row in rows]
    assert cells[0][2:5] == ["83", "&gt;= 60", "default"]
    assert cells[1][2:5] == ["0.99", "&gt;= 0.9", "set"]
    assert cells[2][3:5] == ["off", "–"] and "threshold not set" in cells[2][5]
    # every parameter is listed, the defaults marked as such
    assert "90  (default)" in page


def test_a_report_without_gates_says_it_decides_nothing_and_versions_sit_below():
    assert (
        verdict_sentence("INFO", []) == "INFO: this report records no gates (it informs, it does not decide)"
    )
    page = provenance_block({"name": "d", "verdict": "INFO", "versions": {"numpy": "2"}})
    assert "Versions" not in page and "Slowest cells" not in page
    assert "numpy" in footer_block({"versions": {"numpy": "2"}})


def test_the_canary_and_judge_shapes_become_strip_gates():
    in_process = {"gates": [{"gate": "health", "status": "SKIP", "detail": "no summary"},
                            {"gate": "p95", "status": "PASS", "detail": "12 ms"}]}  # fmt: skip
    assert [(g["name"], g["state"]) for g in gates_of(in_process)] == [("health", "nodata"), ("p95", "pass")]
    judged_log = {"metrics": [
        {"metric": "rbo", "classification": "FAIL", "estimate": 0.29, "threshold": 0.8, "required": False},
        {"metric": "shadowErrors", "classification": "PASS", "estimate": 0.0, "threshold": 0.01},
    ]}  # fmt: skip
    states = [(g["name"], g["state"], g["comparison"]) for g in gates_of(judged_log)]
    assert states == [("rbo", "off", "<="), ("shadowErrors", "pass", "<=")]
    latency = {"metric": "latencyMs", "kind": "two-sample", "direction": "increase is bad", "relative": 0.9,
               "estimate": 42.9, "threshold": 0.25, "classification": "FAIL",
               "detail": "increase of 90%"}  # fmt: skip
    recall = {"metric": "overlapAtK", "kind": "agreement", "direction": "decrease is bad", "estimate": 0.95,
              "threshold": 0.75, "classification": "PASS"}  # fmt: skip
    [lat, over] = gates_of({"metrics": [latency, recall]})
    assert (lat["observed"], lat["comparison"], lat["unit"], lat["why"]) == (
        0.9,
        "<=",
        "relative change",
        "increase of 90%",
    )
    assert (over["observed"], over["comparison"], over["state"]) == (0.95, ">=", "pass")
    # a judgement that records its own strip: each gate once (its metrics are the metric table)
    own = {"gates": [dict(lat, name="latencyMs")], "metrics": [latency, recall]}
    assert [g["name"] for g in gates_of(own)] == ["latencyMs"]


def test_a_judged_latency_gate_is_shown_as_the_relative_change_it_is_judged_on():
    from memwork.rollout.gate_records import gate_of
    from memwork.rollout.judge import MetricResult

    fields = {f: None for f in MetricResult.__dataclass_fields__}
    fields.update(metric="latencyP95", kind="tail", direction="increase is bad", classification="PASS",
                  estimate=4.74, threshold=0.25, unit="ms", detail="p95 3.0 -> 17.3 ms",
                  required=True, pair="", role="decides")  # fmt: skip
    gate = gate_of(MetricResult(**fields), {})
    assert (gate.observed, gate.unit, gate.threshold) == (4.74, "relative change", 0.25)


# ---- verdicts a scheduler can map -------------------------------------------------------------------
def test_inconclusive_raises_its_own_exception_with_exit_status_3(monkeypatch):
    monkeypatch.setenv("MEMWORK_REPORT_DIR", "off")
    with pytest.raises(VerdictInconclusive) as caught:
        gate_on_verdict({"verdict": "INCONCLUSIVE", "reasons": ["rbo: 12 samples"]})
    assert caught.value.exit_code == 3 and isinstance(caught.value, VerdictError)
    with pytest.raises(VerdictError) as failed:
        gate_on_verdict({"verdict": "NO-GO", "reasons": []})
    assert type(failed.value) is VerdictError and failed.value.exit_code == 1


def test_an_injected_name_the_parameters_cell_does_not_declare_is_refused():
    params = 'store: str = ""  # a store\nmin_score: int = 60  # FAIL below\n'
    history = ["", params, '# Parameters\nminscore = 90\nstore = "x"\n', "begin(globals())"]
    assert cells_run({"In": history}) == (["store", "min_score"], ["minscore", "store"])
    with pytest.raises(UsageError, match=r"parameter='minscore': not a parameter of this report"):
        refuse_unknown({"In": history})
    refuse_unknown({"In": ["", params, '# Parameters\nmin_score = 90\nPAPERMILL_OUTPUT_PATH = "o.ipynb"\n']})
    refuse_unknown({"In": ["", params, "x = 1"]})  # opened by hand: nothing injected, nothing to refuse


# ---- readable figures and whole tables ---------------------------------------------------------------
def test_figures_carry_their_numbers_in_alt_text_and_titled_axes():
    fig = bar_figure(
        {"metadata": 40.0, "tags": 72.5}, "Coverage (% of entries)", xlabel="entries (%)", unit=" %"
    )
    assert figure_alt(fig) == "Coverage (% of entries): metadata 40 %, tags 72.5 %"
    assert fig.axes[0].get_xlabel() == "entries (%)"
    assert sorted(t.get_text() for t in fig.axes[0].texts) == ["40 %", "72.5 %"]  # value labels
    hist = histograms_figure({"cosine": [0.1] * 500 + [0.95] * 3}, 0.9, title="Pair similarity")
    ax = hist.axes[0]
    assert ax.get_yscale() == "log" and ax.get_xlabel() == "similarity" and "pairs" in ax.get_ylabel()
    assert "cosine: 503 pairs, 3 at or above 0.9" in figure_alt(hist)
    hist.canvas.draw()  # the log axis reads 1, 2, 5, 10 ...: plain numbers, not a pile of 2×10⁰ labels
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert labels and all(label.replace(",", "").isdigit() for label in labels), labels


def test_the_svg_bar_chart_shows_what_the_matplotlib_one_does():
    values = {"metadata": 40.0, "tags": 72.5, "embedding": 100.0}
    args = ("Coverage (% of entries)",)
    kwargs = {"xlabel": "entries covered (%)", "limit": 100, "unit": " %"}
    chart, fig = bar_chart(values, *args, **kwargs), bar_figure(values, *args, **kwargs)
    spelled = "Coverage (% of entries): metadata 40 %, tags 72.5 %, embedding 100 %"
    assert chart.alt == figure_alt(fig) == spelled
    texts = re.findall(r"<text[^>]*>([^<]*)</text>", chart.svg)
    # title, axis label, each bar's label and value label, and the ticks 0 ... 100 of the limit
    for text in ("Coverage (% of entries)", "entries covered (%)", "metadata", "40 %", "72.5 %", "100 %"):
        assert text in texts, text
    assert [t for t in texts if t.isdigit()] == ["0", "20", "40", "60", "80", "100"]
    bars = [float(w) for w in re.findall(r'<rect x="[\d.]+" y="[\d.]+" width="([\d.]+)"', chart.svg)]
    assert bars[0] == pytest.approx(bars[2] * 0.4, abs=0.2)
    assert bars[1] == pytest.approx(bars[2] * 0.725, abs=0.2)
    img = chart.img_html()
    assert img.startswith('<img src="data:image/svg+xml;base64,') and f'alt="{spelled}"' in img
    counts = bar_chart({"fact": 12_345, "<b>": 3}, "Entries by type", ylabel="type")
    assert "12,345" in counts.svg and "&lt;b&gt;" in counts.svg and "<b>" not in counts.svg  # escaped
    assert all(t.is_integer() for t in nice_ticks(3.45, integer=True))  # counts: whole ticks only
    assert bar_chart({}, "Nothing").alt == "Nothing: no values"


def test_tables_from_rows_match_tables_from_frames():
    rows = [
        {"path": f"p{i}", "tags": ["a"], "score": i / 3, "n": 20_000 + i, "ok": i % 2 == 0} for i in range(4)
    ]
    rows[1]["extra"] = "only here"  # a key some rows lack: a blank cell, as pandas shows NaN
    from_rows, from_frame = Table(rows, limit=3), Table(pd.DataFrame(rows), limit=3)
    strip = re.compile(r"text-align:(left|right)")  # a missing number: pandas' NaN aligns right
    assert strip.sub("", from_rows._repr_html_()) == strip.sub("", from_frame._repr_html_())
    assert from_rows.columns == ["path", "tags", "score", "n", "ok", "extra"]
    assert repr(from_rows).splitlines()[1].split() == ["p0", "a", "0", "20,000", "yes"]
    assert from_rows.frame.shape == (3, 6)


def test_a_cut_table_is_written_whole_as_csv_and_linked(tmp_path, monkeypatch):
    rows = [{"path": f"p{i}", "tags": ["a", "b"], "score": i / 10} for i in range(30)]
    monkeypatch.setenv("MEMWORK_REPORT_DIR", str(tmp_path))
    cut = Table(rows, limit=25, csv="low_quality")
    page = cut._repr_html_()
    assert "first 25 of 30 rows</em> -- all 30 rows: <a href='low_quality.csv'>low_quality.csv</a>" in page
    whole = pd.read_csv(tmp_path / "low_quality.csv")
    assert len(whole) == 30 and whole["tags"][0] == "a, b"
    assert Table(rows, limit=40, csv="all_shown").csv_path is None  # not cut: no CSV
    monkeypatch.setenv("MEMWORK_REPORT_DIR", "off")
    assert Table(rows, limit=5, csv="x").csv_path is None  # by hand: nothing written


# ---- a record across runs --------------------------------------------------------------------------
def _fake_run(
    root: Path, run_id: str, report: str, params: dict, numbers: dict, version: str = "0.1.0"
) -> dict:
    summary = {"report": report, "verdict": "PASS", "health": {"score": numbers.get("health score")}}
    fp = fingerprint(report, params, summary, version)
    comparison = compare(report, group_of(params), run_id, fp, key_numbers(report, summary), root)
    folder = root / run_id
    folder.mkdir(parents=True)
    summary.update(fingerprint=fp, group=group_of(params), key_numbers=key_numbers(report, summary))
    summary["comparison"] = comparison
    (folder / "summary.json").write_text(json.dumps(summary))
    (folder / f"{report}.html").write_text("<html></html>")
    return comparison


def test_a_run_says_first_whether_the_previous_run_is_comparable_and_gives_the_delta(tmp_path):
    store = {"store": "sqlite:///a.db", "min_score": 60}
    first = _fake_run(
        tmp_path, "20260101T000000000Z-health_report", "health_report", store, {"health score": 80}
    )
    assert first["previous"] is None and first["note"] == "first run"
    second = _fake_run(
        tmp_path, "20260102T000000000Z-health_report", "health_report", store, {"health score": 83}
    )
    assert second["comparable"] is True
    assert second["delta"] == [{"number": "health score", "previous": 80, "now": 83, "delta": 3}]
    assert second["previous_comparable_html"] == "../20260101T000000000Z-health_report/health_report.html"
    # another threshold: not comparable with the run before; the delta is against the earlier comparable one
    third = _fake_run(
        tmp_path,
        "20260103T000000000Z-health_report",
        "health_report",
        {**store, "min_score": 70},
        {"health score": 85},
    )
    assert third["comparable"] is False and third["why_not"] == ["parameter min_score: 60 → 70"]
    assert third["previous_comparable"] is None and third["delta"] == []
    fourth = _fake_run(
        tmp_path, "20260104T000000000Z-health_report", "health_report", store, {"health score": 90}
    )
    assert fourth["comparable"] is False
    assert fourth["previous_comparable"] == "20260102T000000000Z-health_report"
    assert fourth["delta"][0]["delta"] == 7
    # another store is another group: never compared
    other = _fake_run(
        tmp_path,
        "20260105T000000000Z-health_report",
        "health_report",
        {"store": "sqlite:///b.db"},
        {"health score": 1},
    )
    assert other["previous"] is None


def test_fingerprints_differ_by_version_embedder_and_inputs():
    a = fingerprint("r", {"k": 1, "fail_on_verdict": True}, {"input_fingerprint": {"rows": 600}}, "0.1.0")
    b = fingerprint("r", {"k": 1}, {"input_fingerprint": {"rows": 601}, "embedder": "minilm"}, "0.2.0")
    assert differences(a, a) == [] and differences(a, {**a, "parameters": {"k": 1}}) == []
    assert differences(b, a) == [
        "input rows: 600 → 601",
        'memwork version: "0.1.0" → "0.2.0"',
        'embedder: unset → "minilm"',
    ]


def test_the_index_groups_runs_draws_trends_over_comparable_runs_and_refuses_the_rest(tmp_path):
    store = {"store": "sqlite:///a.db"}
    for day, score in ((1, 70), (2, 75), (3, 81)):
        _fake_run(
            tmp_path,
            f"2026010{day}T000000000Z-health_report",
            "health_report",
            store,
            {"health score": score},
        )
    _fake_run(
        tmp_path, "20260104T000000000Z-health_report", "health_report", store, {"health score": 82}, "0.2.0"
    )
    _fake_run(tmp_path, "20260101T000000000Z-duplicate_review", "duplicate_review", store, {})
    page = build_index(tmp_path).read_text()
    assert page.count("<section class='group'>") == 2
    rows, _ = scan_runs(tmp_path)
    health = [r for r in rows if r["report"] == "health_report"]
    chain, stop = comparable_chain(health)
    assert [r["run_id"][:9] for r in chain] == ["20260104T"]
    assert "20260103T000000000Z-health_report is not comparable: memwork version" in stop
    assert "trend stops: 20260103T000000000Z-health_report is not comparable" in page
    # the three comparable runs draw a trend line whose label carries the numbers
    chain, _ = comparable_chain(health[1:])
    assert len(chain) == 3
    assert "<a href='20260102T000000000Z-health_report/health_report.html'>" in page


def test_a_chain_of_runs_finds_its_previous_summary_and_says_how_numbers_moved(tmp_path):
    from memwork.reports.history import latest_summary, since_text

    store = {"store": "sqlite:///a.db"}
    assert latest_summary(tmp_path, "health_report", store) == ""
    _fake_run(tmp_path, "20260101T000000000Z-health_report", "health_report", store, {"health score": 80})
    second = _fake_run(
        tmp_path, "20260102T000000000Z-health_report", "health_report", store, {"health score": 83}
    )
    found = latest_summary(tmp_path, "health_report", {**store, "previous_summary": "x"})
    assert found == str(tmp_path / "20260102T000000000Z-health_report" / "summary.json")
    assert since_text({"comparison": second}) == (
        "since 20260101T000000000Z-health_report (comparable): health score 80 → 83"
    )
    assert since_text({"comparison": {"previous": None}}) == "first run of this report on this data"


def test_an_input_report_is_compared_by_what_it_found_not_by_its_folder(tmp_path):
    for name, score in (("a", 83), ("b", 83), ("c", 70)):
        (tmp_path / name).mkdir()
        summary = {"verdict": "PASS", "key_numbers": {"health score": score}}
        (tmp_path / name / "summary.json").write_text(json.dumps(summary))

    def fp(folder: str, port: int) -> dict:
        params = {"health_summary": str(tmp_path / folder), "base_url": f"http://127.0.0.1:{port}"}
        return fingerprint("canary_signoff", params, {}, "0.1.0")

    assert differences(fp("b", 2), fp("a", 1)) == []  # a new run folder and port, the same finding
    [why] = differences(fp("c", 1), fp("a", 1))
    assert why.startswith("input health_summary:") and "83" in why and "70" in why


def _verification_run(root: Path, day: int, by_kind: dict, recall: dict, numbers_of_the_time=None) -> None:
    """A backfill_verification run folder as the runner leaves it: summary.json with rows by kind and
    recall per bucket (``numbers_of_the_time``: the key numbers an older memwork recorded)."""
    params = {"source": "qdrant", "source_url": "local:/data/q", "pgvector_url": "pg://embedded"}
    report = "backfill_verification"
    summary = {
        "report": report,
        "verdict": "FAIL" if by_kind else "PASS",
        "rows": {"source": 95, "bad": sum(by_kind.values()), "by_kind": by_kind},
        "vectors": {"bad": 0},
        "recall_per_bucket": recall,
        "input_fingerprint": {"source": "qdrant", "source_rows": 95},
    }
    fp = fingerprint(report, params, summary, "0.1.0")
    numbers = key_numbers(report, summary) if numbers_of_the_time is None else numbers_of_the_time
    folder = root / f"2026010{day}T000000000Z-{report}"
    folder.mkdir(parents=True)
    summary.update(fingerprint=fp, group=group_of(params), key_numbers=numbers, comparison={})
    (folder / "summary.json").write_text(json.dumps(summary))
    (folder / f"{report}.html").write_text("<html></html>")


def test_the_index_follows_a_verification_by_bad_row_kind_and_recall_per_bucket(tmp_path):
    found = key_numbers(
        "backfill_verification",
        {
            "rows": {"source": 95, "bad": 3, "by_kind": {"missing": 2, "user-changed": 1}},
            "vectors": {"bad": 0},
        },
    )
    # missing and changed always (0 when none, so the trend is drawn), any other kind the run found
    assert found == {
        "source rows": 95,
        "bad rows": 3,
        "missing rows": 2,
        "changed rows": 0,
        "bad vectors": 0,
        "user-changed rows": 1,
    }
    recall = {"1-10": 1.0, "1,001+": 0.9}
    # the first run recorded only the numbers followed then: the index reads the rest from summary.json
    _verification_run(tmp_path, 1, {"missing": 4, "changed": 1}, recall, {"source rows": 95, "bad rows": 5})
    _verification_run(tmp_path, 2, {"missing": 2}, {"1-10": 1.0, "1,001+": 0.95})
    _verification_run(tmp_path, 3, {}, {"1-10": 1.0, "1,001+": 0.97})
    rows, _ = scan_runs(tmp_path)
    assert rows[-1]["key_numbers"]["missing rows"] == 4 and rows[-1]["key_numbers"]["recall 1,001+"] == 0.9
    page = build_index(tmp_path).read_text()
    assert page.count("<section class='group'>") == 1 and "on source_url=local:/data/q" in page
    trend = page[page.index("<table class='trend'>") : page.index("</table>")]
    for label, latest, line in (
        ("missing rows", "0", "4 → 2 → 0"),
        ("changed rows", "0", "1 → 0 → 0"),
        ("recall 1-10", "1", "1 → 1 → 1"),
        ("recall 1,001+", "0.97", "0.9 → 0.95 → 0.97"),
    ):
        row = re.search(
            rf"<tr><td>{re.escape(label)}</td><td class='num'>([^<]*)</td><td>(.*?)</td></tr>", trend
        )
        assert row is not None, label
        assert row.group(1) == latest and f"aria-label='{line}'" in row.group(2), (label, row.group(2))
    assert "missing rows 2; changed rows 0" in page  # each run's own numbers in its row
