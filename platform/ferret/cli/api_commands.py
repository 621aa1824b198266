"""``ferret serve`` (the HTTP API under uvicorn), ``ferret apikey`` (create, list, revoke API keys) and
``ferret audit`` (who changed keys and index versions).

At the server's own terminal the CLI manages keys as an owner: whoever runs it can read the database anyway."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from ferret.cli.render import console
from ferret.core.db.api_key import KeyManager, create_api_key, list_api_keys, revoke_api_key
from ferret.core.db.audit import cli_actor, list_events
from ferret.core.errors import InvalidInputError
from ferret.core.settings import get_settings
from ferret.runtime.context import app_context, ensure_schema

apikey_app = typer.Typer(help="API keys of the HTTP API: scopes and ACL groups.", no_args_is_help=True)
audit_app = typer.Typer(
    help="The audit trail: key, index version and search configuration changes.", no_args_is_help=True
)


def serve(
    host: Annotated[str, typer.Option(help="Address to listen on; 0.0.0.0 for every interface.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    workers: Annotated[int, typer.Option(help="Worker processes (a Qdrant server is needed for more than 1).")] = 1,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
) -> None:
    """Run the HTTP API (OpenAPI at /docs and /openapi.json)."""
    import uvicorn  # only ``ferret serve`` needs it

    if not 1 <= port <= 65535:
        raise InvalidInputError(f"--port {port} is not a TCP port; use 1-65535.")
    if workers < 1:
        raise InvalidInputError("--workers must be at least 1.")
    settings = get_settings()
    if workers > 1 and not settings.qdrant_url:
        # Qdrant Edge shards live in one process; several workers would open the same files.
        raise InvalidInputError(
            "The embedded index can be opened by one process only; use --workers 1 or set FERRET_QDRANT_URL."
        )
    settings.ensure_home()
    ensure_schema(settings)  # migrate (SQLite) or refuse (server database) once, before any worker starts
    uvicorn.run(
        "ferret.api.app:app_from_environment",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=log_level,
    )


@apikey_app.command("create")
def create(
    name: Annotated[str, typer.Option("--name", "-n", help="A name to recognise the key by.")],
    scope: Annotated[
        list[str] | None,
        typer.Option("--scope", "-s", help="search, ingest, admin or owner (may grant any group); repeatable."),
    ] = None,
    group: Annotated[
        list[str] | None, typer.Option("--group", "-g", help="ACL group the key's searches may see; repeatable.")
    ] = None,
) -> None:
    """Create a key and print it once: only its hash is stored."""
    with app_context() as ctx:
        manager = KeyManager(cli_actor(), None)
        key, plaintext = create_api_key(ctx.session, name, scope or ["search"], group or [], manager=manager)
        ctx.session.commit()
        console.print(
            f"created API key {key.name} (scopes {', '.join(key.scopes)}; groups "
            f"{', '.join(key.acl_groups) or 'public only'}). It is shown only now:"
        )
    typer.echo(plaintext)


@apikey_app.command("list")
def list_keys(
    revoked: Annotated[bool, typer.Option("--revoked", help="Include revoked keys.")] = False,
) -> None:
    """Keys with their prefix, scopes, groups and last use (never the key itself)."""
    with app_context() as ctx:
        table = Table(title="API keys")
        for column in ("name", "prefix", "scopes", "groups", "created", "last used", "revoked"):
            table.add_column(column)
        for key in list_api_keys(ctx.session, include_revoked=revoked):
            table.add_row(
                key.name,
                f"fk_{key.prefix}_…",
                ", ".join(key.scopes),
                ", ".join(key.acl_groups) or "public only",
                f"{key.created_at:%Y-%m-%d %H:%M}",
                f"{key.last_used_at:%Y-%m-%d %H:%M}" if key.last_used_at else "never",
                f"{key.revoked_at:%Y-%m-%d %H:%M}" if key.revoked_at else "",
            )
        console.print(table)


@apikey_app.command("revoke")
def revoke(name: Annotated[str, typer.Argument(help="Name of the key.")]) -> None:
    """Revoke a key: every request with it gets 401 from now on."""
    with app_context() as ctx:
        key = revoke_api_key(ctx.session, name, manager=KeyManager(cli_actor(), None))
        ctx.session.commit()
        console.print(f"revoked API key {key.name}")


@audit_app.command("list")
def list_audit(
    limit: Annotated[int, typer.Option("--limit", "-n", help="Newest events to show.")] = 50,
    action: Annotated[
        str | None, typer.Option(help="Only this action, e.g. apikey.create, index.promote or config.rollback.")
    ] = None,
) -> None:
    """Who created or revoked keys and who promoted, rolled back or repaired index versions and search
    configurations, newest first."""
    if limit < 1:
        raise InvalidInputError("--limit must be at least 1.")
    with app_context() as ctx:
        table = Table(title="audit events")
        for column in ("when", "actor", "action", "target", "detail"):
            table.add_column(column)
        for event in list_events(ctx.session, limit=limit, action=action):
            detail = ", ".join(f"{key}={value}" for key, value in event.detail.items())
            table.add_row(f"{event.at:%Y-%m-%d %H:%M:%S}", event.actor, event.action, event.target, detail)
        console.print(table)
