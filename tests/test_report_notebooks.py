"""Each report notebook through the runner on small data: summary.json, verdict and exit code."""

from __future__ import annotations

import csv
import hashlib
import html
import inspect
import json
import re

import nbformat
import papermill
import pytest
from test_certify_qdrant import _env as qdrant_env
from test_certify_qdrant import _import as qdrant_import
from test_certify_qdrant import _pg as qdrant_pg
from test_certify_qdrant import storage  # noqa: F401  (the Qdrant local collection, a fixture)

from memwork.certify import parameters as verify
from memwork.db import pg_connect
from memwork.defrag.review import read_review_csv
from memwork.errors import ReportInputRefused, UsageError
from memwork.reports import list_reports, notebooks_dir, read_parameters, run_report
from memwork.rollout import gates
from memwork.rollout.run import run_signoff
from memwork.rollout.signoff import SignoffParameters
from memwork.samples.migration import build_migration
from memwork.samples.store import sample_store
from memwork.workspace import sha256_file

REPORTS = ["backfill_verification", "canary_signoff", "duplicate_review", "health_report"]


def test_notebooks_declare_typed_documented_parameters_and_have_no_outputs():
    assert set(REPORTS) <= set(list_reports())
    for name in REPORTS:
        path = notebooks_dir() / f"{name}.ipynb"
        declared = read_parameters(path)
        assert list(papermill.inspect_notebook(str(path))) == list(declared)  # papermill reads the same
        assert all(p.help for p in declared.values()), name
        nb = nbformat.read(str(path), as_version=4)
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), name
        validation = nb.cells[
            nb.cells.index(next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))) + 1
        ]
        # the cell after the parameters checks them: the display helpers' checks, or the one library
        # call whose own checks raise UsageError
        assert "check_" in validation.source or "call_with_parameters(" in validation.source, name


@pytest.mark.parametrize(
    ("name", "function"),
    [("canary_signoff", SignoffParameters), ("backfill_verification", verify.VerifyParameters)],
)
def test_one_call_notebooks_pass_their_parameters_to_the_library_unchanged(name, function):
    """parameters -> one library call -> display: the library's signature is the only other list of
    the parameters, with the same names and defaults, and the defaulting and checks are the library's."""
    declared = read_parameters(notebooks_dir() / f"{name}.ipynb")
    signature = inspect.signature(function).parameters
    assert set(declared) - {"fail_on_verdict"} == set(signature)
    assert all(declared[n].default == p.default for n, p in signature.items()), name
    code = "\n".join(
        c.source for c in nbformat.read(str(notebooks_dir() / f"{name}.ipynb"), as_version=4).cells
        if c.cell_type == "code" and "parameters" not in c.metadata.get("tags", [])
    )  # fmt: skip
    # (a notebook may hand the library the samples' builder as its standalone default; it never calls it)
    for logic in ("build_migration(", "real_value(", "check_range", "Options(", "raise "):
        assert logic not in code, (name, logic)
    assert code.count("call_with_parameters(") == 1  # the one call


def test_one_call_notebook_parameters_are_checked_by_the_library(tmp_path):
    with pytest.raises(UsageError, match="give both legacy_url and pgvector_url"):
        run_signoff(SignoffParameters(legacy_url="sqlite:///x.db"))
    with pytest.raises(UsageError, match="min_health_score=101"):
        run_signoff(SignoffParameters(min_health_score=101))
    with pytest.raises(UsageError, match="give both source_url and pgvector_url"):
        verify.verify_from_parameters(verify.VerifyParameters(pgvector_url="pg://embedded"))
    with pytest.raises(UsageError, match="range_size=0"):
        verify.verify_from_parameters(verify.VerifyParameters(range_size=0))
    with pytest.raises(UsageError, match=r"min_recall=1\.5"):
        verify.verify_from_parameters(verify.VerifyParameters(min_recall=1.5))
    with pytest.raises(ReportInputRefused) as info:  # the same check, in the notebook: exit 2
        run_report("backfill_verification", {"k": 0}, tmp_path)
    assert info.value.ename == "UsageError" and info.value.exit_code == 2 and "k=0" in info.value.evalue


