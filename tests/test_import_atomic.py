"""``store load --apply`` is all or nothing, on real stores of every kind (issue 8 point 4).

The line check refuses everything any store kind would refuse -- so the bad line sits past the first
500-row batch of a 600-line file and the store must be unchanged afterwards -- and a value only the
database itself refuses (a trigger, a constraint) leaves nothing committed: one transaction.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from memwork.cli import main
from memwork.entry import MAX_METADATA_DEPTH, Entry, check_metadata, validate_scope
from memwork.errors import ImportLineError, UsageError
from memwork.identifiers import check_identifier
from memwork.stores import open_store
from memwork.stores.transfer import load_jsonl

LINES = 600
BAD_LINE = 550  # past the first 500-row batch
EMBEDDED_LINES = 5  # the first lines carry 384-dim vectors, so the store's dimension is known


def _record(i: int) -> dict:
    record = {"path": f"n/{i}.md", "content": f"note {i}", "title": f"Note {i}", "metadata": {"i": i}}
    if i < EMBEDDED_LINES:
        record["embedding"] = [0.1] * 384
    return record


def _nested(depth: int) -> dict:
    """Metadata whose objects nest ``depth`` levels (the metadata object itself is level 1)."""
    root: dict = {}
    node = root
    for _ in range(depth - 1):
        node["k"] = {}
        node = node["k"]
    return root


def _collides(suffix: str):
    return lambda r: r.update(path=f"n/10.md{suffix}/child.md")


# name -> (change to the record of line 550 | raw bytes of that line, start of the error after "line 550: ")
BAD_VALUES = {
    "surrogate_title": (lambda r: r.update(title="bad \udc00 title"), "title="),
    "surrogate_content": (lambda r: r.update(content="bad \ud800"), "content="),
    "surrogate_path": (lambda r: r.update(path="bad/\ud800.md"), "path="),
    "surrogate_meta_value": (lambda r: r.update(metadata={"k": "bad \ud800"}), "metadata.k="),
    "surrogate_meta_key": (lambda r: r.update(metadata={"k\udc00": 1}), "metadata key="),
    "nul_content": (lambda r: r.update(content="hello\u0000world"), "content="),
    "nul_title": (lambda r: r.update(title="ti\u0000tle"), "title="),
    "nul_meta_value": (lambda r: r.update(metadata={"k": "v\u0000w"}), "metadata.k="),
    "nul_meta_key": (lambda r: r.update(metadata={"k\u0000": "v"}), "metadata key="),
    "hits_int32": (lambda r: r.update(hits=2**31), "hits=2147483648"),
    "hits_int64": (lambda r: r.update(hits=10**20), "hits="),
    "nan_meta": (lambda r: r.update(metadata={"score": float("nan")}), "metadata.score=nan"),
    "inf_meta": (lambda r: r.update(metadata={"a": [float("inf")]}), "metadata.a[0]=inf"),
    "emb_float32_overflow": (lambda r: r.update(embedding=[1e39] + [0.1] * 383), "embedding="),
    "emb_other_dimension": (lambda r: r.update(embedding=[0.1, 0.2, 0.3]), "embedding='<3 floats>'"),
    "long_component": (lambda r: r.update(path="d/" + "a" * 300 + ".md"), "path="),
    "long_component_utf8": (lambda r: r.update(path="d/" + "é" * 130), "path="),  # 130 chars, 260 bytes
    "deep_meta": (lambda r: r.update(metadata=_nested(MAX_METADATA_DEPTH + 1)), "metadata="),
    "deep_meta_900": (lambda r: r.update(metadata={"a": json.loads("[" * 900 + "]" * 900)}), "metadata="),
    "deep_json": (b'{"path":"d","content":"x","metadata":{"a":' + b"[" * 5000 + b"]" * 5000 + b"}}", "json="),
    "file_below_entry": (_collides(""), "path='n/10.md/child.md': lies below 'n/10.md'"),
    "file_below_sidecar": (_collides(".yml"), "path='n/10.md.yml/child.md': lies below"),
    "invalid_utf8": (b'{"path": "inv.md", "content": "caf\xe9 \xff"}', "content='<byte 0xe9 at byte"),
    "scope_newline": (lambda r: r.update(scope="alice\n"), "scope='alice\\n'"),
}


def _bad_file(tmp_path, bad) -> str:
    lines = [json.dumps(_record(i)).encode() for i in range(LINES)]
    if isinstance(bad, bytes):
        lines[BAD_LINE - 1] = bad
    else:
        record = _record(BAD_LINE - 1)
        bad(record)
        lines[BAD_LINE - 1] = json.dumps(record).encode()
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return str(path)


def _records(spec: str) -> list[dict]:
    with open_store(spec) as store:
        return [e.to_record() for e in store.all_entries()]


@pytest.mark.parametrize("name", list(BAD_VALUES))
def test_a_bad_line_past_the_first_batch_writes_nothing(store_spec, tmp_path, name):
    bad, message = BAD_VALUES[name]
    with open_store(store_spec, create=True) as store:
        store.write("keep.md", "already here", metadata={"kept": True})
    before = _records(store_spec)
    source = _bad_file(tmp_path, bad)
    runner = CliRunner()
    dry = runner.invoke(main, ["store", "load", "--store", store_spec, source])
    applied = runner.invoke(main, ["store", "load", "--store", store_spec, source, "--apply"])
    for result in (dry, applied):
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith(f"Error: line {BAD_LINE}: {message}"), result.stderr
        assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.output
    assert _records(store_spec) == before


@pytest.mark.parametrize("kind", ["filesystem", "sqlite"])
def test_a_bad_file_creates_no_store(tmp_path, kind):
    spec = str(tmp_path / "new") if kind == "filesystem" else f"sqlite:///{tmp_path / 'new.db'}"
    source = _bad_file(tmp_path, BAD_VALUES["nul_content"][0])
    result = CliRunner().invoke(main, ["store", "load", "--store", spec, source, "--apply"])
    assert result.exit_code == 2 and result.stderr.startswith(f"Error: line {BAD_LINE}: content=")
    assert list(tmp_path.glob("new*")) == []


# ---- the database refuses a row the line check cannot know about -----------------------------------
def _refuse_content(spec: str, forbidden: str) -> None:
    """Make the store's own table refuse one content value: a trigger (SQLite), a CHECK otherwise."""
    if spec.startswith("sqlite"):
        ddl = (
            f"CREATE TRIGGER refuse BEFORE INSERT ON agent_memories WHEN NEW.content = '{forbidden}' "
            "BEGIN SELECT RAISE(ABORT, 'refused by trigger'); END"
        )
    else:
        ddl = f"ALTER TABLE agent_memories ADD CONSTRAINT refuse CHECK (content <> '{forbidden}')"
    with open_store(spec, create=True) as store, store.engine.begin() as conn:
        conn.execute(text(ddl))


