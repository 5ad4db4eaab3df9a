"""A database URL is parsed once into a value, purely: no connection, no embedded server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memwork.db import SCHEMES, DatabaseURL, embedded, get_engine, is_database_url, parse_url, pg_connect
from memwork.errors import UsageError
from memwork.stores import SQLStore, open_store


@pytest.mark.parametrize(
    ("text", "dialect", "sqlalchemy", "libpq"),
    [
        ("sqlite:///x.db", "sqlite", "sqlite:///x.db", None),
        ("sqlite://", "sqlite", "sqlite://", None),
        ("mysql://u@h/db", "mysql", "mysql+pymysql://u@h/db", None),
        ("mariadb://u@h/db", "mysql", "mysql+pymysql://u@h/db", None),
        ("mysql+pymysql://u@h/db", "mysql", "mysql+pymysql://u@h/db", None),
        ("mariadb+pymysql://u@h/db", "mysql", "mysql+pymysql://u@h/db", None),
        ("postgresql://u@h/db", "postgresql", "postgresql+psycopg://u@h/db", "postgresql://u@h/db"),
        ("postgres://u@h/db", "postgresql", "postgresql+psycopg://u@h/db", "postgresql://u@h/db"),
        ("POSTGRESQL+psycopg://u@h/db", "postgresql", "postgresql+psycopg://u@h/db", "postgresql://u@h/db"),
    ],
)
def test_every_scheme_parses_into_its_forms(
    text: str, dialect: str, sqlalchemy: str, libpq: str | None
) -> None:
    url = parse_url(text)
    assert (url.dialect, url.sqlalchemy, url.libpq, url.embedded) == (dialect, sqlalchemy, libpq, None)
    assert url.text == text and url.driver == sqlalchemy.split(":", 1)[0]
    assert parse_url(url) is url  # a value passes through


def test_the_password_is_hidden_in_the_redacted_form_and_the_repr() -> None:
    url = parse_url("postgresql://me:hunter2@db.example/mem")
    assert url.redacted == "postgresql://me:***@db.example/mem" == str(url)
    assert "hunter2" not in repr(url)
    assert "hunter2" in url.libpq  # the connectable form keeps it


def test_embedded_names_parse_without_a_server() -> None:
    assert parse_url("pg://embedded").embedded == "memwork"
    named = parse_url("pg://embedded/notes")
    assert (named.embedded, named.dialect, named.sqlalchemy, named.libpq) == (
        "notes",
        "postgresql",
        None,
        None,
    )
    with pytest.raises(UsageError, match="pg://embedded or pg://embedded/NAME"):
        parse_url("pg://elsewhere/notes")
    with pytest.raises(UsageError, match="database"):
        parse_url('pg://embedded/no"quotes')


@pytest.mark.parametrize("text", ["", "no-scheme", "redis://h/0", "ftp://u:pw@h/x", None, 3])
def test_what_is_not_a_database_url_is_a_usage_error(text: object) -> None:
    with pytest.raises(UsageError) as info:
        parse_url(text)  # type: ignore[arg-type]
    assert "pw" not in str(info.value)


def test_parsing_never_starts_the_embedded_server(tmp_path: Path) -> None:
    """A fresh process parses pg://embedded URLs, builds DDL for them and checks a legacy backend's
    configuration: no data directory appears and no server is registered."""
    pgdata = tmp_path / "pgdata"
    code = (
        "from memwork import db\nfrom memwork.db import embedded\n"
        "from memwork.legacy.schema import schema_ddl\n"
        "db.parse_url('pg://embedded'); db.parse_url('pg://embedded/other')\n"
        "assert schema_ddl('pg://embedded/other')\n"
        "assert not embedded._servers\n"
    )
    env = {**os.environ, "MEMWORK_PGDATA": str(pgdata), "MEMWORK_HOME": str(tmp_path / "home")}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)
    assert not pgdata.exists()


def test_ensure_resolves_the_embedded_url_once(pg_server) -> None:
    url = embedded.ensure("pg://embedded", create=True)
    assert url.embedded == "memwork" and url.dialect == "postgresql"
    assert url.libpq is not None and url.libpq.startswith("postgresql://")
    assert embedded.ensure(url, create=True) is url  # already resolved: nothing to do
    assert embedded.ensure("sqlite:///x.db", create=False) == parse_url("sqlite:///x.db")


def test_open_store_and_the_db_module_share_one_scheme_list(tmp_path: Path) -> None:
    assert all(is_database_url(f"{scheme}://x") for scheme in SCHEMES)
    with pytest.raises(UsageError, match="unknown scheme 'redis'"):
        open_store("redis://h/0")


def test_open_store_takes_mariadb_pymysql(mysql_url: str) -> None:
    """Once refused by open_store although db.py accepted it."""
    spec = mysql_url.replace("mysql://", "mariadb+pymysql://", 1)
    with open_store(spec, create=True) as store:
        assert isinstance(store, SQLStore) and store.dialect == "mysql"


def test_pg_connect_takes_a_value_or_text_and_refuses_other_dialects(pg_url: str) -> None:
    with pg_connect(parse_url(pg_url)) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    with pytest.raises(UsageError, match="must be a PostgreSQL URL"), pg_connect("sqlite:///x.db"):
        pass
    assert get_engine(parse_url(pg_url)) is get_engine(pg_url)  # one engine per URL
    assert isinstance(parse_url(pg_url), DatabaseURL)


@pytest.mark.parametrize(
    "url",
    [
        "mysql://root:S3cr@tPW@127.0.0.1/db",
        "postgresql://u:S3cr@tPW@127.0.0.1:5/x",
        "postgresql+psycopg://u:a@b@c@host/db",
    ],
)
def test_a_password_with_an_unencoded_at_is_refused_without_printing_it(url):
    """Drivers cut at the first '@' and print the password's tail as the host: refuse before use."""
    with pytest.raises(UsageError) as info:
        parse_url(url)
    message = str(info.value)
    assert "%40" in message
    assert "tPW" not in message and "S3cr" not in message and "b@c" not in message


def test_an_encoded_at_in_the_password_is_accepted():
    parsed = parse_url("mysql://root:S3cr%40tPW@127.0.0.1/db")
    assert parsed.dialect == "mysql"
    assert "S3cr" not in parsed.redacted


def test_the_cli_refuses_an_unencoded_at_in_one_line_without_the_password():
    from click.testing import CliRunner

    from memwork.cli import main

    result = CliRunner().invoke(main, ["store", "info", "--store", "mysql://root:S3cr@tPW@127.0.0.1/db"])
    assert result.exit_code == 2
    assert "%40" in result.output
    assert "tPW" not in result.output and "S3cr" not in result.output
