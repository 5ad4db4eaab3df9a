"""``memwork demo`` end to end on a small dataset: all four reports, index, and a safe re-run."""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
from click.testing import CliRunner

from memwork.cli import main
from memwork.reports import verify_manifest
from memwork.samples import demo


def test_demo_runs_every_report_and_rerunning_is_safe(tmp_path, monkeypatch, pg_server, capfd):
    monkeypatch.setenv("MEMWORK_REPORTS_DIR", str(tmp_path / "reports"))
    home_before = os.environ.get("MEMWORK_HOME")
    with _warnings_a_user_would_see() as shown:
        first = demo.run_demo(tmp_path / "ws", users=20, entries=200)
    # the demo prints no warnings: none of Python's (as `memwork demo` would show them), none on stderr
    # (the report kernels are processes of their own), none in the summary it prints
    assert not shown, [f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})" for w in shown]
    assert "warning" not in capfd.readouterr().err.lower()
    assert "warning" not in first.describe().lower()
    assert os.environ.get("MEMWORK_HOME") == home_before  # the workspace was scoped to the demo
    verdicts = {r["name"]: r["verdict"] for r in first.runs}
    shadow = verdicts.pop("canary_signoff (shadow reads)")
    real = verdicts.pop("canary_signoff (real text)")
    assert verdicts == {
        "health_report": "PASS",
        "duplicate_review": "INFO",
        "backfill_verification": "PASS",
        "canary_signoff": "GO",
    }, [r["reasons"] for r in first.runs]
    _assert_shadow_canary_judged(first.runs[-2], shadow)
    _assert_shadow_canary_judged(first.runs[-1], real)
    # the acceptance: the correct migration reaches GO, on the generated data and on human-written text
    assert shadow == "GO", first.runs[-2]["reasons"]
    assert real == "GO", first.runs[-1]["reasons"]
    assert first.data["real_text"]["certificate"] == "PASS" and first.data["real_text"]["users"] >= 20
    _assert_readme_examples_find_the_demo_output(tmp_path / "ws")
    assert first.exit_code == 0 and first.data["users"] == 20 and first.data["sessions"] == 40
    assert first.data["backfilled"] == first.data["active_items"]
    assert (first.data["embedding_model"], first.data["dimensions"]) == ("all-MiniLM-L6-v2", 384)
    _assert_embedded_by_minilm(first.data["store"])
    for run in first.runs:
        assert verify_manifest(run["run_dir"]) == []
    described = first.describe()
    assert "{" not in described and "20 users, 40 sessions" in described  # a sentence, not a dict repr
    assert "docstrings of" in described and "canary_signoff (real text)" in described
    small = ["--users", "20", "--entries", "200"]
    result = CliRunner().invoke(main, ["demo", "--workspace", str(tmp_path / "ws"), *small, "--json"])
    assert result.exit_code == 0, result.output
    second = json.loads(result.stdout)
    assert "warning" not in result.stderr.lower(), result.stderr
    assert [r["verdict"] for r in second["runs"]] == [r["verdict"] for r in first.runs]
    assert second["data"]["active_items"] == first.data["active_items"]
    index = (tmp_path / "reports" / "index.html").read_text()
    # two demo runs, each: in-process and shadow-read canary (generated and real text), in three groups;
    # the second runs link the first
    assert index.count("canary_signoff</a></td><td><span class='v'") == 6
    assert "(in-process canary)" in index and "(shadow reads judged)" in index
    assert second["runs"][0]["since"].startswith("since ") and "(comparable)" in second["runs"][0]["since"]


@contextmanager
def _warnings_a_user_would_see() -> Iterator[list[warnings.WarningMessage]]:
    """Record the warnings Python's default filters would print for a command (pytest's own filters
    show more: deprecations inside libraries, which a user of `memwork demo` never sees)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()
        warnings.simplefilter("default")
        for hidden in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
            warnings.simplefilter("ignore", hidden)
        yield caught


def _assert_readme_examples_find_the_demo_output(workspace):
    """Every example of README and docs/ (tests/readme_examples.py) that reads the workspace
    (``.memwork/...``) finds what the demo wrote, and runs: e.g. the ``canary judge --log`` example once
    named a log the demo never writes."""
    from readme_examples import WORKSPACE_PREFIX, demo_paths, readme_commands

    examples = [e for e in readme_commands() if e.is_memwork and demo_paths(e)]
    assert examples
    for example in examples:
        argv = [
            str(workspace / w[len(WORKSPACE_PREFIX) :]) if w in demo_paths(example) else w
            for w in example.argv
        ]
        for word in demo_paths(example):
            assert (workspace / word[len(WORKSPACE_PREFIX) :]).exists(), f"{example.where}: {word}"
        done = CliRunner().invoke(main, argv[1:])
        # a judge's verdict is 0, 1 or 3; 2 (bad input, e.g. no such log) is the example's fault
        assert done.exit_code in (0, 1, 3), f"{example.where}: {example.text}\n{done.output}"


def _assert_shadow_canary_judged(run, verdict):
    """The demo ends with shadow reads of its own service judged: a verdict with its reasons, the
    per-metric table and both backends' latency distributions in the HTML sign-off."""
    from pathlib import Path

    assert verdict in ("GO", "NO-GO", "INCONCLUSIVE") and run["finding"] is True
    summary = json.loads(Path(run["summary_file"]).read_text())
    assert summary["mode"] == "judge" and summary["records"] >= 100
    assert summary["backends"] == {"primary": "legacy-conversation-memory", "shadow": "pgvector"}
    assert verdict == "GO" or summary["reasons"]
    # the demo records an A/A stage first (legacy shadowed by itself): the noise floor is measured
    noise = summary["noise_floor"]
    assert noise["measured"] is True and noise["records"] >= 100, noise
    assert noise["source"].endswith("aa.jsonl"), noise
    assert summary["signoff"]["noise_floor"]["measured"] is True
    shown = Path(run["html"]).read_text().replace("<wbr/>", "")
    assert "A/A over " in shown  # the sign-off block says it was measured
    # cross-user probes through the served app: their bound is on the strip and in the sign-off
    probes = summary["signoff"]["isolation"]
    assert probes["given"] and probes["observed_leaks"] == 0 and probes["distinct_pairs"] == 200, probes
    assert probes["upper_bound"] < probes["required_bound"] == 0.01 and probes["verdict"] == "GO", probes
    assert {g["name"]: g["state"] for g in summary["gates"]}["isolation"] == "pass"
    metrics = {m["metric"]: m["classification"] for m in summary["metrics"]}
    assert metrics["crossUser"] == "PASS" and {"latencyMs", "overlapAtK", "rbo"} <= set(metrics)
    html = Path(run["html"]).read_text()
    assert all(name in html for name in ("latencyMs", "overlapAtK", "top1Agree"))
    assert html.count("data:image/png") >= 1  # the latency distributions figure


def _assert_embedded_by_minilm(store_spec):
    """The demo's entry store carries the real model's vectors (the duplicate review reads them)."""
    from memwork.embed import load_embedder
    from memwork.stores import open_store

    store = open_store(store_spec)
    try:
        embedded = [e for e in store.iter_entries() if e.embedding is not None][:5]
    finally:
        store.close()
    assert embedded
    again = load_embedder("minilm").embed([e.content for e in embedded])
    assert np.allclose(np.vstack([e.embedding for e in embedded]), again, atol=1e-5)
