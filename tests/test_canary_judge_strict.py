"""The canary judge cannot be talked into GO (F-10 to F-15 of the be70b28 adversarial review).

Each of the adversary's crafted logs was GO on be70b28; here each is not GO and the reason names
why. Property tests pin the invariants behind them: repeats add no evidence, damage never helps,
pairs are never pooled, a sample too small to detect the band is never GO, and a field of the wrong
type is damage, never a value."""

from __future__ import annotations

import json
import random
import tempfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memwork.cli import main
from memwork.errors import UsageError
from memwork.rollout import stats
from memwork.rollout.comparisons import InvalidRecord, parse_line, read_comparison_log
from memwork.rollout.judge import (
    FAIL,
    GO,
    INCONCLUSIVE,
    NO_GO,
    NODATA,
    PASS,
    Thresholds,
    minimum_paired_answers,
)
from memwork.rollout.run import judge_log
from memwork.service.shadow import overlap_at_k, rbo, top1_agree

PRIMARY = "weaviate"  # ranks by semantic similarity like pgvector and qdrant: agreement decides


def rec(i, p_lat, s_lat, *, s_ok=True, p_backend=PRIMARY, s_backend="pgvector", k=10):
    """A record as the adversary built it (16-judge-logs.py): the service's schema, ids agreeing."""
    ids = [f"m{j}" for j in range(k)]
    shadow_ids = ids if s_ok else []
    return {
        "ts": "2026-01-01T00:00:00+00:00",
        "requestId": f"r{i}",
        "user": "u",
        "k": k,
        "primary": {"backend": p_backend, "latencyMs": p_lat, "ok": True, "error": None, "ids": ids,
                    "count": len(ids), "crossUser": 0},
        "shadow": {"backend": s_backend, "latencyMs": s_lat, "ok": s_ok, "error": None if s_ok else "x",
                   "ids": shadow_ids, "count": len(shadow_ids), "crossUser": 0},
        "overlapAtK": overlap_at_k(ids, shadow_ids, k),
        "rbo": rbo(ids, shadow_ids),
        "top1Agree": top1_agree(ids, shadow_ids),
        "fewerThanK": {"primary": False, "shadow": False},
        "dimensionMismatch": None,
    }  # fmt: skip


def write(path: Path, records, extra_lines=()) -> Path:
    lines = [json.dumps(r) for r in records] + list(extra_lines)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def reasons_text(result) -> str:
    return "\n".join(result.reasons)


# ---- the adversary's logs: GO on be70b28, not GO now, with the reason -------------------------


def test_dup_lines_ok_repeats_count_once_and_are_reported(tmp_path):
    rnd = random.Random(1)
    five = [rec(i, 10 + rnd.random(), 10 + rnd.random()) for i in range(5)]  # 5 comparisons ...
    log = write(tmp_path / "dup.jsonl", [r for r in five for _ in range(4)])  # ... each line 4 times
    result = judge_log(log)
    assert result.verdict != GO
    assert result.records == 5 and result.log["duplicates"] == 15
    assert result.metric("latencyMs").n_baseline == 5
    assert "5 paired answers, fewer than 20" in reasons_text(result)
    assert "15 repeats counted once" in result.metric("logQuality").detail


def test_mostly_damaged_is_inconclusive_naming_the_damage(tmp_path):
    rnd = random.Random(2)
    good = [rec(i, 10 + rnd.random(), 10 + rnd.random()) for i in range(400)]  # enough for a GO
    torn = '{"ts": "2026-01-01", "requestId": "x", "shadow": {"ok": fal'
    log = write(tmp_path / "damaged.jsonl", good, [torn] * 1200)
    clean = judge_log(write(tmp_path / "clean.jsonl", good))
    assert clean.verdict == GO, clean.reasons  # the same comparisons without the damage
    result = judge_log(log)
    assert result.verdict == INCONCLUSIVE
    quality = result.metric("logQuality")
    assert quality.classification == NODATA and quality.estimate == pytest.approx(1200 / 1600)
    assert result.reasons[0].startswith("logQuality: NODATA (1600 lines: 400 comparisons, 1200 damaged")
    assert "damaged.jsonl:401: not JSON" in result.reasons[0]
    # the share is configurable: 75 % allowed lets the same log through
    assert judge_log(log, Thresholds(max_damaged_share=0.75)).verdict == GO


