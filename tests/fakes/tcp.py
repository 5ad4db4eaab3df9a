"""A bare TCP listener for services that are not HTTP (Redis): it never answers, or hangs up at once.

``mode`` may be switched while it listens (``silent`` holds every connection open without a byte;
``hangup`` closes it at once). ``accepted`` counts connections, including the ones still waiting in
the listen backlog when the listener stops, so a test reading it after the ``with`` block needs no
sleep to see a retry that had connected but not yet been accepted.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator


class Listener:
    """The listener's port, its mode and how many connections reached it."""

    def __init__(self, port: int, mode: str) -> None:
        self.port = port
        self.mode = mode
        self.accepted = 0


@contextlib.contextmanager
def tcp_listener(mode: str = "silent") -> Iterator[Listener]:
    """Listen on 127.0.0.1 in a thread; ``mode`` is ``silent`` or ``hangup`` (see the module)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.settimeout(0.05)
    listener = Listener(sock.getsockname()[1], mode)
    held: list[socket.socket] = []
    stop = threading.Event()

    def take(conn: socket.socket) -> None:
        listener.accepted += 1
        if listener.mode == "hangup":
            conn.close()
        else:
            held.append(conn)

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            take(conn)

    thread = threading.Thread(target=loop, name="tcp-listener", daemon=True)
    thread.start()
    try:
        yield listener
    finally:
        stop.set()
        thread.join(5)
        sock.setblocking(False)
        with contextlib.suppress(OSError):  # the backlog: connected, never accepted by the loop
            while True:
                take(sock.accept()[0])
        for conn in held:
            conn.close()
        sock.close()
