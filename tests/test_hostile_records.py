"""Hostile source data that needs no server (issue 15 points 6 and 7: F-7, F-8, F-9, F-19).

One record's value -- a timestamp at the end of the range, metadata nested thousands deep or not a
mapping, lone surrogates, NUL, a vector of NaN or beyond float32, a Redis position of ``²`` -- is that
record's problem: converted or quarantined with a reason naming the field, never an exception that
ends the run. A source whose cursor returns to one already read stops with an error naming both.
``--json`` and text output never fail on a lone surrogate.
"""

from __future__ import annotations

import json
import math
import sys
import textwrap
from datetime import UTC, datetime, timedelta, timezone

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from import_harness import ListSource

from memwork.backends.redis_streams import entry_record
from memwork.cli import main
from memwork.cli.options import json_text
from memwork.contracts import Page, SourceRecord
from memwork.errors import BackendError
from memwork.migrate.quarantine import Reject, precheck
from memwork.migrate.rows import (
    MAX_METADATA_DEPTH,
    SOURCE_MARKER,
    convert_page,
    convert_record,
    kept_vectors,
)
from memwork.migrate.run import ImportOptions, run_import
from memwork.migrate.source import iter_pages

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
KEY = "list:hostile"
FIELDS = {
    "id",
    "user_id",
    "content",
    "type",
    "session_id",
    "message_id",
    "metadata",
    "agent_id",
    "created_at",
    "updated_at",
    "source_session_id",
    "source_message_id",
    "record",
    "source",
}


def nested(depth: int) -> dict:
    top: dict = {}
    cur = top
    for _ in range(depth):
        cur["a"] = {}
        cur = cur["a"]
    return top


def rec(i: int, **kw) -> SourceRecord:
    base = dict(
        id=f"h-{i:04d}",
        user_id=f"user-{i % 3}",
        content=f"memory {i}",
        created_at=NOW + timedelta(seconds=i),
        vector=[0.5 + (i + k) % 3 for k in range(4)],
        model="m-4",
    )
    base.update(kw)
    return SourceRecord(**base)


# ---- the reproductions of F-8: each one record, quarantined with a reason naming its field ---------

PLUS5, MINUS5 = timezone(timedelta(hours=5)), timezone(timedelta(hours=-5))
cyclic: dict = {}
cyclic["self"] = cyclic