def test_one_torn_line_within_the_default_share_does_not_block(tmp_path):
    rnd = random.Random(3)
    good = [rec(i, 10 + rnd.random(), 10 + rnd.random()) for i in range(400)]
    result = judge_log(write(tmp_path / "log.jsonl", good, ['{"ts": "2026-01-01T00:00:00+00:00", "req']))
    assert result.log["damaged"] == 1 and result.verdict == GO  # 1 of 401: under 1 %


def test_mixed_backends_are_judged_apart_never_pooled(tmp_path):
    rnd = random.Random(4)
    mixed = [rec(i, 10 + rnd.random(), 10 + rnd.random()) for i in range(400)]  # enough for a GO
    mixed += [rec(1000 + i, 10 + rnd.random(), 100 + rnd.random(), s_backend="qdrant") for i in range(40)]
    rnd.shuffle(mixed)
    log = write(tmp_path / "mixed.jsonl", mixed)
    result = judge_log(log)
    assert result.verdict == NO_GO
    assert result.reasons[0].startswith(f"latencyMs ({PRIMARY} -> qdrant): significant increase")
    assert [(p.shadow, p.records, p.verdict) for p in result.pairs] == [
        ("pgvector", 400, GO),
        ("qdrant", 40, NO_GO),
    ]
    assert [p["shadow"] for p in result.signoff["pairs"]] == ["pgvector", "qdrant"]  # the sign-off names both
    assert result.metric("latencyMs", f"{PRIMARY} -> pgvector").n_baseline == 400  # never 440
    # selecting the pair to sign off judges it alone and names the other as not judged
    chosen = judge_log(log, shadow_backend="pgvector")
    assert chosen.verdict == GO and [p.records for p in chosen.pairs] == [400]
    assert chosen.backends == {"primary": PRIMARY, "shadow": "pgvector"}
    assert chosen.signoff["pairs_not_judged"] == [{"primary": PRIMARY, "shadow": "qdrant", "records": 40}]
    with pytest.raises(UsageError, match="shadow_backend='weaviate': no comparison of that backend"):
        judge_log(log, shadow_backend="weaviate")


def test_two_good_pairs_are_never_go_until_one_is_selected(tmp_path):
    rnd = random.Random(5)
    both = [
        rec(i, 10 + rnd.random(), 10 + rnd.random(), s_backend=["pgvector", "qdrant"][i % 2])
        for i in range(800)  # 400 a pair: enough for a GO each
    ]
    result = judge_log(write(tmp_path / "two.jsonl", both))
    assert [p.verdict for p in result.pairs] == [GO, GO]
    assert result.verdict == INCONCLUSIVE and result.backends == {}
    assert "the log compares 2 backend pairs, judged separately" in reasons_text(result)
    assert judge_log(tmp_path / "two.jsonl", shadow_backend="qdrant").verdict == GO


def test_two_slow_answers_cannot_be_a_go(tmp_path):
    log = write(tmp_path / "two.jsonl", [rec(i, 10 + i, 5000 + i) for i in range(2)])
    result = judge_log(log, Thresholds(min_samples=2))
    assert result.verdict == INCONCLUSIVE
    latency = result.metric("latencyMs")
    assert latency.classification == NODATA and latency.min_p == pytest.approx(1 / 6)
    assert "the smallest attainable p is 0.167, above alpha 0.05" in latency.detail


def test_an_underpowered_sample_states_its_minimum_detectable_shift(tmp_path):
    # 30 noisy answers a side, no shift: not significant, but a 25 % shift could not have been seen
    rng = np.random.default_rng(6)
    base = rng.lognormal(np.log(20), 0.8, 30)
    shadow = rng.permutation(base)  # the very same answers: no shift, and none ruled out
    log = write(
        tmp_path / "noisy.jsonl",
        [rec(i, float(b), float(s)) for i, (b, s) in enumerate(zip(base, shadow, strict=True))],
    )
    latency = judge_log(log, Thresholds(min_samples=2)).metric("latencyMs")
    assert latency.classification == NODATA and latency.detectable > 0.25 and latency.ci_high > 0.25 * 20
    assert "too few answers: detectable at n=30/30" in latency.detail


def test_tail20_a_slow_fifth_is_no_go(tmp_path):
    r3 = random.Random(3)
    records = [
        rec(i, 10 + r3.random(), (10 + r3.random()) if i % 5 else 500 + r3.random()) for i in range(100)
    ]
    result = judge_log(write(tmp_path / "tail.jsonl", records))
    assert result.metric("latencyMs").classification == PASS  # the centre did not move ...
    assert result.metric("latencyP95").classification == FAIL  # ... the tail did
    assert result.verdict == NO_GO and any(r.startswith("latencyP95: p95 ") for r in result.reasons)
    assert any(
        r.startswith("sloP95: 20 of 100 shadow answers over 250 ms") for r in result.reasons
    )  # SLO too


