"""The clients of the service (``canary app``, ``check stack``, ``canary judge --base-url``) read the bearer
token by the service's own rules: a value the service accepts (a secret file's trailing newline or CR)
works, and a value it refuses is bad input (exit 2, one line naming the variable) -- never a request
that fails with the token printed in its error (``Illegal header value b'Bearer <token>\\r'``).
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from memwork.cli import main
from memwork.errors import UsageError
from memwork.legacy.schema import init_schema
from memwork.rollout.app_canary import run_app_canary

SECRET = "client-Tok3n-4711"


@pytest.fixture
def service(sqlite_url):
    from memwork.service.app import create_app, running

    init_schema(sqlite_url, apply=True)
    env = {
        "MEMORY_ENABLED": "1",
        "MEMORY_BACKEND": "legacy",
        "MEMORY_LEGACY_DATABASE_URL": sqlite_url,
        "MEMWORK_API_TOKEN": SECRET + "\n",  # as a secret file mounted into the environment holds it
    }
    with running(create_app(env)) as base_url:
        yield base_url


@pytest.mark.parametrize("value", [SECRET + "\r", SECRET + "\r\n", SECRET + "\n", "  " + SECRET + "\t"])
def test_a_token_the_service_accepts_works_from_every_client(service, value):
    assert run_app_canary(service, token=value).ok
    out = CliRunner().invoke(main, ["canary", "app", "--base-url", service], env={"MEMWORK_API_TOKEN": value})
    assert out.exit_code == 0, out.output
    assert SECRET not in out.output


@pytest.mark.parametrize(
    "value",
    ["\u00a0" + SECRET, SECRET + "\u2003", "\ufeff" + SECRET, "client Tok3n", SECRET + "\x01x", "\x7f"],
)
def test_a_token_the_service_refuses_is_bad_input_never_shown(service, tmp_path, value):
    log = tmp_path / "comparisons.jsonl"
    log.write_text("")
    commands = [
        ["canary", "app", "--base-url", service],
        ["check", "stack", "--base-url", service],
        ["canary", "judge", "--log", str(log), "--base-url", service],
    ]
    for args in commands:
        out = CliRunner().invoke(main, args, env={"MEMWORK_API_TOKEN": value})
        assert out.exit_code == 2, (args, out.output)
        lines = [line for line in out.output.splitlines() if line.strip()]
        assert len(lines) == 1 and "MEMWORK_API_TOKEN" in lines[0], (args, out.output)
        assert SECRET not in out.output and "Tok3n" not in out.output


def test_bearer_token_trims_like_the_service_and_empty_means_none():
    from memwork.rollout.app_canary import bearer_token

    assert bearer_token(f" {SECRET}\r\n") == SECRET
    assert bearer_token("") == "" and bearer_token(None) == ""
    with pytest.raises(UsageError) as info:
        bearer_token("\ufeff" + SECRET)
    assert info.value.field == "MEMWORK_API_TOKEN" and SECRET not in str(info.value)
    assert json.dumps(str(info.value))  # one plain line