@pytest.mark.parametrize(
    "value, problem",
    [
        ("1-10", "must be BUCKET=R"),
        ("1-10=high", "must be BUCKET=R"),
        ("5-7=0.9", "5-7 is not a size bucket"),
        ("1-10=0.9, 1,001+=1.5", "1.5 must be a number from 0 to 1"),
    ],
)
def test_a_bad_per_bucket_recall_bar_is_a_usage_error_naming_the_field(tmp_path, value, problem):
    with pytest.raises(UsageError) as info:
        verify.certify_options(verify.VerifyParameters(min_recall_by_bucket=value))
    assert info.value.field == "min_recall_by_bucket" and problem in str(info.value)
    if value == "5-7=0.9":  # in the notebook: exit 2, nothing run
        with pytest.raises(ReportInputRefused) as refused:
            run_report("backfill_verification", {"min_recall_by_bucket": value}, tmp_path)
        assert refused.value.exit_code == 2 and "min_recall_by_bucket='5-7=0.9'" in refused.value.evalue


def test_per_bucket_recall_bars_reach_the_certificate_as_the_cli_gives_them():
    options = verify.certify_options(verify.VerifyParameters(min_recall_by_bucket="1-10:0.99; 101-1000=0.9"))
    assert options.min_recall_by_bucket == {"1-10": 0.99, "101-1,000": 0.9}
    assert verify.certify_options(verify.VerifyParameters()).min_recall_by_bucket == {}


@pytest.fixture
def store(tmp_path):
    return sample_store(250, seed=5)


@pytest.fixture
def migration(pg_url, mysql_url):
    """MariaDB -> embedded pgvector: the production shape (SQLite sources are covered in test_verify)."""
    return build_migration(mysql_url, pg_url, n_users=5, items_per_user=20, dimensions=32, seed=9)


def assert_readable(run):
    """What an approver reads: no pandas noise, nothing cut short, every reason in the header."""
    page = run.html_path.read_text(encoding="utf-8")
    body = page[page.index("</section>") :]  # after the provenance header
    shown = html.unescape(re.sub(r"<style.*?</style>|<[^>]+>", " ", body, flags=re.DOTALL))
    for noise in ("{'", "['", "...", "Out["):
        assert noise not in shown, (run.name, noise)
    assert re.search(r">\s*(NaN|None|nan)\s*<", body) is None, run.name  # a blank, not NaN
    assert re.search(r"^\s*'?(PASS|FAIL|GO|NO-GO|INFO)'?\s*$", shown, re.MULTILINE) is None  # bare reprs
    header = page[: page.index("</section>")]
    for reason in run.summary.get("reasons") or []:
        assert html.escape(reason) in header, reason


def test_health_report(tmp_path, store, monkeypatch):
    run = run_report("health_report", {"store": store, "age_days": "60"}, tmp_path)
    assert run.verdict == "PASS" and run.exit_code == 0
    assert 0 <= run.summary["health"]["score"] <= 100 and run.summary["stubs"] > 0
    assert_readable(run)
    # relative paths mean what they mean where the command runs (runbook: -p ... reports/<run>/summary.json)
    monkeypatch.chdir(tmp_path)
    again = run_report(
        "health_report",
        {"store": store, "min_score": 100, "previous_summary": str(run.summary_path.relative_to(tmp_path))},
        tmp_path,
    )
    assert again.verdict == "FAIL" and again.exit_code == 1
    assert again.summary["trend"]["delta"]["score"] == 0 and "below 100" in again.summary["reasons"][0]
    assert_readable(again)
    assert "Reasons for the verdict" in again.html_path.read_text()


