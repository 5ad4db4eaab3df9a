"""The service's bearer token: set but unusable is a config error that stops ``memwork serve`` (F-1), the
status says whether auth is required, and no token sent in a query string or path reaches the access log
(F-3). ``memwork serve`` runs as a real subprocess where the process's own output is what is checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import serve_process
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from memwork.cli import main
from memwork.errors import ConfigError
from memwork.legacy.schema import init_schema
from memwork.service.app import create_app, running
from memwork.service.guards import TOKEN_VAR, BearerAuth, token_setting

SECRET = "s3cr3t-Tok-7f1e"
HIDDEN = "HIDDENPART9"  #: inside every unusable value: it must never be printed
UNUSABLE = [
    "",
    " ",
    "\n",
    "\t\r\n ",
    f"{HIDDEN} {HIDDEN}",
    f"{HIDDEN}\t{HIDDEN}",
    f"{HIDDEN}\n{HIDDEN}",
    f"{HIDDEN}\x01{HIDDEN}",
    f"{HIDDEN}\x7f",
    f"tök{HIDDEN}",
    f"{HIDDEN}\u00a0",  # a no-break space: not ASCII, never stripped by a shell
]


SHAPES = {
    "<empty>",
    "<only whitespace>",
    "<holds a non-ASCII character>",
    "<holds whitespace or a control character inside>",
}


@pytest.fixture
def legacy_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'legacy.db'}"
    init_schema(url, apply=True)
    return url


# ---- reading the token ----------------------------------------------------------------------------
@pytest.mark.parametrize("value", UNUSABLE)
def test_an_unusable_token_stops_the_app_without_showing_it(legacy_url: str, value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        create_app({"MEMORY_LEGACY_DATABASE_URL": legacy_url, TOKEN_VAR: value})
    error = caught.value
    assert error.field == TOKEN_VAR and error.exit_code == 2
    assert HIDDEN not in str(error) and "unset" in str(error)
    assert token_setting({TOKEN_VAR: value}).auth == "misconfigured"


def test_surrounding_whitespace_is_trimmed_and_the_token_still_guards(legacy_url: str) -> None:
    env = {"MEMORY_LEGACY_DATABASE_URL": legacy_url, TOKEN_VAR: f"  {SECRET}\n"}
    with running(create_app(env)) as url:
        assert httpx.get(f"{url}/api/runtime/status").status_code == 401
        status = httpx.get(f"{url}/api/runtime/status", headers={"Authorization": f"Bearer {SECRET}"})
    service = status.json()["service"]
    assert service["authRequired"] is True and service["auth"] == "required"


def test_unset_is_no_auth_and_the_status_says_so(legacy_url: str) -> None:
    with running(create_app({"MEMORY_LEGACY_DATABASE_URL": legacy_url})) as url:
        service = httpx.get(f"{url}/api/runtime/status").json()["service"]
    assert service["authRequired"] is False and service["auth"] == "off"


@settings(max_examples=300, deadline=None)
@given(value=st.text(max_size=40))
def test_property_a_set_token_is_never_no_auth_and_a_usable_one_can_be_sent(value: str) -> None:
    setting = token_setting({TOKEN_VAR: value})
    assert setting.auth != "off"  # set means: required, or a config error -- never auth silently off
    if setting.auth == "required":
        assert setting.token is not None
        header = httpx.Headers({"Authorization": f"Bearer {setting.token}"})  # sendable as a header
        scope = {"type": "http", "path": "/api/runtime/status", "headers": header.raw}
        assert BearerAuth(app=None, token=setting.token)._authorized(scope)  # type: ignore[arg-type]
    else:
        assert setting.token is None and setting.shape in SHAPES  # words about the value, never the value


# ---- memwork status ---------------------------------------------------------------------------------
def _status(env: dict[str, str | None], *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["status", *args], env=env)
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize(
    ("value", "auth", "required"),
    [
        (None, "off", False),
        (SECRET, "required", True),
        ("\n", "misconfigured", False),
        (f"a {HIDDEN}", "misconfigured", False),
    ],
)
def test_memwork_status_shows_whether_auth_is_required(
    legacy_url: str, value: str | None, auth: str, required: bool
) -> None:
    env = {"MEMORY_LEGACY_DATABASE_URL": legacy_url, TOKEN_VAR: value}
    code, out, err = _status(env)
    assert code == 0 and f"auth: {auth} (" in out
    code, out_json, _ = _status(env, "--json")
    payload = json.loads(out_json)
    assert payload["service"] == {"auth": auth, "authRequired": required}
    token_errors = [e for e in payload["configErrors"] if e["field"] == TOKEN_VAR]
    assert bool(token_errors) == (auth == "misconfigured")
    if token_errors:
        assert f"config error: {TOKEN_VAR}=" in err
    for text in (out, err, out_json):
        assert HIDDEN not in text and SECRET not in text


# ---- memwork serve, as a process ----------------------------------------------------------------------
def _without_token(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k != TOKEN_VAR}


@contextmanager
def serving(env: dict[str, str]) -> Iterator[tuple[str, list[str]]]:
    """``memwork serve`` without the caller's own token; yields its URL and, after it stopped, its
    output (one string)."""
    with serve_process.serving({**_without_token(os.environ), **env}) as served:
        yield served


@pytest.mark.parametrize("value", ["\n", "   ", f"{HIDDEN} {HIDDEN}"])
def test_memwork_serve_refuses_to_start_on_an_unusable_token(legacy_url: str, value: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "memwork", "serve", "--port", "0"],
        env={**_without_token(os.environ), "MEMORY_LEGACY_DATABASE_URL": legacy_url, TOKEN_VAR: value},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {TOKEN_VAR}=")
    assert HIDDEN not in proc.stderr


def test_no_token_in_a_query_string_or_path_reaches_the_process_output(legacy_url: str) -> None:
    env = {"MEMORY_LEGACY_DATABASE_URL": legacy_url, TOKEN_VAR: SECRET}
    with serving(env) as (url, output):
        for query in ("token", "access_token", "api_key", "Authorization", "key"):
            assert httpx.get(f"{url}/api/runtime/status?{query}={SECRET}").status_code == 401
        auth = {"Authorization": f"Bearer {SECRET}"}
        assert httpx.get(f"{url}/api/runtime/status?api_key={SECRET}", headers=auth).status_code == 200
        assert httpx.get(f"{url}/{SECRET}", headers=auth).status_code == 404
        assert httpx.get(f"{url}/api/{SECRET}/status?x=1").status_code == 401
        body = {"userId": "u1", "query": f"q {SECRET}"}
        resolved = httpx.post(f"{url}/user-memory/v1/resolve?token={SECRET}", json=body, headers=auth)
        assert resolved.status_code == 200
    (text,) = output
    assert SECRET not in text
    lines = text.splitlines()
    assert any(line.endswith("GET /api/runtime/status 401") for line in lines)
    assert any(line.endswith("GET /api/runtime/status 200") for line in lines)
    assert any(line.endswith("GET <other path> 404") for line in lines)
    assert any(line.endswith("POST /user-memory/v1/resolve 200") for line in lines)
    assert any(f"{TOKEN_VAR} required" in line for line in lines)  # the startup line says auth is on


def test_memwork_serve_without_a_token_warns_at_startup(legacy_url: str) -> None:
    env = {"MEMORY_LEGACY_DATABASE_URL": legacy_url}
    with serving(env) as (url, output):
        assert httpx.get(f"{url}/api/runtime/status").json()["service"]["auth"] == "off"
    (text,) = output
    assert any("WARNING" in line and "auth is OFF" in line for line in text.splitlines())