HOSTILE = {
    "year 1 at +05:00": (dict(created_at=datetime(1, 1, 1, tzinfo=PLUS5)), "created_at: 0001-01-01"),
    "year 9999 at -05:00": (
        dict(updated_at=datetime(9999, 12, 31, 23, 30, tzinfo=MINUS5)),
        "updated_at: 9999-12-31T23:30:00-05:00 is outside",
    ),
    "metadata 5,000 deep": (
        dict(metadata=nested(5000)),
        f"metadata: nested deeper than {MAX_METADATA_DEPTH}",
    ),
    "metadata that holds itself": (dict(metadata=cyclic), "metadata: nested deeper than"),
    "metadata a list": (dict(metadata=[1, 2, 3]), "metadata: a list, not a mapping"),
    "metadata NaN": (dict(metadata={"x": math.nan}), "metadata: NaN or infinity is not JSON"),
    "metadata tuple key": (dict(metadata={(1, 2): "v"}), "metadata: TypeError: keys must be"),
    "a timestamp that is text": (dict(created_at="2025-01-01"), "created_at: a str, not a datetime"),
    "content a dict": (dict(content={"text": "x"}), "content: a dict, not text"),
    "lone surrogate in user id": (
        dict(user_id="lone \udc00 surrogate"),
        "user_id: invalid text (lone surrogate",
    ),
    "NUL in content": (dict(content="nul \x00 in"), "content: NUL byte at offset 4"),
    "NUL in a metadata key": (dict(metadata={"k\x00": "v"}), "metadata: a NUL character"),
    "NUL in a metadata value": (dict(metadata={"k": ["v\x00"]}), "metadata: a NUL character"),
    "flagged by the source": (dict(problem="position: '²' is not a whole number"), "source: position: '²'"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_one_hostile_record_is_quarantined_with_a_reason_naming_its_field(case):
    """F-8: OverflowError, RecursionError or TypeError from one record ended the whole import."""
    values, reason = HOSTILE[case]
    page = [rec(0), rec(1, **values), rec(2)]
    pairs, rejects = convert_page(page, KEY, NOW)
    assert [row["id"] for row, _ in pairs] == ["h-0000", "h-0002"]
    assert [r.id for r in rejects] == ["h-0001"]
    assert rejects[0].reason.startswith(reason), rejects[0].reason


def test_a_page_element_that_is_not_a_record_is_quarantined_not_fatal():
    pairs, rejects = convert_page([rec(0), {"id": "x", "content": "a dict"}], KEY, NOW)  # type: ignore[list-item]
    assert len(pairs) == 1 and rejects == [Reject("(no id)", "record: a dict, not a SourceRecord", "")]


def test_the_last_copy_of_an_id_wins_even_when_it_cannot_be_written():
    pairs, rejects = convert_page([rec(1), rec(1, metadata=[1])], KEY, NOW)
    assert pairs == [] and [r.id for r in rejects] == ["h-0001"]


def test_a_nested_list_vector_is_named_as_such():
    """The low finding: a nested list's reason read '8 dimensions, ... is vector(8)'."""
    pairs, _ = convert_page([rec(0, vector=[[0.1]] * 4)], KEY, NOW)
    rows = [row for row, _ in pairs]
    _, _, rejects = kept_vectors(rows, {r["id"]: rec for r, rec in pairs}, 4, "list", "t")
    assert rejects[0].reason == "vector: not a flat list of numbers (shape (4, 1))"


@pytest.mark.parametrize(
    ("vector", "reason"),
    [
        ([math.nan] * 4, "non-finite"),
        ([1e39] * 4, "beyond float32"),
        ([10**400] * 4, "not a list of numbers"),
        ("abcd", "a str, not a list of numbers"),
        ([0.1] * 5, "5 dimensions, t.embedding is vector(4)"),
        ({"a": 1}, "a dict, not a list of numbers"),
    ],
)
def test_an_odd_source_vector_is_quarantined(vector, reason):
    pairs, _ = convert_page([rec(0, vector=vector)], KEY, NOW)
    _, _, rejects = kept_vectors([pairs[0][0]], {"h-0000": pairs[0][1]}, 4, "list", "t")
    assert reason in rejects[0].reason


# ---- the property: conversion is total ------------------------------------------------------------

HOSTILE_CHARS = ["\ud800", "\udfff", "\x00", "²", "①", "e\u0301", "\n", "\ufffe", "\U0001f600", " "]
hostile_text = st.one_of(
    st.text(max_size=12),
    st.lists(st.one_of(st.sampled_from(HOSTILE_CHARS), st.characters()), max_size=8).map("".join),
)
offsets = st.integers(-23 * 60 - 59, 23 * 60 + 59).map(lambda m: timezone(timedelta(minutes=m)))
edge_moments = st.one_of(
    st.datetimes(timezones=st.none() | offsets),
    st.sampled_from([datetime.min, datetime.max]).flatmap(
        lambda d: offsets.map(lambda tz, d=d: d.replace(tzinfo=tz))
    ),
)
json_leaves = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), hostile_text, st.binary(max_size=4), st.dates()
)
json_like = st.recursive(
    json_leaves,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.one_of(hostile_text, st.integers(), st.tuples(st.integers())), inner, max_size=3)
    ),
    max_leaves=12,
)
odd_scalars = st.one_of(
    st.none(), st.integers(), st.floats(), st.binary(max_size=6), st.lists(st.integers(), max_size=2)
)
records = st.builds(
    SourceRecord,
    id=st.one_of(hostile_text, odd_scalars),
    user_id=st.one_of(hostile_text, odd_scalars),
    content=st.one_of(hostile_text, odd_scalars),
    type=st.one_of(hostile_text, st.none(), st.integers()),
    metadata=st.one_of(
        st.dictionaries(hostile_text, json_like, max_size=4),
        st.integers(0, 3 * MAX_METADATA_DEPTH).map(nested),
        json_like,
    ),
    created_at=st.one_of(st.none(), edge_moments, hostile_text, st.dates()),
    updated_at=st.one_of(st.none(), edge_moments),
    session_id=st.one_of(st.none(), hostile_text, st.integers()),
    message_id=st.one_of(st.none(), hostile_text),
    agent_id=st.one_of(
        st.none(), hostile_text, st.dictionaries(st.text(max_size=2), st.integers(), max_size=1)
    ),
    vector=st.one_of(
        st.none(),
        st.lists(st.floats(width=64), max_size=5),
        st.lists(st.lists(st.floats(), max_size=2), max_size=3),
        hostile_text,
        st.lists(st.integers(), max_size=4),
    ),
    model=st.one_of(st.none(), hostile_text, st.integers()),
    problem=st.one_of(st.none(), st.none(), hostile_text),
)