@pytest.mark.parametrize("kind", ["sqlite", "postgresql", "mysql"])
def test_a_row_the_database_refuses_commits_nothing(tmp_path, request, kind):
    spec = {
        "sqlite": lambda: f"sqlite:///{tmp_path / 'refuse.db'}",
        "postgresql": lambda: request.getfixturevalue("pg_url"),
        "mysql": lambda: request.getfixturevalue("mysql_url"),
    }[kind]()
    _refuse_content(spec, "forbidden")
    with open_store(spec) as store:
        store.write("keep.md", "already here")
    before = _records(spec)
    source = _bad_file(tmp_path, lambda r: r.update(content="forbidden"))
    # `store import`, the command's former name, is still accepted (hidden)
    result = CliRunner().invoke(main, ["store", "import", "--store", spec, source, "--apply"])
    assert result.exit_code == 2, result.output
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.output
    assert result.stderr.startswith(
        f"Error: line {BAD_LINE}: path='n/{BAD_LINE - 1}.md': the store refused it: "
    )
    assert result.stderr.endswith("; nothing was written (one transaction)\n")
    assert _records(spec) == before  # not the first 500 rows: one transaction for the whole file


def test_put_many_is_one_transaction(sqlite_url):
    _refuse_content(sqlite_url, "forbidden")
    with open_store(sqlite_url) as store:
        entries = [Entry(path=f"e/{i}.md", content="forbidden" if i == 1200 else "ok") for i in range(1300)]
        with pytest.raises(Exception, match="refused by trigger"):
            store.put_many(entries)
        assert store.count() == 0