def test_duplicate_review_writes_the_review_file(tmp_path, store):
    run = run_report(
        "duplicate_review", {"store": store, "threshold": "0.8", "strategy": "combine"}, tmp_path
    )
    assert run.verdict == "INFO" and run.summary["pairs"] > 0
    rows = read_review_csv(run.summary["review_file"])
    assert run.summary["review_file"].startswith(str(run.run_dir))
    assert len(rows) == run.summary["pairs"] and set(rows[0]) == {
        "scope",
        "path_a",
        "path_b",
        "similarity",
        "text_similarity",
        "semantic_similarity",
        "matched_by",
        "kind",
        "decision",
    }
    # the sample is embedded with the real model: its Chinese entries pair by text only
    assert run.summary["embedded_out_of_range"] > 0
    assert sum(run.summary["matched_by"].values()) == run.summary["pairs"]
    assert_readable(run)
    artifacts = {a["file"] for a in json.loads(run.manifest_path.read_text())["artifacts"]}
    assert "duplicate_review.csv" in artifacts
    # the pair cards show the first 12 pairs and say so, every pair in the CSV beside the HTML
    pairs = run.summary["pairs"]
    assert pairs > 12, pairs  # the sample has more pairs than the cards show: the cut is exercised
    page = run.html_path.read_text(encoding="utf-8")
    assert f'first 12 of {pairs} rows</em> -- all {pairs} rows: <a href="duplicate_pairs.csv">' in page
    whole = list(csv.DictReader((run.run_dir / "duplicate_pairs.csv").open(encoding="utf-8")))
    assert len(whole) == pairs and {"scope", "path_a", "path_b", "similarity"} <= set(whole[0])
    # the next review queue lies beside the HTML, linked, in the review queue's columns
    queue = run.run_dir / "review_queue.csv"
    assert run.summary["review_queue"] == str(queue) and '<a href="review_queue.csv">' in page
    header = csv.DictReader(queue.open(encoding="utf-8")).fieldnames or ()
    assert {"stratum", "weight", "decision"} <= set(header)
    assert {"duplicate_pairs.csv", "review_queue.csv"} <= artifacts
    # a small store: every pair scored, and the report says so
    assert run.summary["sample"]["complete"] and "every one of the store's" in page


def test_duplicate_review_bad_threshold_is_a_one_line_validation_error(tmp_path, store):
    with pytest.raises(ReportInputRefused) as info:
        run_report("duplicate_review", {"store": store, "threshold": "1.5"}, tmp_path)
    assert "UsageError: threshold=1.5: must be a number from 0 to 1" in str(info.value)
    assert "\n" not in str(info.value) and info.value.exit_code == 2


def test_unknown_parameter_of_a_real_report(tmp_path):
    with pytest.raises(UsageError, match="treshold"):
        run_report("duplicate_review", {"treshold": 0.9}, tmp_path)


def _verification(migration, tmp_path):
    params = {
        "source_url": migration.source_url,
        "pgvector_url": migration.dest_url,
        "expected_dimensions": 32,
        "sample_size": 20,
        "k": 5,
        "range_size": 25,
    }
    return run_report("backfill_verification", params, tmp_path)


def _text(html_part: str) -> str:
    joined = re.sub(r"<wbr\s*/?>", "", html_part)  # the break hints inside long ids
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", joined)).split())


def assert_bucket_table(run):
    """The per-bucket table: each measured bucket's label beside its recall figure."""
    section = _section(run.html_path.read_text(encoding="utf-8"), "Retrieval per user-size bucket")
    recalls = dict(run.summary["recall_per_bucket"])
    assert recalls and f"recall@{run.parameters['k']}" in section
    for row in re.findall(r"<tr.*?</tr>", section, flags=re.DOTALL)[1:]:
        cells = [_text(c) for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, flags=re.DOTALL)]
        label = next(c for c in cells if c in recalls)
        assert f"{recalls.pop(label):g}" in cells, (label, cells)
    assert recalls == {}  # every bucket of summary.json is a row of the table


def user_table_rows(run) -> dict[str, str]:
    """The per-user table of the HTML: user -> the row's text."""
    section = _section(run.html_path.read_text(encoding="utf-8"), "Per user")
    rows = {}
    for row in re.findall(r"<tr.*?</tr>", section, flags=re.DOTALL):
        cells = [_text(c) for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, flags=re.DOTALL)]
        if len(cells) >= 10 and "user" not in cells[:2]:  # the table's rows, not the counts above it
            rows[next(c for c in cells if c)] = " | ".join(cells)
    return rows


