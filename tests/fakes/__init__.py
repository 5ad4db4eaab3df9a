"""In-process fakes of the HTTP services memwork talks to but cannot run here (no server binary is
installable offline): each implements the service's *documented* request and response shapes for
the endpoints memwork uses, with the shapes and a link to the public documentation next to it.

They are real HTTP servers on 127.0.0.1 (``http.server`` in a thread), so the adapters run their real
httpx code path; they are not mocks of memwork's own functions. :mod:`tests.fakes.server` holds the
shared machinery: routing, recorded requests and fault injection (4xx, 5xx, malformed JSON, a slow
response, a dropped connection).
"""