def test_ok_as_string_is_damage_never_an_answer(tmp_path):
    records = [rec(i, 10, 10) for i in range(100)]
    for r in records[:50]:
        r["shadow"]["ok"] = "false"
        r["shadow"]["error"] = "boom"
    result = judge_log(write(tmp_path / "ok.jsonl", records))
    assert result.verdict == INCONCLUSIVE and result.records == 50 and result.log["damaged"] == 50
    assert 'shadow.ok="false" is not true or false' in result.reasons[0]


def test_three_slow_answers_are_a_no_go_at_exactly_alpha(tmp_path):
    # 3 against 3, every shadow answer slower: the exact one-sided p is 1/20 = alpha, significant
    assert Thresholds(confidence=0.95).alpha == 0.05
    result = judge_log(write(tmp_path / "tiny.jsonl", [rec(i, 10 + i, 1000 + i) for i in range(3)]),
                       Thresholds(min_samples=3))  # fmt: skip
    assert result.metric("latencyMs").p_value == pytest.approx(0.05)
    assert result.verdict == NO_GO


# ---- bad input (F-16) ------------------------------------------------------------------------


def _invoke_in(tmp_path: Path, *args: str):
    home = tmp_path / "home"
    before = sorted(p.name for p in tmp_path.iterdir())
    result = CliRunner().invoke(main, list(args), env={"MEMWORK_HOME": str(home), "MEMWORK_API_TOKEN": ""})
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written
    return result


def test_a_binary_log_is_bad_input_naming_the_file(tmp_path):
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(bytes(random.Random(7).randrange(256) for _ in range(4096)).replace(b"{", b"("))
    result = _invoke_in(tmp_path, "canary", "judge", "--log", str(binary))
    assert result.exit_code == 2, result.output
    assert f"log={str(binary)!r}: not a comparison log" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_binary_health_summary_is_bad_input_naming_the_file(tmp_path):
    log = write(tmp_path / "log.jsonl", [rec(i, 10, 10) for i in range(5)])
    summary = tmp_path / "summary.json"
    summary.write_bytes(b"\xff\xfe\x00binary")
    result = _invoke_in(tmp_path, "canary", "judge", "--log", str(log), "--health-summary", str(summary))
    assert result.exit_code == 2, result.output
    assert f"health_summary={str(summary)!r}: not a summary.json" in result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "url", ["not a url", "ftp://127.0.0.1/x", "http://127.0.0.1:99999", "http://", "::::"]
)
def test_a_malformed_base_url_is_bad_input_not_an_unreachable_service(tmp_path, url):
    log = write(tmp_path / "log.jsonl", [rec(i, 10, 10) for i in range(5)])
    for args in (
        ["canary", "judge", "--log", str(log), "--base-url", url],
        ["canary", "app", "--base-url", url],
        ["check", "stack", "--base-url", url],
    ):
        result = _invoke_in(tmp_path, *args)
        assert result.exit_code == 2, (args, result.output)
        assert result.output.startswith("Error: base_url=") and len(result.output.strip().splitlines()) == 1


# ---- the parser: one strict reading of every field ---------------------------------------------

WRONG_VALUES = {
    ("shadow", "ok"): ["false", "true", 1, 0, None],
    ("primary", "ok"): ["true", 1],
    ("shadow", "latencyMs"): ["12", True, None, -1.0, [12]],
    ("primary", "latencyMs"): ["NaN", False],
    ("shadow", "count"): [2.5, "5", True, -1],
    ("shadow", "crossUser"): [True, "0", 0.5, ["m1"]],
    (None, "ts"): ["yesterday", "2026-01-01T00:00:00", 1767225600, "2026-13-01T00:00:00+00:00"],
    (None, "requestId"): ["", 17, None],
    (None, "k"): [0, "10", 10.0, True],
    (None, "overlapAtK"): [1.5, "1", True],
    (None, "rbo"): [-0.1, "0.9"],
    (None, "top1Agree"): ["true", 1],
    (None, "dimensionMismatch"): [True, "384", {}],
}
BAD = [(side, key, value) for (side, key), values in WRONG_VALUES.items() for value in values]


@pytest.mark.parametrize(("side", "key", "value"), BAD)
def test_a_field_of_the_wrong_type_is_damage(side, key, value):
    record = rec(1, 10.0, 10.0)
    (record[side] if side else record)[key] = value
    with pytest.raises(InvalidRecord, match=key):
        parse_line(json.dumps(record).encode())


