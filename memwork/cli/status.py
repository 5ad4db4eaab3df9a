"""``memwork status``: the Memory V2 policy, backend selections and availability -- parse, call, print."""

from __future__ import annotations

import click

from memwork.cli.options import emit_json, json_option


@click.command("status")
@json_option
def status(as_json: bool) -> None:
    """Show the Memory V2 policy, the backends' availability and whether serve requires a token.

    Policy, the backend selected per operation, every backend's availability, config errors, and
    auth: "required", "off" (MEMWORK_API_TOKEN unset) or "misconfigured" (set but unusable, so
    memwork serve will not start).

    \b
    Example:
        MEMORY_BACKEND=pgvector memwork status --json
    """
    import os

    from memwork.facade.facade import STATUS_SCALAR_KEYS, facade_from_env
    from memwork.service.guards import AUTH_WORDS, auth_status

    payload = facade_from_env().status()
    service = auth_status(os.environ)
    payload["service"] = {"auth": service["auth"], "authRequired": service["authRequired"]}
    payload["configErrors"] = [*payload["configErrors"], *service["configErrors"]]
    if as_json:
        emit_json(payload)
        return
    for key in STATUS_SCALAR_KEYS:
        click.echo(f"{key}: {payload[key]}")
    click.echo(f"auth: {AUTH_WORDS[service['auth']]}")
    for op, name in payload["selectedBackends"].items():
        click.echo(
            f"{op}: {name}" + (f"  ({payload['fallbacks'][op]})" if op in payload["fallbacks"] else "")
        )
    for b in payload["backends"]:
        ops = ",".join(op for op, yes in b["supports"].items() if yes)
        state = "available" if b["available"] else f"unavailable: {b['reason']}"
        click.echo(f"  {b['name']:<28} {b['category'] or '-':<11} {ops:<22} {state}")
    for issue in payload["configErrors"]:
        click.echo(f"config error: {issue['field']}={issue['value']!r}: {issue['problem']}", err=True)
    for problem in payload["pluginErrors"]:
        click.echo(f"plugin error: {problem['name']} ({problem['origin']}): {problem['problem']}", err=True)


commands = [status]
