"""The cross-user probes' leak bound in the rollout sign-off: the result file ``memwork canary app
--probes N --json`` writes, read back by the judge and the in-process gates, gated and signed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_canary_app import TOKEN, plugin_service, service_env
from test_rollout_roles import certificate, realistic, write

from memwork.cli import main
from memwork.errors import UsageError
from memwork.legacy.schema import init_schema
from memwork.rollout.judge import GO, NO_GO
from memwork.rollout.run import judge_log, run_signoff
from memwork.rollout.signoff import SignoffParameters
from memwork.workspace import sha256_file


def probe_file(base_url: str, path: Path, *extra: str) -> Path:
    result = CliRunner().invoke(
        main, ["canary", "app", "--base-url", base_url, "--token", TOKEN, "--probes", "40", "--json", *extra]
    )
    path.write_text(result.stdout)
    return path


@pytest.fixture(scope="module")
def probes(tmp_path_factory) -> dict[str, Path]:
    """Probe result files of real runs: a legacy service (no leak), and a leaking backend plugin."""
    from memwork.service.app import create_app, running

    folder = tmp_path_factory.mktemp("probes")
    legacy_url = f"sqlite:///{folder / 'legacy.db'}"
    init_schema(legacy_url, apply=True)
    files = {}
    with running(create_app(service_env(legacy_url))) as base_url:
        files["clean"] = probe_file(base_url, folder / "clean.json", "--max-leak-rate", "0.1")
        files["default"] = probe_file(base_url, folder / "default.json")  # 0.1 %: 40 probes cannot show it
    env = {"MEMORY_ENABLED": "1", "MEMORY_BACKEND": "shared-index", "MEMWORK_API_TOKEN": TOKEN,
           "MEMORY_SHARED_INDEX_LEAK_EVERY": "5"}  # fmt: skip
    app, _ = plugin_service(env)
    with running(app) as base_url:
        files["leaky"] = probe_file(base_url, folder / "leaky.json", "--max-leak-rate", "0.1")
    return files


def judged(tmp_path: Path, probes_file: Path | str = "", **kwargs):
    log = write(tmp_path / "c.jsonl", realistic())
    return judge_log(log, certificate=str(certificate(tmp_path)), leak_probes=str(probes_file), **kwargs)


def test_the_sign_off_states_the_leak_bound(probes, tmp_path):
    result = judged(tmp_path, probes["clean"])
    assert result.verdict == GO, result.reasons
    signed = result.signoff["isolation"]
    assert signed["observed_leaks"] == 0 and signed["probes"] == signed["informative"] == 40
    assert signed["distinct_pairs"] == 20 and signed["required_bound"] == 0.1
    assert signed["required_origin"] == "set" and 0.07 < signed["upper_bound"] < 0.075
    assert signed["file_sha256"] == sha256_file(probes["clean"]) and signed["verdict"] == "GO"
    gate = next(g for g in result.gates if g["name"] == "isolation")
    assert gate["state"] == "pass" and gate["threshold"] == 0.1 and gate["origin"] == "set"
    assert gate["observed"] == signed["upper_bound"] and "20 distinct user pairs" in gate["why"]
    # the same through the CLI judge
    out = CliRunner().invoke(
        main,
        ["canary", "judge", "--log", str(tmp_path / "c.jsonl"), "--certificate", str(certificate(tmp_path)),
         "--leak-probes", str(probes["clean"]), "--json"],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["signoff"]["isolation"]["distinct_pairs"] == 20


def test_a_leak_or_a_bound_not_reached_is_no_go(probes, tmp_path):
    leaky = judged(tmp_path, probes["leaky"])
    assert leaky.verdict == NO_GO
    assert leaky.reasons[-1].startswith("isolation: cross-user leak: 8 cross-user leaks in 40 informative")
    assert leaky.signoff["isolation"]["observed_leaks"] == 8
    assert next(g for g in leaky.gates if g["name"] == "isolation")["state"] == "fail"
    short = judged(tmp_path, probes["default"])
    assert short.verdict == NO_GO and short.reasons[-1].startswith("isolation: not shown: 0 cross-user leaks")
    assert "required < 0.100% (default)" in short.reasons[-1]
    assert short.signoff["isolation"]["required_origin"] == "default"


def test_the_verdict_is_recomputed_from_the_counts_and_bad_files_are_refused(probes, tmp_path):
    data = json.loads(probes["leaky"].read_text())
    data["leakProbes"]["verdict"] = "GO"  # edited: decides nothing
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    assert judged(tmp_path, edited).verdict == NO_GO
    data["leakProbes"]["informative"] = 50  # more informative answers than probes sent
    edited.write_text(json.dumps(data))
    with pytest.raises(UsageError, match=r"leak_probes=.*probe counts do not add up"):
        judged(tmp_path, edited)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"ok": True, "steps": []}))  # the app canary run without --probes
    with pytest.raises(UsageError, match="holds no probe result"):
        judged(tmp_path, other)
    with pytest.raises(UsageError, match="leak_probes"):
        SignoffParameters(leak_probes=str(tmp_path / "missing.json")).check()


def test_without_probes_the_judge_shows_no_data_and_the_signoff_needs_them_unless_waived(tmp_path):
    """``memwork canary judge`` judges a log: no probe file is a gate without data. The report's
    sign-off needs the probes: none given is a NO-GO naming them, unless ``waive`` says why."""

    result = judged(tmp_path)
    assert result.verdict == GO and result.signoff["isolation"]["given"] is False
    assert next(g for g in result.gates if g["name"] == "isolation")["state"] == "nodata"
    log, cert = str(write(tmp_path / "c.jsonl", realistic())), str(certificate(tmp_path))
    inputs = "health_summary: no entry store"
    required = run_signoff(SignoffParameters(comparison_log=log, certificate=cert, waive=inputs))
    assert required.verdict == NO_GO
    assert any(r.startswith("isolation: no probe result") for r in required.reasons), required.reasons
    waived = run_signoff(
        SignoffParameters(
            comparison_log=log, certificate=cert, waive=f"{inputs}; leak_probes: pilot, no users"
        )
    )
    assert waived.verdict == GO, waived.reasons
    gate = next(g for g in waived.gates if g["name"] == "isolation")
    assert (gate["state"], gate["why"]) == ("off", "waived: pilot, no users")


def test_the_in_process_gates_carry_the_bound(probes, pg_url, sqlite_url):
    from memwork.pgvector.local_hash import write_module
    from memwork.rollout.gates import canary_env, run_gates
    from memwork.samples.migration import build_migration

    m = build_migration(sqlite_url, pg_url, n_users=3, items_per_user=8, dimensions=16, seed=2)
    env = canary_env(m.source_url, m.dest_url, write_module(m.dimensions))
    inputs = "health_summary: test data; verification_summary: test data"
    clean = run_gates(env, SignoffParameters(sample_size=5, leak_probes=str(probes["clean"]), waive=inputs))
    gate = next(g for g in clean.gates if g.name == "isolation")
    assert clean.verdict == "GO" and gate.status == "PASS" and gate.threshold == 0.1, clean.reasons
    assert clean.signoff["isolation"]["distinct_pairs"] == 20
    leaky = run_gates(env, SignoffParameters(sample_size=5, leak_probes=str(probes["leaky"]), waive=inputs))
    assert leaky.verdict == "NO-GO" and leaky.reasons[-1].startswith("isolation: cross-user leak: 8 ")