def _assert_writable(row: dict) -> None:
    """What the writer needs of a row: text PostgreSQL can hold, JSON metadata, ISO timestamps."""
    for name in ("id", "user_id", "content", "type", "metadata", "created_at", "updated_at"):
        assert isinstance(row[name], str), name
    for name in ("id", "user_id", "content", "type", "source_session_id", "source_message_id", "metadata"):
        value = row[name]
        if value is not None:
            assert "\x00" not in value, name
            value.encode("utf-8")  # no lone surrogate: PostgreSQL text takes it
    assert row["id"].strip() and row["user_id"].strip()
    metadata = json.loads(row["metadata"])
    assert isinstance(metadata, dict) and metadata[SOURCE_MARKER] == KEY
    assert not _holds_nul(metadata)  # jsonb refuses \u0000
    for stamp in ("created_at", "updated_at"):
        moment = datetime.fromisoformat(row[stamp])
        assert moment.tzinfo is None and 1 <= moment.year <= 9999


def _holds_nul(value: object) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(k) or _holds_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_nul(v) for v in value)
    return False


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record=records)
def test_converting_any_record_gives_a_writable_row_or_a_reject_naming_a_field(record):
    """The class behind F-8: conversion (and the checks before any I/O) never raises."""
    pairs, rejects = convert_page([record], KEY, NOW)
    assert len(pairs) + len(rejects) == 1
    if pairs:
        row, kept = pairs[0]
        assert kept is record
        _assert_writable(row)
        _, vectors, odd = kept_vectors([row], {row["id"]: record}, 4, "list", "t")
        assert len(vectors) + len(odd) == 1
        assert not odd or odd[0].reason.startswith("vector: ")
    else:
        reason = rejects[0].reason
        assert reason.split(":", 1)[0] in FIELDS, reason
        reason.encode("utf-8")
        rejects[0].id.encode("utf-8")
        assert "\x00" not in reason and "\x00" not in rejects[0].id and len(reason) <= 300


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(page=st.lists(records, max_size=6))
def test_a_page_of_hostile_records_is_converted_record_by_record(page):
    pairs, rejects = convert_page(page, KEY, NOW)
    assert len(pairs) + len(rejects) <= len(page)
    for row, _ in pairs:
        _assert_writable(row)
    assert len({row["id"] for row, _ in pairs}) == len(pairs)  # one row per id: an upsert per key
    written, more = precheck([row for row, _ in pairs])
    assert more == [] and len(written) == len(pairs)  # nothing left for PostgreSQL to refuse as text


# ---- the dry run previews exactly what the apply quarantines ---------------------------------------


def _hostile_page() -> list[SourceRecord]:
    page = [rec(i) for i in range(12)]
    for k, case in enumerate(HOSTILE):
        page.append(rec(100 + k, **HOSTILE[case][0]))
    page.append(rec(200, vector=[math.inf] * 4))
    return page


def test_the_dry_run_reports_every_record_the_apply_would_quarantine():
    """F-8: the dry run was green while --apply ended on the first hostile record."""
    report = run_import(ImportOptions(source=ListSource(_hostile_page()), page_size=5))
    assert report.rows_read == 12 + len(HOSTILE) + 1
    assert report.rows_quarantined == len(HOSTILE) + 1
    reasons = {q["id"]: q["reason"] for q in report.quarantined}
    assert set(reasons) == {f"h-{100 + k:04d}" for k in range(len(HOSTILE))} | {"h-0200"}
    assert reasons["h-0200"].startswith("vector: non-finite")
    for k, case in enumerate(HOSTILE):
        assert reasons[f"h-{100 + k:04d}"].startswith(HOSTILE[case][1])
    json.loads(json_text(report.to_dict()))


# ---- a looping cursor (F-7) ------------------------------------------------------------------------


