"""Redaction that cannot be fooled: passwords with unencoded ``#``, ``/``, ``?`` or ``@``, query secrets,
free text, CLI error lines and ``check config --format shell|json``."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.engine.url import make_url

from memwork.cli import main
from memwork.redaction import _URL_IN_TEXT_RE, redact_text, redact_url, url_secrets
from memwork.reports.secrets import Scrubber, real_value, split_secrets

# (url, what must remain visible)
TRICKY = [
    ("postgresql://u:S3cretPW#x@host/db", "postgresql://u:***@host/db"),
    ("mysql://root:S3cretPW#1@127.0.0.1/db", "mysql://root:***@127.0.0.1/db"),
    ("postgresql://u:S3c/ret?x@h/db", "postgresql://u:***@h/db"),
    ("postgresql://u:S3cret@PW@host/db", "postgresql://u:***@host/db"),
    (
        "postgresql://u:S3cretPW@[::1]:5432/db?sslmode=require",
        "postgresql://u:***@[::1]:5432/db?sslmode=require",
    ),
    ("postgresql://postgres:S3cretPW@/db?host=/tmp/pg", "postgresql://postgres:***@/db?host=/tmp/pg"),
    ("postgresql://u:S3cret%40PW@host:5/db", "postgresql://u:***@host:5/db"),
    ("postgresql://u@h/db?password=S3cretPW&x=1", "postgresql://u@h/db?password=***&x=1"),
    (
        "postgresql://u@h/db?sslmode=verify-full&sslpassword=S3cretPW",
        "postgresql://u@h/db?sslmode=verify-full&sslpassword=***",
    ),
]


@pytest.mark.parametrize(("url", "shown"), TRICKY)
def test_redact_url_hides_what_sqlalchemy_takes_for_the_password(url, shown):
    assert redact_url(url) == shown
    parsed = make_url(url)
    for secret in filter(
        None, [parsed.password, parsed.query.get("password"), parsed.query.get("sslpassword")]
    ):
        assert str(secret) not in redact_url(url)
    assert "S3cret" not in redact_url(url)


def test_urls_without_a_password_are_shown_exactly_as_given():
    for url in (
        "sqlite:////tmp/a@b.db",
        "sqlite:////tmp/a:b@c.db",  # a path, not userinfo
        "postgresql:///x?host=/tmp/pg",  # was printed as postgresql:/x
        "pg://embedded/bf",
        "mysql://root@127.0.0.1:3306/db",
        "./memory",
    ):
        assert redact_url(url) == url


def test_url_secrets_and_free_text():
    assert url_secrets("postgresql://u:S3c/ret?x@h/db") == ["S3c/ret?x"]
    assert url_secrets("postgresql://u:S3cret%40PW@h/db") == ["S3cret%40PW", "S3cret@PW"]
    line = "Error: store='postgresql://u:S3cretPW#x@127.0.0.1:5/x': unreachable (mysql://root:S3cret@PW@h/d)"
    assert (
        redact_text(line)
        == "Error: store='postgresql://u:***@127.0.0.1:5/x': unreachable (mysql://root:***@h/d)"
    )


def test_report_parameters_are_split_into_shown_and_secret_values(monkeypatch):
    params = {"store": "mysql://root:S3cretPW#1@127.0.0.1/db", "k": 5, "scope": "alice"}
    shown, secrets = split_secrets(params)
    assert shown == {"store": "mysql://root:***@127.0.0.1/db", "k": 5, "scope": "alice"}
    assert secrets == {"store": params["store"]}
    scrub = Scrubber(secrets)
    printed = f"connecting to {params['store']} as S3cretPW#1 on {{'k': 5}}"
    assert scrub.text(printed) == "connecting to mysql://root:***@127.0.0.1/db as *** on {'k': 5}"
    # in the kernel: the redacted copy becomes the real value again; any other value stays as given
    monkeypatch.setenv("MEMWORK_REPORT_SECRETS", '{"store": "mysql://root:S3cretPW#1@127.0.0.1/db"}')
    assert real_value("store", shown["store"]) == params["store"]
    assert real_value("store", "./other") == "./other"
    monkeypatch.delenv("MEMWORK_REPORT_SECRETS")
    assert real_value("store", shown["store"]) == shown["store"]  # standalone papermill / nbval


@pytest.mark.parametrize("url", [u for u, _ in TRICKY[:4]])
def test_cli_error_line_hides_a_password_with_special_characters(url):
    store_url = url.replace("host/db", "127.0.0.1:5/x").replace("h/db", "127.0.0.1:5/x")
    result = CliRunner().invoke(main, ["store", "info", "--store", store_url])
    assert result.exit_code in (1, 2) and result.output.startswith("Error: "), result.output
    assert "S3cret" not in result.output and ":***@" in result.output


def test_check_config_shell_and_json_hide_a_password_with_a_hash(monkeypatch):
    monkeypatch.setenv("MEMORY_PGVECTOR_DATABASE_URL", "postgresql://u:S3cretPW#1@127.0.0.1:5/x")
    for fmt in ("shell", "json"):
        result = CliRunner().invoke(main, ["check", "config", "--backend", "pgvector", "--format", fmt])
        assert "S3cret" not in result.output, fmt
        assert "postgresql://u:***@127.0.0.1:5/x" in result.output, result.output


def test_a_sql_store_describes_itself_by_its_url_password_hidden(sqlite_url):
    from memwork.stores.sql import SQLStore, build_table

    with SQLStore(sqlite_url) as store:
        assert store.describe() == f"{sqlite_url} table=agent_memories"  # not sqlite:sqlite:///...
    store = SQLStore.__new__(SQLStore)
    store.table = build_table("agent_memories", "postgresql", 8)
    for url, shown in (
        ("postgresql:///x?host=/tmp/pg", "postgresql:///x?host=/tmp/pg"),  # not postgresql:/x
        ("postgresql://u:S3cret#PW@db:5432/mem", "postgresql://u:***@db:5432/mem"),
    ):
        store.url = url
        assert store.describe() == f"{shown} table=agent_memories"


# text made of the pieces that matter to URL matching: scheme characters, ``://``, userinfo, breaks
_PIECES = st.sampled_from(
    ["a", "Z", "9", "+", ".", "-", ":", "/", "://", "@", "u:pw@", "h", "?password=", " ", "'", "<", "é", "1x"]
)


@given(st.lists(_PIECES, max_size=40).map("".join))
def test_redact_text_matches_the_plain_regex_substitution(text):
    """Found from each ``://`` (fast on a report page's base64 figures), the URLs are exactly the ones
    the regex finds scanning the whole text."""
    expected = _URL_IN_TEXT_RE.sub(lambda m: redact_url(m.group(0)) or "", text)
    assert redact_text(text) == expected


def test_redact_text_around_long_runs_of_scheme_characters():
    """A report page: base64 figures (long runs of scheme characters) around one URL with a password."""
    run = "QUJD+x" * 50_000
    text = f"<img src='data:image/png;base64,{run}'> see https://u:S3cretPW@h/db {run}"
    assert redact_text(text) == text.replace("S3cretPW", "***")
