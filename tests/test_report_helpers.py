"""The notebooks' data-shaping helpers: parameter checks, word diff, histogram data, trend."""

from __future__ import annotations

import json

import pytest

from memwork import health as mh
from memwork.reports.params import Parameter, coerce
from memwork.reports.summary import record


def test_checks_raise_value_errors_naming_parameter_and_value(tmp_path):
    with pytest.raises(ValueError, match=r"threshold=1.2: must be a number from 0 to 1"):
        mh.check_unit("threshold", 1.2)
    with pytest.raises(ValueError, match=r"k=0: must be from 1 to 10"):
        mh.check_range("k", 0, 1, 10)
    with pytest.raises(ValueError, match=r"strategy='merge_all'"):
        mh.check_choice("strategy", "merge_all", ("keep_newer", "combine"))
    with pytest.raises(ValueError, match="no such file"):
        mh.check_file("previous_summary", str(tmp_path / "missing.json"))
    mh.check_file("previous_summary", "")


def test_word_diff_marks_removed_and_added_words():
    out = mh.word_diff_html("the user prefers tea", "the user likes green tea")
    assert "<del" in out and ">prefers</del>" in out and ">likes green</ins>" in out
    assert mh.word_diff_html("<b>", "<b>") == "&lt;b&gt;"


def test_histogram_data_counts_every_value():
    data = mh.histogram_data([0.1, 0.5, 0.5, 0.95], bins=10)
    assert sum(data["counts"]) == 4 and len(data["edges"]) == 11


def test_record_is_json_safe_and_validates_the_verdict(tmp_path, monkeypatch):
    import numpy as np

    monkeypatch.setenv("MEMWORK_REPORT_DIR", str(tmp_path))
    out = record({"verdict": "pass", "x": np.float32(0.5), "nan": float("nan"), "n": np.int64(3)})
    assert out == {"verdict": "PASS", "x": 0.5, "nan": None, "n": 3}
    assert json.loads((tmp_path / "summary.json").read_text())["verdict"] == "PASS"
    with pytest.raises(ValueError, match="verdict"):
        record({"verdict": "MAYBE"})


def test_coercion_from_command_line_strings():
    assert coerce(Parameter("b", "bool", False), "yes") is True
    assert coerce(Parameter("o", "str | None", None), "none") is None
    assert coerce(Parameter("l", "list[str]", []), "a, b") == ["a", "b"]
    assert coerce(Parameter("f", "float", 0.0), "0.25") == 0.25
