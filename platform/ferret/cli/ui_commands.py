"""``ferret tui`` (the Textual terminal search client) and ``ferret admin`` (the Streamlit admin).

Textual and Streamlit are imported only inside the commands, so every other command starts as fast as before.
"""

from __future__ import annotations

from typing import Annotated

import typer

from ferret.core.errors import InvalidInputError


def tui(
    corpus: Annotated[str | None, typer.Option("--corpus", "-c", help="Corpus to search (default: the first).")] = None,
    api: Annotated[
        str | None, typer.Option(help="A Ferret API URL (e.g. http://127.0.0.1:8000) instead of the local store.")
    ] = None,
    configuration: Annotated[str, typer.Option(help="hybrid, dense or sparse.")] = "hybrid",
    api_key_variable: Annotated[
        str, typer.Option(help="Environment variable holding the API key (with --api).")
    ] = "FERRET_API_KEY",
    group: Annotated[
        list[str] | None,
        typer.Option("--group", "-g", help="Local store: search as a member of this group (and public); repeatable."),
    ] = None,
    all_groups: Annotated[
        bool, typer.Option("--all-groups", help="Local store: every document, whatever its groups (an administrator).")
    ] = False,
) -> None:
    """Search as you type in the terminal (F1 for the keys); works over SSH in 80×24.

    On the local store it sees public documents only unless --group or --all-groups says more, as `ferret search`
    does."""
    try:
        from ferret.ui.tui import run_tui
    except ImportError:
        raise InvalidInputError("The terminal client needs the ui extra: pip install 'ferret[ui]'.") from None
    run_tui(
        corpus=corpus,
        api=api,
        configuration=configuration,
        api_key_variable=api_key_variable,
        groups=list(group or []),
        all_groups=all_groups,
    )


def admin(
    host: Annotated[str, typer.Option(help="Address to listen on; 0.0.0.0 inside a container.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8501,
) -> None:
    """Run the Streamlit admin (no login of its own: keep it on 127.0.0.1 or behind an authenticating proxy)."""
    try:
        from ferret.ui.admin.launcher import run_admin
    except ImportError:
        raise InvalidInputError("The admin needs the ui extra: pip install 'ferret[ui]'.") from None
    if not 1 <= port <= 65535:
        raise InvalidInputError(f"--port {port} is not a TCP port; use 1-65535.")
    run_admin(host=host, port=port)
