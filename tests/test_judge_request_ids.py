"""A repeat of a comparison whose requestId differs only in letter case, invisible characters or its
Unicode form is the same request (second adversarial pass, class 8). Before, 20 comparisons each
shipped four times with the id spelled ``abc``/``ABC``/``Abc``/... counted as 76 and turned the verdict
from INCONCLUSIVE (too few) into GO.
"""

from __future__ import annotations

import random
import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st
from test_canary_judge_strict import rec, write

from memwork.rollout.judge import GO
from memwork.rollout.run import judge_log

SPELLINGS = (
    str.lower,
    str.upper,
    str.title,
    lambda s: " " + s + "\t",
    lambda s: s + "\u200b",
    lambda s: unicodedata.normalize("NFKD", s.replace("e", "\uff45")),  # full-width e
)


def twenty(seed: int = 5):
    rnd = random.Random(seed)
    out = []
    for i in range(20):
        latency = 10 + rnd.random()
        out.append({**rec(i, latency, latency), "requestId": f"Req-{i:03d}-{rnd.getrandbits(32):08x}"})
    return out


def test_case_and_invisible_variants_of_a_request_id_count_once(tmp_path):
    records = twenty()
    alone = judge_log(write(tmp_path / "alone.jsonl", records))
    assert alone.verdict != GO and alone.records == 20
    spelled = [{**r, "requestId": f(r["requestId"])} for r in records for f in SPELLINGS]
    again = judge_log(write(tmp_path / "spelled.jsonl", spelled))
    assert again.records == 20 and again.log["duplicates"] == 20 * (len(SPELLINGS) - 1)
    assert again.verdict == alone.verdict


def test_a_variant_with_other_content_is_a_conflict_not_a_new_comparison(tmp_path):
    records = twenty()
    changed = [{**r, "requestId": r["requestId"].upper(), "primary": {**r["primary"], "latencyMs": 99.0}}
               for r in records]  # fmt: skip
    result = judge_log(write(tmp_path / "conflicts.jsonl", records + changed))
    assert result.records == 20 and result.log["conflicts"] == 20


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(range(len(SPELLINGS))), min_size=1, max_size=6))
def test_property_respelling_never_adds_a_comparison(tmp_path_factory, choices):
    records = twenty(seed=len(choices))[:3]
    spelled = [{**r, "requestId": SPELLINGS[c](r["requestId"])} for r in records for c in choices]
    path = tmp_path_factory.mktemp("spell") / "log.jsonl"
    assert judge_log(write(path, records + spelled)).records == 3