def test_backfill_verification_pass_then_fail_on_damage(tmp_path, migration):
    intact = _verification(migration, tmp_path)
    assert intact.verdict == "PASS" and intact.exit_code == 0
    assert intact.summary["rows"]["source"] == migration.active and intact.summary["reasons"] == []
    assert [g["state"] for g in intact.summary["gates"]] == ["pass"] * 4 + ["off"]  # legacy cannot search
    assert intact.summary["claim"].startswith(f"All {migration.active} active legacy-mysql rows")
    assert not (intact.run_dir / "bad_rows.csv").exists() and intact.summary["repair"] is None
    assert_readable(intact)
    assert_bucket_table(intact)
    assert user_table_rows(intact) == {} and "every user's rows agree" in intact.html_path.read_text()
    with pg_connect(migration.dest_url, autocommit=True) as conn:
        ids = [r[0] for r in conn.execute("SELECT source_memory_id FROM memory_embeddings ORDER BY 1")]
        conn.execute("DELETE FROM memory_embeddings WHERE source_memory_id = %s", (ids[0],))
        conn.execute(
            "UPDATE memory_embeddings SET content = 'tampered' WHERE source_memory_id = %s", (ids[10],)
        )
        for (index,) in conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'memory_embeddings' AND indexdef ~* 'hnsw'"
        ).fetchall():
            conn.execute(f'DROP INDEX "{index}"')
        conn.execute("ALTER TABLE memory_embeddings ALTER COLUMN embedding TYPE vector")
        conn.execute(
            "UPDATE memory_embeddings SET embedding = '[1,0,0]' WHERE source_memory_id = %s", (ids[20],)
        )
    inputs = intact.summary["fingerprint"]["inputs"]  # what a later run is compared by
    assert inputs["source_rows"] == inputs["dest_rows"] == migration.active
    assert inputs["source_checksum"] == inputs["dest_checksum"] != ""
    damaged = _verification(migration, tmp_path)
    assert damaged.verdict == "FAIL" and damaged.exit_code == 1
    # the same parameters on other rows: not comparable, and the report says which input differs
    comparison = damaged.summary["comparison"]
    assert comparison["previous"] == intact.run_id and comparison["comparable"] is False
    assert {w.split(":")[0] for w in comparison["why_not"]} == {"input dest_rows", "input dest_checksum"}
    named = {(b["key"], b["kind"]) for b in damaged.summary["rows"]["first_bad"]}
    assert named == {(ids[0], "missing"), (ids[10], "changed")}
    assert any(r.startswith("vectors: wrong-dimension: 1") for r in damaged.summary["reasons"])
    assert damaged.summary["repair"] == f"memwork backfill --repair {damaged.summary['run_id']}"
    # the per-field diffs of every failure beside the HTML, linked from the page's repair section
    diffs = (damaged.run_dir / "bad_rows.csv").read_text(encoding="utf-8")
    assert f"{ids[10]},changed" in diffs and "content" in diffs and "tampered" in diffs
    assert f"{ids[20]},wrong-dimension" in diffs
    page = damaged.html_path.read_text(encoding="utf-8")
    assert "bad_rows.csv" in page and damaged.summary["repair"] in page
    assert_readable(damaged)  # every reason in the HTML header
    # the per-user table: each user with a bad row, its counts on both sides and the ids named
    users = user_table_rows(damaged)
    owner = {b["key"]: b["user"] for b in damaged.summary["rows"]["first_bad"]}
    assert set(users) >= {owner[ids[0]], owner[ids[10]]}
    assert ids[0] in users[owner[ids[0]]] and ids[10] in users[owner[ids[10]]]


def _qdrant_verification(storage, pg_url, tmp_path, **extra):  # noqa: F811
    params = {
        "source": "qdrant",
        "source_url": f"local:{storage}",
        "pgvector_url": pg_url,
        "settings": "; ".join(f"{k}={v}" for k, v in qdrant_env(storage).items() if k != "MEMORY_QDRANT_URL"),
        "expected_dimensions": 8,
        "k": 5,
        "range_size": 4,
        "users_per_bucket": 5,
    }
    return run_report("backfill_verification", params | extra, tmp_path)