class LoopingSource(ListSource):
    """``back_to``: the cursor the page read from ``at`` points back to (a cycle or a step back)."""

    def __init__(self, n: int, at: str, back_to: str) -> None:
        super().__init__([rec(i) for i in range(n)], key="list:looping")
        self.at, self.back_to = at, back_to

    def read_page(self, cursor: str | None, size: int) -> Page:
        page = super().read_page(cursor, size)
        if len(self.reads) > 50:
            raise AssertionError("the importer keeps following the loop")
        return Page(page.records, self.back_to) if cursor == self.at else page


@pytest.mark.parametrize(
    ("start", "at", "back_to", "reads", "named"),
    [
        ("0", "20", "0", 3, "looped back to cursor '0'"),  # A -> B -> C -> A
        (None, "20", "0", 4, "looped back to cursor '10'"),  # "0" is new, the page after it is not
        (None, "20", "10", 3, "looped back to cursor '10'"),  # a step backwards
        (None, "10", "10", 2, "did not advance past cursor '10'"),  # A -> A
    ],
)
def test_a_cursor_already_read_in_this_run_stops_the_listing_naming_source_and_cursor(
    start, at, back_to, reads, named
):
    """F-7: A -> B -> A was followed until the source itself gave up (500 pages)."""
    source = LoopingSource(40, at=at, back_to=back_to)
    with pytest.raises(BackendError) as err:
        for _ in iter_pages(source, start, 10):
            pass
    message = str(err.value)
    assert message.startswith("list (list:looping): ") and named in message
    assert len(source.reads) == reads  # stopped at once, not after hundreds of pages


def test_the_loop_is_found_before_the_page_that_points_back_is_handed_on():
    source = LoopingSource(40, at="20", back_to="0")
    handed = []
    with pytest.raises(BackendError, match="looped back to cursor '0'"):
        for _page, read_from in iter_pages(source, "0", 10):
            handed.append(read_from)
    assert handed == ["0", "10"]  # the page from "20" (whose next cursor loops) is never imported


def test_a_long_or_secret_cursor_is_shown_cut_and_redacted():
    secret = "https://u:hunter2@api.example/page?token=abc&x=" + "y" * 500

    class Stuck(ListSource):
        def read_page(self, cursor, size):
            return Page([rec(0)], secret)

    with pytest.raises(BackendError) as err:
        for _ in iter_pages(Stuck([]), secret, 5):
            pass
    message = str(err.value)
    assert "hunter2" not in message and "abc" not in message and len(message) < 400
    assert "did not advance" in message


def test_the_dry_run_stops_on_a_looping_cursor_too():
    with pytest.raises(BackendError, match="looped back"):
        run_import(ImportOptions(source=LoopingSource(40, at="20", back_to="10"), page_size=10))


# ---- a Redis stream entry (F-8) --------------------------------------------------------------------


@pytest.mark.parametrize("position", ["²", "①", "-1", "abc", "1.5", "٣"])
def test_a_redis_position_that_is_not_a_whole_number_marks_the_entry_not_the_run(position):
    """'²'.isdigit() is True but int('²') raises: the whole import ended (and every --resume)."""
    record = entry_record("1700000000000-0", {"userId": "u1", "content": "hi", "position": position}, "s")
    assert record is not None and record.problem is not None and "position" not in record.metadata
    reject = convert_record(record, KEY, NOW)
    assert isinstance(reject, Reject) and reject.reason.startswith("source: position: ")


def test_a_redis_position_of_ascii_digits_is_kept_and_an_id_beyond_the_calendar_is_no_error():
    record = entry_record("99999999999999999-0", {"userId": "u1", "content": "hi", "position": "7"}, "s")
    assert record is not None and record.problem is None and record.metadata["position"] == 7
    assert record.created_at is None  # no ts, an entry id beyond year 9999: the run's start time
    assert isinstance(convert_record(record, KEY, NOW), dict)


# ---- output that never fails on a lone surrogate (F-9) ---------------------------------------------


@given(
    value=st.recursive(
        hostile_text | st.integers(), lambda inner: st.dictionaries(hostile_text, inner, max_size=3)
    )
)
def test_json_output_is_valid_json_for_any_string_and_reads_back_the_same(value):
    text = json_text({"value": value})
    text.encode("utf-8")  # writable to any UTF-8 stream
    # what Python's own ASCII-only JSON reads back: a lone surrogate itself; two adjacent surrogates
    # of a pair, as JSON defines it, the one character they encode
    assert json.loads(text) == json.loads(json.dumps({"value": value}))