def test_mariadb_refuses_the_first_metadata_level_past_the_limit(mysql_url):
    """Why the limit is 31: MariaDB's JSON_VALID refuses a 32nd level (the other stores take more)."""
    with open_store(mysql_url, create=True) as store:
        store.write("ok.md", "x", metadata=_nested(MAX_METADATA_DEPTH))
        assert check_metadata(store.get("ok.md").metadata)
        with pytest.raises(Exception, match=r"(?i)constraint|check"):
            store.write("deep.md", "x", metadata=_nested(MAX_METADATA_DEPTH + 1))
    with pytest.raises(UsageError, match="too deep"):
        check_metadata(_nested(MAX_METADATA_DEPTH + 1))


# ---- the filesystem store: the whole file is checked against what the store holds ------------------
def _lines(*records: dict) -> list[str]:
    return [json.dumps({"content": "x", **r}) for r in records]


@pytest.mark.parametrize(
    ("existing", "incoming", "problem"),
    [
        ("x.md", "x.md/child.md", "lies below the file 'x.md' already in this store"),
        ("d/e.md", "d", "'d' is a directory already in this store"),
        ("d/e.md", "d/e.md.emb/f.md", "lies below the file 'd/e.md.emb' already in this store"),
    ],
)
def test_filesystem_import_checks_paths_against_the_store_first(tmp_path, existing, incoming, problem):
    store = open_store(str(tmp_path / "fs"), create=True)
    store.write(existing, "old", embedding=[0.5, 0.5])
    lines = _lines(*({"path": f"ok/{i}.md"} for i in range(700)), {"path": incoming})
    with pytest.raises(ImportLineError) as info:
        load_jsonl(store, lines, apply=True)
    assert info.value.line == 701 and problem in str(info.value)
    assert [e.path for e in store.all_entries()] == [existing]


def test_filesystem_dimension_is_the_first_one_seen(tmp_path):
    store = open_store(str(tmp_path / "fs"), create=True)
    two, three = [0.1, 0.2], [0.1, 0.2, 0.3]
    with pytest.raises(ImportLineError) as info:
        load_jsonl(store, _lines({"path": "a.md", "embedding": two}, {"path": "b.md", "embedding": three}))
    assert info.value.line == 2 and "must have 2 dimensions" in str(info.value)
    load_jsonl(store, _lines({"path": "a.md", "embedding": two}), apply=True)
    with pytest.raises(ImportLineError, match="must have 2 dimensions"):  # the store's own, now
        load_jsonl(store, _lines({"path": "c.md", "embedding": three}))


# ---- messages -----------------------------------------------------------------------------------------
def test_json_error_column_is_on_the_line_itself():
    with pytest.raises(ImportLineError) as info:
        load_jsonl(None, [_lines({"path": "a.md"})[0] + "\n", '{"path": "x", "content": \n'])
    assert str(info.value) == (
        'line 2: json=\'{"path": "x", "content":\': not valid JSON (Expecting value at column 26)'
    )


def test_invalid_utf8_names_line_field_and_byte(tmp_path):
    source = tmp_path / "latin1.jsonl"
    source.write_bytes(
        b'{"path": "a.md", "content": "ok"}\n{"path": "b.md", "title": "caf\xe9", "content": "x"}\n'
    )
    with pytest.raises(ImportLineError) as info:
        load_jsonl(None, source)
    assert str(info.value) == "line 2: title='<byte 0xe9 at byte 31 of the line>': not valid UTF-8"


def test_trailing_newline_is_neither_a_scope_nor_an_identifier():
    for bad in ("alice\n", "alice\r\n", "\nalice"):
        with pytest.raises(UsageError, match="scope="):
            validate_scope(bad)
    with pytest.raises(UsageError, match="table="):
        check_identifier("agent_memories\n")
    from memwork.contracts import FLAG_RE, NAME_RE

    assert NAME_RE.match("qdrant\n") is None and FLAG_RE.match("MEMORY_X\n") is None
    assert validate_scope("alice") == "alice" and check_identifier("agent_memories") == "agent_memories"