def test_backfill_verification_of_a_qdrant_copy_pass_then_fail_naming_the_bad_rows(
    storage,  # noqa: F811
    pg_url,
    tmp_path,
):
    qdrant_import(storage, pg_url, vectors="keep")
    intact = _qdrant_verification(storage, pg_url, tmp_path, min_recall_by_bucket="1-10:0.99, 1001+:0.9")
    assert intact.verdict == "PASS" and intact.exit_code == 0, intact.summary["reasons"]
    gates = {g["name"]: g for g in intact.summary["gates"]}
    assert [g["state"] for g in gates.values()] == ["pass"] * 5  # Qdrant can search: the preserved gate ran
    claim = intact.summary["claim"]
    assert (
        claim.startswith("All 95 active qdrant rows of 6 users")
        and "Against the source's own search" in claim
    )
    page = intact.html_path.read_text(encoding="utf-8")
    assert claim in _text(_section(page, "The claim"))  # the claim in one sentence
    gate_table = _text(_section(page, 'id="Gates"'))  # the notebook's table (the header's strip first)
    assert "preserved PASS" in gate_table and "overlap" in gate_table
    # each size bucket's own recall bar on the gate strip, as set
    assert ">= 0.95; bucket 1-10 >= 0.99; bucket 1,001+ >= 0.9 (set)" in gate_table
    assert gates["retrieval"]["why"].endswith("; bucket 1-10 recall >= 0.99; bucket 1,001+ recall >= 0.9")
    assert gates["retrieval"]["origin"] == "set" and gates["rows"]["origin"] == "default"
    strip = _text(page[: page.index("</section>")])  # the header's gate strip says so too
    assert re.search(r"retrieval PASS \S+ worst bucket recall@k >= 0\.95 worst bucket recall@k set", strip)
    assert_readable(intact)
    assert_bucket_table(intact)
    assert {"1-10", "11-100"} <= set(intact.summary["recall_per_bucket"])
    assert user_table_rows(intact) == {}

    with qdrant_pg(pg_url) as conn:
        first = {
            user: conn.execute(
                "SELECT min(source_memory_id::int)::text FROM memory_embeddings WHERE user_id = %s", (user,)
            ).fetchone()[0]
            for user in ("u-big", "u-25", "u-small")
        }
        conn.execute("DELETE FROM memory_embeddings WHERE source_memory_id = %s", (first["u-big"],))
        conn.execute(
            "UPDATE memory_embeddings SET content = content || '!' WHERE source_memory_id = %s",
            (first["u-25"],),
        )
        # u-small: its rows all match; only one vector is not the source's
        conn.execute(
            "UPDATE memory_embeddings SET embedding = '[1,0,0,0,0,0,0,1]' WHERE source_memory_id = %s",
            (first["u-small"],),
        )
    damaged = _qdrant_verification(storage, pg_url, tmp_path)
    assert damaged.verdict == "FAIL" and damaged.exit_code == 1
    named = {(b["key"], b["kind"]) for b in damaged.summary["rows"]["first_bad"]}
    assert named == {(first["u-big"], "missing"), (first["u-25"], "changed")}
    run_id = damaged.summary["run_id"]
    assert damaged.summary["repair"] == f"memwork import --from qdrant --repair {run_id}"
    page = damaged.html_path.read_text(encoding="utf-8")
    assert damaged.summary["repair"] in _text(_section(page, "Repair"))
    diffs = (damaged.run_dir / "bad_rows.csv").read_text(encoding="utf-8")
    assert f"{first['u-big']},missing,u-big" in diffs and f"{first['u-25']},changed,u-25,content" in diffs
    assert_readable(damaged)
    assert_bucket_table(damaged)
    # the per-user table: both bad-row users, and u-small whose only problem is a vector
    users = user_table_rows(damaged)
    assert set(users) == {"u-big", "u-25", "u-small"}
    assert first["u-big"] in users["u-big"] and first["u-25"] in users["u-25"]
    assert "u-small" not in damaged.summary["rows"]["bad_users"]
    assert first["u-small"] in users["u-small"] and damaged.summary["users"]["u-small"]["vectors"]


def test_canary_go_then_no_go(tmp_path, migration):
    verification = _verification(migration, tmp_path)
    base = {
        "legacy_url": migration.source_url,
        "pgvector_url": migration.dest_url,
        "sample_size": 10,
        "verification_summary": str(verification.summary_path),
        "approver": "ops@example.com",
        "waive": "health_summary: a test migration, no entry store to report on; "
        "leak_probes: probed in test_canary_app",
    }
    go = run_report("canary_signoff", base, tmp_path)
    assert go.verdict == "GO" and go.exit_code == 0, go.summary["reasons"]
    assert_readable(go)
    signoff = go.summary["signoff"]
    page = go.html_path.read_text()
    verification_signed = signoff["inputs"]["verification_summary"]
    for digest in (signoff["parameters_sha256"], verification_signed["summary_sha256"]):
        assert digest in page  # whole digests in the sign-off block
    assert verification_signed["summary_sha256"] == sha256_file(verification.summary_path)
    assert verification_signed["run_id"] == verification.summary["run"]["run_id"]  # named by its run
    assert signoff["inputs"]["health_summary"] is None
    assert signoff["approver"] == "ops@example.com"
    # the latency-ratio gate is in the strip: off by default, with the measured ratio and its unit
    ratio = re.search(r"<tr class='mw-gate mw-(\w+)'><td>p95 vs legacy</td>(.*?)</tr>", page)
    assert ratio is not None and ratio.group(1) == "off", page[:2000]
    observed, threshold = re.findall(r"<td>(.*?)</td>", ratio.group(2))[1:3]
    assert observed.endswith("x legacy p95") and float(observed.split()[0]) > 0 and threshold == "off"
    slow = run_report("canary_signoff", {**base, "max_p95_ms": 0.001, "waive": ""}, tmp_path)
    assert slow.verdict == "NO-GO" and slow.exit_code == 1
    failed = {g["gate"] for g in slow.summary["gates"] if g["status"] == "FAIL"}
    assert failed == {"target p95 latency", "health", "isolation"}  # no probe result (leak_probes) given
    assert_readable(slow)


