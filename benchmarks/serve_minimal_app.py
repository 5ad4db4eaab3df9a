"""The reference for ``serve_overhead.py``: the smallest FastAPI app that answers a resolve.

The backend is the very object ``memwork serve``'s facade would select: the facade is built from the
same environment (:func:`memwork.facade.facade.facade_from_env`) and its registry asked for
``MEMORY_BACKEND``. One plain sync route (FastAPI runs it on its thread pool) calls
``backend.resolve(body)`` -- no facade call, no deadline, no guards, no validation beyond JSON, no
shadow, no status counts. uvicorn as an application would run it: one process, its own access log.
``MINIMAL_APP_THREADS`` (optional) caps FastAPI's thread pool (anyio's default: 40 threads), e.g. at
``memwork serve``'s own worker count, for a reference tuned like memwork.

    MEMORY_BACKEND=legacy ... python benchmarks/serve_minimal_app.py PORT
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio.to_thread
import uvicorn
from fastapi import FastAPI

from memwork.facade.facade import facade_from_env

NAME = os.environ["MEMORY_BACKEND"]
backend = facade_from_env(dict(os.environ)).registry.find(NAME)
if backend is None:
    raise SystemExit(f"MEMORY_BACKEND={NAME!r}: no such backend")

THREADS = os.environ.get("MINIMAL_APP_THREADS")


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    if THREADS:  # the limiter belongs to the running loop: set here, not at import
        anyio.to_thread.current_default_thread_limiter().total_tokens = int(THREADS)
    yield


app = FastAPI(lifespan=lifespan)


@app.get("/healthz")
def healthz() -> dict[str, Any]:
    """Liveness (the benchmark waits for it)."""
    return {"ok": True}


@app.post("/user-memory/v1/resolve")
def resolve(body: dict[str, Any]) -> dict[str, Any]:
    """The backend's resolve, as is."""
    return {"ok": True, "source": NAME, **backend.resolve(body)}


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="info", server_header=False)
