"""``memwork serve``: the runtime service under uvicorn -- parse, call."""

from __future__ import annotations

import click


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8081, show_default=True, help="TCP port (0: any free)."
)
def serve(host: str, port: int) -> None:
    """Serve the memory facade over HTTP: status, resolve, remember-recent, sync, forget, healthz.

    Configured by the environment like the facade (MEMORY_*), plus MEMWORK_API_TOKEN (bearer token
    for every route but /healthz), MEMWORK_MAX_BODY_BYTES and the shadow reads (MEMORY_SHADOW_*).
    Unset MEMWORK_API_TOKEN means no auth (a warning at startup); set but blank or holding a space,
    control or non-ASCII character, it is a config error: exit 2, nothing served. Access lines name
    method, path and status only. The OpenAPI schema is served at /openapi.json.

    \b
    Example:
        MEMORY_SHADOW_BACKEND=pgvector MEMORY_SHADOW_SAMPLE=0.1 memwork serve --port 8081
    """
    from memwork.checks import listen_address
    from memwork.service.app import serve as run_service

    host, port = listen_address(host, port)  # bad input: one line, exit 2, before anything starts
    run_service(host, port)


commands = [serve]