def _assert_cell(name: str) -> str:
    """The notebook's invariant cell: the last code cell before the gate cell."""
    code = [
        c
        for c in nbformat.read(str(notebooks_dir() / f"{name}.ipynb"), as_version=4).cells
        if c.cell_type == "code"
    ]
    assert "gate_on_verdict" in code[-1].source and "assert " in code[-2].source, name
    return code[-2].source


def test_the_canary_invariant_cell_fails_on_an_inconsistent_summary(tmp_path):
    """The last assert cells check invariants that can fail, not a restatement of the verdict."""
    summary_file = tmp_path / "summary.json"
    summary_file.write_text('{"verdict": "PASS"}')
    good = {
        "verdict": "NO-GO",
        "reasons": ["errors: 3 failed target resolves"],
        "gates": [{"gate": "enabled", "status": "PASS"}, {"gate": "errors", "status": "FAIL"}],
        "latency_ms": {"target": {"count": 5}, "legacy": {"count": 5}},
        "signoff": {
            "verdict": "NO-GO",
            "parameters_sha256": "a" * 64,
            "inputs": {
                "health_summary": None,
                "verification_summary": {"summary_sha256": sha256_file(summary_file)},
            },
        },
    }
    namespace = {
        "sample_size": 5,
        "health_summary": "",
        "verification_summary": str(summary_file),
    }
    cell = _assert_cell("canary_signoff")
    exec(cell, {**namespace, "summary": good})  # consistent: passes
    broken = [
        {**good, "verdict": "GO"},  # the verdict disagrees with the gate table
        {**good, "reasons": ["latency: slow"]},  # a reason naming no failed gate
        {**good, "latency_ms": {"target": {"count": 6}}},  # more resolves timed than asked for
        {
            **good,
            "signoff": {
                **good["signoff"],
                "inputs": {"health_summary": None, "verification_summary": {"summary_sha256": "0" * 64}},
            },
        },  # an input report signed with another digest
        {
            **good,
            "signoff": {
                **good["signoff"],
                "inputs": {"health_summary": None, "verification_summary": None},
            },
        },  # an input report the verdict relied on, not signed
    ]
    for summary in broken:
        with pytest.raises(AssertionError):
            exec(cell, {**namespace, "summary": summary})


#: the input reports a judged log's sign-off goes without, waived on purpose (a missing one is NO-GO)
WAIVED = {
    "waive": "health_summary: a synthetic log; verification_summary: a synthetic log; "
    "leak_probes: a synthetic log, no service"
}


def _judged_log(tmp_path, n=120, shadow_scale=1.0, name="comparisons.jsonl"):
    """A comparison log in the service's schema: qdrant primary, pgvector shadow (both rank by
    meaning: agreement decides), known latencies."""
    import numpy as np
    from test_canary_judge import comparison, write_log

    rng = np.random.default_rng(3)
    primary = rng.lognormal(np.log(20.0), 0.3, n)
    shadow = rng.lognormal(np.log(20.0), 0.3, n) * shadow_scale
    return write_log(
        tmp_path / name,
        [comparison(i, float(p), float(q)) for i, (p, q) in enumerate(zip(primary, shadow, strict=True))],
    )


def _section(page: str, heading: str) -> str:
    """The HTML from a heading to the next h2."""
    start = page.index(heading)
    end = page.find("<h2", start + len(heading))
    return page[start : end if end > 0 else len(page)]


