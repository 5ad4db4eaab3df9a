"""The notebooks' data-shaping helpers: parameter checks, word diff, histogram data, trend."""

from __future__ import annotations

import json
import re

import pytest

from memwork.errors import UsageError
from memwork.reports import display
from memwork.reports.params import Parameter, coerce
from memwork.reports.summary import record


def test_checks_raise_usage_errors_naming_parameter_and_value(tmp_path):
    with pytest.raises(UsageError, match=r"threshold=1.2: must be a number from 0 to 1"):
        display.check_unit("threshold", 1.2)
    with pytest.raises(UsageError, match=r"k=0: must be from 1 to 10"):
        display.check_range("k", 0, 1, 10)
    with pytest.raises(UsageError, match=r"strategy='merge_all'"):
        display.check_choice("strategy", "merge_all", ("keep_newer", "combine"))
    with pytest.raises(UsageError, match="no such file"):
        display.check_file("previous_summary", str(tmp_path / "missing.json"))
    display.check_file("previous_summary", "")


def test_word_diff_marks_removed_and_added_words():
    out = display.word_diff_html("the user prefers tea", "the user likes green tea")
    assert "<del" in out and ">prefers</del>" in out and ">likes green</ins>" in out
    assert display.word_diff_html("<b>", "<b>") == "&lt;b&gt;"


def test_histogram_data_counts_every_value():
    data = display.histogram_data([0.1, 0.5, 0.5, 0.95], bins=10)
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


def test_tables_show_whole_readable_values_not_pandas_reprs():
    long_path = "experience/embeddings/vector-normalisation-000928-with-a-long-tail.md"
    table = display.table(
        [
            {"path": long_path, "confidence": float("nan"), "issues": ["no tags", "no links"],
             "supports": {"resolve": True, "write": False}, "n": 30, "score": 0.25, "note": "<b>"},
            {"path": "b", "confidence": None, "issues": [], "supports": {}, "n": 12_345, "score": 1.0,
             "note": "x"},
        ]
    )  # fmt: skip
    page = table._repr_html_()
    assert long_path.replace("/", "/<wbr>").replace("-", "-<wbr>") in page  # whole, breakable at separators
    shown = re.sub(r"<[^>]+>", "", page)  # what the reader sees
    for noise in ("NaN", "None", "...", "[", "{", "'"):
        assert noise not in shown, noise
    assert "&lt;b&gt;" in page  # text is escaped
    assert "no tags, no links" in page and "resolve: yes; write: no" in page and "12,345" in page
    assert "text-align:left" in page and "text-align:right" in page  # text left, numbers right
    assert "<th" in page and ">0<" not in page  # no row index
    assert "first 1 of 2 rows" in display.table(table.frame, limit=1)._repr_html_()
    assert display.table([], empty="no stubs")._repr_html_() == "<p><em>no stubs</em></p>"
    diff = display.table([{"d": "<ins>x</ins>"}], html_columns=("d",))._repr_html_()
    assert "<ins>x</ins>" in diff
    digest = "ab" * 32
    assert digest in display.fields({"parameters_sha256": digest})._repr_html_()  # never truncated
    assert "NaN" not in repr(table) and "None" not in repr(table)


def test_verdict_text_lists_every_reason():
    assert display.verdict_text({"verdict": "PASS", "reasons": []}) == "verdict: PASS"
    text = display.verdict_text({"verdict": "FAIL", "reasons": ["missing: 1", "changed: 2"]})
    assert text.splitlines() == ["verdict: FAIL", "  - missing: 1", "  - changed: 2"]
    assert display.human_bytes(456823) == "456.8 kB" and display.human_bytes(12) == "12 B"
