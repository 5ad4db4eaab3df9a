"""Bad input and secrets on routes the first adversarial pass did not try (second pass, class 9).

* ``defrag merge-duplicates --approved`` given a file that is not UTF-8 text ended with exit 1 and
  ``UnicodeDecodeError``; it is bad input: exit 2, one line naming the field and file.
* the access log printed a request's method verbatim, so a client that sent its token (or any value)
  in the method's place left it in the log: ``SeKrEt-QS-777 /api/runtime/status 401``. Only the HTTP
  methods are named; any other is ``<other method>``.
"""

from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner
from test_approved import review_csv
from test_service_auth import SECRET, TOKEN_VAR, serving

from memwork.cli import main
from memwork.entry import Entry
from memwork.legacy.schema import init_schema
from memwork.stores import open_store


def test_an_approved_file_that_is_not_utf8_text_is_bad_input(tmp_path):
    store = str(tmp_path / "store")
    with open_store(store, create=True) as opened:
        opened.put_many([Entry(path="a.md", content="tea every morning"), Entry(path="b.md", content="tea")])
    binary = tmp_path / "approved.csv"
    binary.write_bytes(b"\xff\xfe\x00garbage\x00" * 20)
    before = sorted(p.name for p in (tmp_path / "store").rglob("*"))
    out = CliRunner().invoke(
        main, ["defrag", "merge-duplicates", "--store", store, "--approved", str(binary)]
    )
    assert out.exit_code == 2, out.output
    lines = [line for line in out.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "approved" in lines[0] and str(binary) in lines[0], out.output
    assert sorted(p.name for p in (tmp_path / "store").rglob("*")) == before
    good = review_csv(tmp_path, [("a", "b", "0.9", "approve")])  # the same command still reads a real CSV
    assert (
        CliRunner()
        .invoke(main, ["defrag", "merge-duplicates", "--store", store, "--approved", good])
        .exit_code
        == 0
    )


@pytest.fixture
def legacy_url(tmp_path) -> str:
    url = f"sqlite:///{tmp_path / 'legacy.db'}"
    init_schema(url, apply=True)
    return url


def test_a_value_sent_as_the_method_never_reaches_the_access_log(legacy_url):
    env = {"MEMORY_LEGACY_DATABASE_URL": legacy_url, TOKEN_VAR: SECRET}
    with serving(env) as (url, output):
        host, port = url.removeprefix("http://").split(":")
        for method in (SECRET, f"GET{SECRET}", "PROPFIND"):
            with socket.create_connection((host, int(port)), timeout=10) as conn:
                conn.sendall(
                    f"{method} /api/runtime/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
                )
                assert conn.recv(64).startswith(b"HTTP/1.1 ")
    (text,) = output
    assert SECRET not in text
    assert sum(line.endswith("<other method> /api/runtime/status 401") for line in text.splitlines()) == 3