def test_canary_judge_go_with_the_metric_table_and_both_latency_distributions(tmp_path):
    log = _judged_log(tmp_path, n=400)  # a GO proves the 1 % budgets: ~374 clean comparisons (issue 18)
    given = {"comparison_log": str(log), "approver": "ops@example.com", **WAIVED}
    run = run_report("canary_signoff", given, tmp_path)
    assert run.verdict == "GO" and run.exit_code == 0, run.summary.get("reasons")
    assert run.summary["signoff"]["comparison_log_sha256"] == hashlib.sha256(log.read_bytes()).hexdigest()
    assert {m["metric"]: m["classification"] for m in run.summary["metrics"]}["latencyMs"] == "PASS"
    page = run.html_path.read_text(encoding="utf-8")
    judgement = _section(page, 'id="Judgement"')
    for metric in (
        "crossUser",
        "dimensionMismatch",
        "shadowErrors",
        "latencyMs",
        "resultCount",
        "overlapAtK",
        "rbo",
        "top1Agree",
    ):
        assert f">{metric}<" in judgement, metric
    assert ">CI<" in judgement and ">PASS<" in judgement
    latency = _section(page, 'id="Resolve-latency-(ms)"').replace("<wbr/>", "").replace("<wbr>", "")
    # both backends' distributions: a row each, and the histogram + ECDF figure
    assert ">qdrant<" in latency and ">pgvector<" in latency
    assert latency.count("data:image/png;base64,") == 1
    assert run.summary["signoff"]["approver"] == "ops@example.com"
    assert_readable(run)


def test_canary_judge_inconclusive_and_no_go_through_the_runner(tmp_path):
    few = _judged_log(tmp_path, n=12, name="few.jsonl")
    undecided = run_report("canary_signoff", {"comparison_log": str(few), **WAIVED}, tmp_path)
    assert undecided.verdict == "INCONCLUSIVE" and undecided.exit_code == 3
    assert json.loads(undecided.summary_path.read_text())["verdict"] == "INCONCLUSIVE"
    assert undecided.summary["reasons"][-1] == "neither GO nor NO-GO: a person must decide"
    assert_readable(undecided)
    slow = _judged_log(tmp_path, shadow_scale=2.0, name="slow.jsonl")
    no_go = run_report("canary_signoff", {"comparison_log": str(slow), "band": 0.5, **WAIVED}, tmp_path)
    assert no_go.verdict == "NO-GO" and no_go.exit_code == 1
    assert no_go.summary["signoff"]["thresholds"]["band"] == 0.5
    assert any(r.startswith("latencyMs: significant increase") for r in no_go.summary["reasons"])


def test_canary_judge_mode_refuses_the_in_process_urls(tmp_path):
    with pytest.raises(UsageError, match="comparison_log"):
        run_signoff(SignoffParameters(comparison_log=str(tmp_path / "x.jsonl"), legacy_url="sqlite:///x.db"))


def test_canary_judge_from_a_running_service_with_shadow_reads(tmp_path, migration):
    """The demo's shape: legacy answers, pgvector is shadowed at 100 %, the sign-off judges the log the
    service reports, over its base URL (the token hidden in every artifact)."""
    from memwork.rollout.app_canary import client
    from memwork.service.app import create_app, running

    token = "nb-service-token-5d1e"
    log = tmp_path / "shadow" / "comparisons.jsonl"
    env = {
        **gates.canary_env(
            migration.source_url, migration.dest_url, gates.default_embedding_module(migration.dest_url)
        ),
        "MEMORY_BACKEND": "legacy",
        "MEMORY_SHADOW_BACKEND": "pgvector",
        "MEMORY_SHADOW_SAMPLE": "1",
        "MEMORY_SHADOW_LOG": str(log),
        "MEMWORK_API_TOKEN": token,
    }
    app = create_app(env)
    with running(app) as base_url:
        http = client(base_url, token)
        for request in gates.sample_requests(migration.source_url, 30, seed=1, limit=5):
            http.post_json("/user-memory/v1/resolve", request)
        http.close()
        assert app.state.memwork.shadow.drain(10.0)
        run = run_report(
            "canary_signoff", {"base_url": base_url, "token": token, "min_samples": 10}, tmp_path
        )
    assert run.error is None, run.error
    assert (
        run.verdict in ("GO", "NO-GO", "INCONCLUSIVE")
        and run.exit_code == {"GO": 0, "NO-GO": 1, "INCONCLUSIVE": 3}[run.verdict]
    )
    signoff = run.summary["signoff"]
    assert signoff["comparison_log"] == str(log) and run.summary["records"] == 30
    assert signoff["service"]["backend"] == "legacy" and signoff["service"]["shadow"]["backend"] == "pgvector"
    assert run.summary["backends"] == {"primary": "legacy-conversation-memory", "shadow": "pgvector"}
    assert {m["metric"]: m["classification"] for m in run.summary["metrics"]}["crossUser"] == "PASS"
    for artifact in (run.html_path, run.summary_path, run.notebook_path):
        assert token not in artifact.read_text(encoding="utf-8"), artifact.name