@pytest.mark.parametrize(
    "line",
    [
        b'{"ok": true, "ok": false}',  # a duplicate key
        json.dumps(rec(1, 10.0, 10.0)).replace("10.0", "NaN", 1).encode(),  # NaN is not JSON
        json.dumps(rec(1, 10.0, 10.0)).encode().replace(b'"u"', b'"\xff"'),  # not UTF-8
        b"[1, 2]",
        b"{" * 100_000,  # nested past any parser's depth
    ],
)
def test_lines_that_are_not_strict_json_objects_are_damage(line):
    with pytest.raises(InvalidRecord):
        parse_line(line)


def test_the_primary_may_name_no_backend_only_when_it_failed(tmp_path):
    failed = rec(1, 10.0, 10.0)
    failed["primary"].update(backend=None, ok=False)
    assert parse_line(json.dumps(failed).encode()).primary.backend is None
    answered = rec(2, 10.0, 10.0)
    answered["primary"]["backend"] = None
    with pytest.raises(InvalidRecord, match=r"primary\.backend is null"):
        parse_line(json.dumps(answered).encode())
    # a failed primary without a backend stays with its shadow's pair: no spurious second pair
    records = [rec(i, 10.0, 10.0) for i in range(30)] + [failed]
    assert len(judge_log(write(tmp_path / "log.jsonl", records)).pairs) == 1


def test_a_request_id_reused_with_other_content_is_unusable_and_its_flags_still_count(tmp_path):
    records = [rec(i, 10.0 + i % 3, 10.0 + i % 3) for i in range(200)]
    leak = rec(7, 10.0, 10.0)
    leak["shadow"]["crossUser"] = 1  # the same requestId, now with another user's memory
    log = read_comparison_log(write(tmp_path / "log.jsonl", [*records, leak]))
    assert len(log.records) == 200 and len(log.conflicts) == 1 and log.duplicates == 0
    result = judge_log(tmp_path / "log.jsonl")
    assert result.metric("crossUser").classification == FAIL and result.verdict == NO_GO


def test_the_live_files_last_line_without_newline_is_not_damage(tmp_path):
    path = write(tmp_path / "log.jsonl", [rec(i, 10.0, 10.0) for i in range(10)])
    with path.open("a") as handle:
        handle.write(json.dumps(rec(99, 10.0, 10.0))[:50])  # the service is still writing it
    log = read_comparison_log(path)
    assert log.incomplete_last_line and log.damaged == 0 and len(log.records) == 10


# ---- properties ------------------------------------------------------------------------------


@st.composite
def logs(draw):
    """A log of one pair: n comparisons, a shadow slower by a factor and in a share of its tail,
    some shadow errors."""
    n = draw(st.integers(0, 140))
    seed = draw(st.integers(0, 10_000))
    scale = draw(st.sampled_from([0.8, 1.0, 1.1, 2.0]))
    tail_share = draw(st.sampled_from([0.0, 0.0, 0.1, 0.3]))
    errors = draw(st.integers(0, 2))
    rng = np.random.default_rng(seed)
    base = rng.lognormal(np.log(20), 0.3, n)
    shadow = rng.lognormal(np.log(20), 0.3, n) * scale
    shadow[rng.random(n) < tail_share] *= 30
    records = [rec(i, float(b), float(s)) for i, (b, s) in enumerate(zip(base, shadow, strict=True))]
    for r in records[:errors]:
        r["shadow"].update(ok=False, ids=[], count=0)
    return [json.dumps(r) for r in records]


BAD_INPUT = "bad input"  # not one line of the file is a JSON object: exit 2, never a verdict


def verdict_of(lines: list[str], th: Thresholds = Thresholds()) -> str:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "log.jsonl"
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        try:
            return judge_log(path, th).verdict
        except UsageError as exc:
            assert "not a comparison log" in str(exc)
            return BAD_INPUT


FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TORN = '{"ts": "2026-01-01", "requestId": "x", "shadow": {"ok": fal'
OK_AS_TEXT = json.dumps(rec(5000, 10, 10)).replace("true", '"true"')
DAMAGE = st.lists(st.sampled_from([TORN, "garbage", "[1]", OK_AS_TEXT]), min_size=1, max_size=20)


@FAST
@given(logs())
def test_repeating_every_line_never_changes_the_verdict(lines):
    assert verdict_of([line for line in lines for _ in range(3)]) == verdict_of(lines)


