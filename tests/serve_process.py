"""``memwork serve`` as a real process for the tests, on a port the server itself picks.

It listens on ``--port 0`` and the URL is read from uvicorn's own "running on" line: a port picked by
the test and handed over would leave a moment in which another job of a parallel suite can take it
(seen: the server then exits 1 and the test talks to whatever holds the port).
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

RUNNING_ON = re.compile(r"running on (http://\S+)")


@contextmanager
def serving(env: Mapping[str, str], *, start_s: float = 60.0) -> Iterator[tuple[str, list[str]]]:
    """``memwork serve --port 0`` with the environment ``env`` (the whole of it); yields its URL and a
    list that, once the server stopped, holds its whole output (stdout then stderr, one string)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "memwork", "serve", "--port", "0"],
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    lines: list[str] = []
    found = threading.Event()
    url: list[str] = []

    def read_stderr() -> None:  # drains the pipe for the server's whole life
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            match = RUNNING_ON.search(line)
            if match and not url:
                url.append(match.group(1))
                found.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    output: list[str] = []
    try:
        deadline = time.monotonic() + start_s
        while not found.wait(0.1):
            started = "".join(lines)
            assert proc.poll() is None, f"memwork serve exited {proc.returncode}:\n{started}"
            assert time.monotonic() < deadline, f"memwork serve did not start in {start_s} s:\n{started}"
        yield url[0], output
    finally:
        proc.terminate()
        out = proc.stdout.read()
        proc.wait(timeout=30)
        reader.join(timeout=30)
        output.append(out + "".join(lines))