SURROGATE_SOURCE = textwrap.dedent(
    """
    from datetime import UTC, datetime
    from memwork.contracts import Page, SourceRecord

    class Src:
        name = "surrogates"
        key = "surrogates:test"

        def read_page(self, cursor, size):
            recs = [SourceRecord(id=f"s{i}", user_id="erin\\udfff" if i == 0 else "bob",
                                 content="hello \\ud800 there" if i == 0 else "fine",
                                 created_at=datetime(2025, 1, 1, tzinfo=UTC), vector=[0.5] * 4)
                    for i in range(4)]
            return Page(recs, None)

        def close(self):
            pass

    def source_from_env(env):
        return Src()
    """
)


@pytest.fixture
def surrogate_source(tmp_path):
    path = tmp_path / "surrogate_source.py"
    path.write_text(SURROGATE_SOURCE, encoding="utf-8")
    return f"module:{path}"


def test_import_json_with_a_lone_surrogate_in_the_sample_exits_0_with_valid_json(surrogate_source):
    """F-9: UnicodeEncodeError, exit 1 -- after --apply had committed every row."""
    result = CliRunner().invoke(main, ["import", "--from", surrogate_source, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["users"] == {"erin\udfff": 1, "bob": 3} and data["rowsQuarantined"] == 1
    assert data["quarantined"][0]["reason"].startswith("user_id: invalid text (lone surrogate")


def test_import_text_output_with_a_lone_surrogate_exits_0_in_a_real_process(surrogate_source, tmp_path):
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "memwork", "import", "--from", surrogate_source],
        capture_output=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode("utf-8")  # valid UTF-8: the surrogate is escaped
    assert "erin\\udfff" in out and "quarantined: 1" in out


# ---- the embedder in a dry run (F-16) ---------------------------------------------------------------


def test_a_dry_run_with_an_unknown_embedder_is_bad_input(surrogate_source):
    """F-16: `import --embedder nonsense:3` exited 0 in a dry run: the embedder was never loaded."""
    result = CliRunner().invoke(main, ["import", "--from", surrogate_source, "--embedder", "nonsense:3"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "Error: embedder='nonsense:3': unknown embedder; known: none, hash[:DIM], minilm[:st], module:PATH"
    ]


def test_a_dry_run_with_an_embedder_broken_for_everything_is_bad_input(surrogate_source, tmp_path):
    module = tmp_path / "dead_embedder.py"
    module.write_text("DIMENSIONS = 4\ndef embed_memory(m):\n    raise ConnectionError('service down')\n")
    result = CliRunner().invoke(
        main, ["import", "--from", surrogate_source, "--vectors", "reembed", "--embedder", f"module:{module}"]
    )
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
    assert "probe text: ConnectionError: service down" in result.output


# ---- a backfill keyset that does not advance (the MySQL-side class of F-7) --------------------------


def test_a_keyset_that_does_not_advance_stops_the_backfill_instead_of_reading_a_page_forever(sqlite_url):
    """A timestamp stored in another ISO spelling ('T' for ' ') compares after the cursor built from
    it, so the same row came back on every page: the reader looped forever."""
    import sqlite3

    from memwork.migrate.legacy_mysql import LegacyMySQLSource
    from memwork.migrate.source import iter_pages
    from memwork.samples.legacy import ITEMS, generate_legacy_items, load_legacy_rows

    load_legacy_rows(sqlite_url, ITEMS, generate_legacy_items(1, 5, seed=3, active_only=True))
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as raw:
        first = raw.execute(f"SELECT id FROM {ITEMS} ORDER BY updated_at, id LIMIT 1").fetchone()[0]
        raw.execute(f"UPDATE {ITEMS} SET updated_at = replace(updated_at, ' ', 'T') WHERE id = ?", (first,))
    pages = 0
    source = LegacyMySQLSource(sqlite_url)
    with pytest.raises(BackendError) as err:
        for _ in iter_pages(source, None, 1, rows=True):
            pages += 1
            assert pages < 20, "the keyset keeps returning the same row"
    assert pages == 1 and "the keyset did not advance past" in str(err.value) and first in str(err.value)