@FAST
@given(logs(), DAMAGE)
def test_repeating_a_damaged_log_never_turns_it_into_go(lines, damage):
    # repeated damaged lines cannot be told from distinct damaged records: they count again, so the
    # share can only grow -- the verdict stays or becomes INCONCLUSIVE, never GO
    before = verdict_of(lines + damage)
    after = verdict_of([line for line in lines + damage for _ in range(2)])
    assert after in (before, INCONCLUSIVE) and (before == GO or after != GO)


@FAST
@given(logs(), DAMAGE, st.randoms(use_true_random=False))
def test_adding_damaged_lines_never_turns_a_verdict_into_go(lines, damage, rnd):
    before = verdict_of(lines)
    mixed = lines + damage
    rnd.shuffle(mixed)
    after = verdict_of(mixed)
    assert after in (before, INCONCLUSIVE, BAD_INPUT)  # a NO-GO stays one; damage only takes a GO away
    assert before == GO or after != GO


@FAST
@given(logs(), st.sampled_from([0.8, 0.9, 0.95, 0.99]))
def test_never_go_below_the_minimum_sample(lines, confidence):
    th = Thresholds(confidence=confidence, min_samples=2)
    minimum = minimum_paired_answers(th)
    small = lines[: max(0, minimum - 1)]
    assert verdict_of(small, th) != GO


@FAST
@given(logs(), logs())
def test_pairs_are_judged_as_if_each_were_alone(first, second):
    other = []
    for line in second:
        record = json.loads(line)
        record["requestId"] += "-q"
        record["shadow"]["backend"] = "qdrant"
        other.append(json.dumps(record))
    with tempfile.TemporaryDirectory() as folder:
        both = write(Path(folder) / "both.jsonl", [json.loads(x) for x in first + other])
        mixed = judge_log(both)
        for pair in mixed.pairs:
            alone = judge_log(both, shadow_backend=pair.shadow)
            assert [m.to_dict() for m in alone.pairs[0].metrics] == [m.to_dict() for m in pair.metrics]
        assert len(mixed.pairs) < 2 or mixed.verdict != GO


def test_the_minimum_sample_at_95_percent():
    th = Thresholds()
    assert stats.smallest_testable_size(th.alpha) == 3  # 3 against 3 reaches p = 1/20
    assert stats.smallest_bounded_size(0.95, th.alpha / 2) == 72  # 0.95 ** 72 <= 0.025
    assert stats.smallest_bounded_size(0.99, th.alpha / 2) == 368
    assert minimum_paired_answers(th) == 72


def test_a_clearly_faster_shadow_passes_however_noisy_the_primary(tmp_path):
    # the rollout rehearsal's shape: a noisy primary, a shadow three times faster: the interval alone
    # rules out any slowdown, whatever the power against the band
    rng = np.random.default_rng(8)
    base = rng.lognormal(np.log(20), 0.9, 80)
    shadow = rng.lognormal(np.log(7), 0.3, 80)
    records = [rec(i, float(b), float(s)) for i, (b, s) in enumerate(zip(base, shadow, strict=True))]
    latency = judge_log(write(tmp_path / "log.jsonl", records)).metric("latencyMs")
    assert latency.detectable > 0.25  # underpowered against the band ...
    assert (
        latency.classification == PASS and "the CI rules out more than 0.0%" in latency.detail
    )  # ... no matter


def test_every_record_the_service_writes_is_a_comparison():
    """The writer's schema and the strict reader agree, for answered, failed and short answers."""
    from memwork.service.shadow import SideResult, compare

    answered = {"ok": True, "memories": [{"id": "m1", "userId": "u1"}, {"id": "m2", "userId": "other"}]}
    sides = [
        SideResult(PRIMARY, 12.5, True, None, answered),
        SideResult(
            "pgvector", 30.0, False, "pgvector resolve failed: expected 384 dimensions, not 768", None
        ),
        SideResult(None, 2000.0, False, "timed out", None),  # a primary that failed before naming a source
        SideResult("pgvector", 0.0, True, None, {"ok": True}),
    ]
    for primary in (sides[0], sides[2]):
        for shadow in (sides[0], sides[1], sides[3]):
            record = compare("req-1", "u1", 5, primary, shadow)
            parsed = parse_line(json.dumps(record, allow_nan=False).encode())
            assert parsed.primary.ok is primary.ok and parsed.shadow.latency_ms == shadow.latency_ms
    mismatch = parse_line(json.dumps(compare("r", "u1", 5, sides[0], sides[1])).encode())
    assert mismatch.dimension_mismatch and not mismatch.shadow.ok
    assert parse_line(json.dumps(compare("r", "u1", 5, sides[0], sides[0])).encode()).shadow.cross_user == 1