def test_the_judge_invariant_cell_fails_on_an_inconsistent_summary():
    cell = _assert_cell("canary_signoff")
    thresholds = {"band": 0.25, "confidence": 0.95, "min_samples": 20, "max_error_rate": 0.01,
                  "max_damaged_share": 0.01, "max_underfill_rate": 0.01, "max_p95_ms": 250.0,
                  "max_p99_ms": 1000.0, "latency_band": 0.0, "warmup_s": 30.0, "primary_ranking": "",
                  "shadow_ranking": ""}  # fmt: skip
    metric = {"metric": "latencyMs", "classification": "PASS", "required": True, "estimate": 0.4,
              "ci_low": -0.1, "ci_high": 0.9, "n_baseline": 50, "n_target": 50}  # fmt: skip
    signoff = {
        "verdict": "GO",
        "thresholds": thresholds,
        "comparison_log_sha256": "b" * 64,
        "parameters_sha256": "a" * 64,
        "inputs": {"health_summary": None, "verification_summary": None},
    }
    good = {"verdict": "GO", "reasons": [], "records": 50, "exit_code": 0, "thresholds": thresholds,
            "metrics": [metric], "signoff": signoff}  # fmt: skip
    namespace = {**thresholds, "health_summary": "", "verification_summary": ""}
    exec(cell, {**namespace, "summary": good})  # consistent: passes
    failing = {**metric, "classification": "FAIL"}
    no_go = {**good, "verdict": "NO-GO", "exit_code": 1, "signoff": {**signoff, "verdict": "NO-GO"}}
    undecided = {
        **good,
        "verdict": "INCONCLUSIVE",
        "exit_code": 3,
        "signoff": {**signoff, "verdict": "INCONCLUSIVE"},
    }
    broken = [
        {**good, "metrics": [failing]},  # a FAIL metric under a GO
        {**no_go, "metrics": [failing]},  # a NO-GO no reason explains
        {**good, "metrics": [{**metric, "estimate": 2.0}]},  # the estimate outside its own interval
        {**good, "metrics": [{**metric, "n_target": 51}]},  # more answers than the log holds
        undecided,  # INCONCLUSIVE with nothing undecided
        {**good, "pairs": [{"shadow": "pgvector"}, {"shadow": "qdrant"}]},  # a GO over two pooled pairs
        {
            **good,
            "signoff": {**signoff, "thresholds": {**thresholds, "band": 0.5}},
        },  # other thresholds signed
    ]
    for summary in broken:
        with pytest.raises(AssertionError):
            exec(cell, {**namespace, "summary": summary})


def test_the_health_invariant_cell_fails_on_an_inconsistent_summary():
    from types import SimpleNamespace

    health = {"score": 40, "band": "poor", "entries": 3, "by_type": {"fact": 3}, "by_confidence": {"high": 3},
              "coverage": {"tags_pct": 50.0}, "embedded": 2, "embedded_out_of_range": 1}  # fmt: skip
    from memwork.defrag import health_band

    health["band"] = health_band(40)
    report = SimpleNamespace(analysis={"scopes": {"a": {"entries": 2}, "b": {"entries": 1}}})
    good = {
        "verdict": "FAIL",
        "reasons": ["health: score 40 below 50"],
        "gates": [{"name": "health score", "state": "fail", "observed": 40, "threshold": 50}],
        "band": health["band"],
        "health": health,
        "embedded_out_of_range": 1,
    }
    cell = _assert_cell("health_report")
    exec(cell, {"summary": good, "min_score": 50, "report": report})
    for summary, min_score in (
        ({**good, "verdict": "PASS"}, 50),  # the verdict is not the rule applied to the score
        (good, 10),  # a FAIL the threshold does not explain
        ({**good, "health": {**health, "by_type": {"fact": 2}}}, 50),  # a breakdown that does not add up
        ({**good, "health": {**health, "embedded_out_of_range": 3}}, 50),  # more out of range than embedded
        ({**good, "embedded_out_of_range": 0}, 50),  # a summary count other than the health's
    ):
        with pytest.raises(AssertionError):
            exec(cell, {"summary": summary, "min_score": min_score, "report": report})
