"""No password given in a ``-p`` URL reaches any artifact of any report, success or failure.

Every file of the run folder (notebook with papermill's injected cell and metadata, HTML, summary.json,
manifest.json, side files), index.html and the ``--json`` output are searched for the password. The
MariaDB source needs its real password, so a passing run also proves the kernel received it.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import nbformat
import pytest
from click.testing import CliRunner

from memwork.cli import main
from memwork.samples.entries import generate_entries
from memwork.samples.migration import build_migration
from memwork.stores import open_store

PASSWORD = "S3cretPW"
UNREACHABLE_PG = f"postgresql://u:{PASSWORD}@127.0.0.1:5/x"


@pytest.fixture
def mysql_pw_url(mysql_url):
    """The test database through a MariaDB user whose password is PASSWORD (wrong password: refused)."""
    import pymysql

    database = mysql_url.rsplit("/", 1)[1]
    user = f"pw_{uuid.uuid4().hex[:8]}"
    conn = pymysql.connect(host="127.0.0.1", port=3306, user="root", password="", autocommit=True)
    with conn.cursor() as cur:
        cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{PASSWORD}'")
        cur.execute(f"GRANT ALL ON `{database}`.* TO '{user}'@'%'")
    yield f"mysql://{user}:{PASSWORD}@127.0.0.1:3306/{database}"
    with conn.cursor() as cur:
        cur.execute(f"DROP USER '{user}'@'%'")
    conn.close()


@pytest.fixture
def mysql_store(mysql_pw_url):
    with open_store(mysql_pw_url, create=True) as store:
        store.put_many(generate_entries(60, scopes=("alice", "bob"), seed=3))
    return mysql_pw_url


@pytest.fixture
def migration(pg_url, mysql_url, mysql_pw_url):
    built = build_migration(mysql_url, pg_url, n_users=4, items_per_user=10, dimensions=16, seed=4)
    return built, mysql_pw_url


def run_cli(out: Path, name: str, params: dict[str, object]) -> tuple[int, str, dict]:
    """``memwork report NAME -p ... --json --out OUT``: (exit code, all output, the JSON printed)."""
    args = ["report", name, "--out", str(out), "--json"]
    for key, value in params.items():
        args += ["-p", key, str(value)]
    result = CliRunner().invoke(main, args)
    start = result.stdout.find("{")
    payload = json.loads(result.stdout[start:]) if start >= 0 else {}
    return result.exit_code, result.output, payload


def assert_no_secret(out: Path, output: str) -> list[str]:
    """The password is nowhere: not in the output, not in any file under ``out``; return the files."""
    assert PASSWORD not in output
    files = [p for p in out.rglob("*") if p.is_file()]
    leaks = [str(p) for p in files if PASSWORD.encode() in p.read_bytes()]
    assert leaks == []
    names = {p.name for p in files}
    assert {"index.html", "summary.json", "manifest.json"} <= names
    assert any(n.endswith(".ipynb") for n in names) and any(n.endswith(".html") for n in names)
    return [str(p) for p in files]


def assert_redacted_copy_injected(out: Path, name: str, key: str) -> None:
    """papermill's injected cell and metadata hold the redacted URL (user kept, password ***)."""
    notebook = next(out.rglob(f"{name}.ipynb"))
    nb = nbformat.read(str(notebook), as_version=4)
    shown = nb.metadata.papermill.parameters[key]
    assert ":***@" in shown
    injected = next(c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", []))
    assert f'{key} = "{shown}"' in injected.source
    assert nb.metadata.papermill.output_path == str(notebook)  # no handler prefix left


def test_health_report_with_a_password_in_the_store_url(tmp_path, mysql_store):
    ok_dir, fail_dir, error_dir = tmp_path / "ok", tmp_path / "fail", tmp_path / "error"
    code, output, payload = run_cli(ok_dir, "health_report", {"store": mysql_store})
    assert code == 0 and payload["verdict"] == "PASS", output  # the kernel had the real password
    assert payload["summary"]["store"] == mysql_store.replace(PASSWORD, "***")
    assert_no_secret(ok_dir, output)
    assert_redacted_copy_injected(ok_dir, "health_report", "store")

    code, output, payload = run_cli(fail_dir, "health_report", {"store": mysql_store, "min_score": 100})
    assert code == 1 and payload["verdict"] == "FAIL", output
    assert_no_secret(fail_dir, output)

    code, output, _ = run_cli(error_dir, "health_report", {"store": UNREACHABLE_PG})
    assert code in (1, 2) and "u:***@127.0.0.1:5/x" in output, output
    assert_no_secret(error_dir, output)


def test_duplicate_review_with_a_password_in_the_store_url(tmp_path, mysql_store):
    code, output, payload = run_cli(tmp_path / "ok", "duplicate_review", {"store": mysql_store})
    assert code == 0 and payload["verdict"] == "INFO", output
    files = assert_no_secret(tmp_path / "ok", output)
    assert any(f.endswith(".csv") for f in files)  # the review file too
    code, output, _ = run_cli(tmp_path / "error", "duplicate_review", {"store": UNREACHABLE_PG})
    assert code in (1, 2), output
    assert_no_secret(tmp_path / "error", output)


def test_backfill_verification_with_passwords_in_both_urls(tmp_path, migration):
    built, source_url = migration
    params = {"source_url": source_url, "pgvector_url": built.dest_url, "sample_size": 10, "k": 5}
    code, output, payload = run_cli(tmp_path / "ok", "backfill_verification", params)
    assert code == 0 and payload["verdict"] == "PASS", output
    assert_no_secret(tmp_path / "ok", output)
    assert_redacted_copy_injected(tmp_path / "ok", "backfill_verification", "source_url")

    bad = {**params, "pgvector_url": UNREACHABLE_PG}
    code, output, _ = run_cli(tmp_path / "error", "backfill_verification", bad)
    assert code in (1, 2), output
    assert_no_secret(tmp_path / "error", output)


def test_canary_go_and_unreachable_target_no_go_without_the_password(tmp_path, migration):
    built, legacy_url = migration
    params = {"legacy_url": legacy_url, "pgvector_url": built.dest_url, "sample_size": 5,
              "waive": "health_summary: test data; verification_summary: test data; "
                        "leak_probes: test data"}  # fmt: skip
    code, output, payload = run_cli(tmp_path / "go", "canary_signoff", params)
    assert code == 0 and payload["verdict"] == "GO", output
    assert_no_secret(tmp_path / "go", output)
    assert_redacted_copy_injected(tmp_path / "go", "canary_signoff", "legacy_url")

    # an unreachable target is a NO-GO with its reason (exit 1), not a broken cell (exit 2)
    code, output, payload = run_cli(
        tmp_path / "no-go", "canary_signoff", {**params, "pgvector_url": UNREACHABLE_PG}
    )
    assert code == 1 and payload["verdict"] == "NO-GO" and payload["error"] is None, output
    reasons = payload["summary"]["reasons"]
    assert any(r.startswith("target reachable: ") and "unreachable" in r for r in reasons), reasons
    assert any("u:***@127.0.0.1:5/x" in r for r in reasons)
    assert_no_secret(tmp_path / "no-go", output)


def _echo_notebook(path: Path, fail: bool) -> str:
    """A report whose kernel prints the real URL (and fails with it): the worst a notebook can do."""
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('url: str = ""  # a database URL')
    params.metadata["tags"] = ["parameters"]
    body = (
        "from memwork.reports import real_value, record\n\n"
        'url = real_value("url", url)\n'
        "print('connecting to', url, 'with', url.split(':')[2].split('@')[0])\n"
        'record({"verdict": "PASS", "url": url, "reasons": []})\n'
    )
    if fail:
        body += "raise ValueError(f'cannot use {url}')\n"
    nb.cells = [params, nbformat.v4.new_code_cell(body)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(path))
    return str(path)


@pytest.mark.parametrize("fail", [False, True])
def test_what_the_kernel_prints_is_scrubbed_before_it_is_written(tmp_path, fail):
    notebook = _echo_notebook(tmp_path / "echo.ipynb", fail)
    out = tmp_path / "reports"
    url = f"postgresql://u:{PASSWORD}#1@db:5432/x"
    code, output, payload = run_cli(out, notebook, {"url": url})
    assert code == (1 if fail else 0), output  # a broken cell is exit 1: not bad input
    assert_no_secret(out, output)
    nb = nbformat.read(str(next(out.rglob("echo.ipynb"))), as_version=4)
    printed = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    assert "connecting to postgresql://u:***@db:5432/x with ***" in printed  # the kernel had the real one
    summary = json.loads(next(out.rglob("summary.json")).read_text())
    assert summary.get("url", "postgresql://u:***@db:5432/x") == "postgresql://u:***@db:5432/x"
    if fail:
        assert "cannot use postgresql://u:***@db:5432/x" in payload["error"]


def test_a_secret_inside_the_source_settings_reaches_no_artifact(tmp_path, migration):
    """``settings`` is a ``VAR=VALUE`` list: a secret-named variable's value (an API key) is hidden in
    every artifact, run or refused, though the parameter's own name is not a secret's."""
    built, source_url = migration
    params = {"source_url": source_url, "pgvector_url": built.dest_url, "sample_size": 10, "k": 5}
    given = {**params, "settings": f"MEMORY_QDRANT_API_KEY={PASSWORD}"}
    code, output, payload = run_cli(tmp_path / "ok", "backfill_verification", given)
    assert code == 0 and payload["verdict"] == "PASS", output
    assert_no_secret(tmp_path / "ok", output)
    refused = {**params, "settings": f"MEMORY_QDRANT_API_KEY={PASSWORD}; not an assignment"}
    code, output, _ = run_cli(tmp_path / "bad", "backfill_verification", refused)
    assert code == 2 and "settings=" in output, output
    assert PASSWORD not in output
    assert not [
        p for p in (tmp_path / "bad").rglob("*") if p.is_file() and PASSWORD.encode() in p.read_bytes()
    ]
