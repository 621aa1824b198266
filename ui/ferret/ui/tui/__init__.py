"""``ferret tui``: the Textual terminal search client (search as you type, document view, corpus and
configuration switcher), against the local store or a remote Ferret API."""

from __future__ import annotations

import os

from ferret.core.errors import InvalidInputError
from ferret.ui.tui.app import FerretSearchApp
from ferret.ui.tui.search_client import LocalSearchClient, RemoteSearchClient, SearchClient, check_configuration

API_KEY_VARIABLE = "FERRET_API_KEY"


def run_tui(
    *,
    corpus: str | None,
    api: str | None,
    configuration: str,
    api_key_variable: str = API_KEY_VARIABLE,
    groups: list[str] | None = None,
    all_groups: bool = False,
) -> None:
    """Open the client on the local store (as ``public`` and ``groups``, or every group), or on the API at ``api``
    with the key from ``api_key_variable`` (the key's groups)."""

    check_configuration(configuration)
    client: SearchClient
    if api is not None:
        if groups or all_groups:
            raise InvalidInputError(
                "--group and --all-groups apply to the local store; with --api the key's groups do."
            )
        client = RemoteSearchClient(api, api_key=os.environ.get(api_key_variable), key_variable=api_key_variable)
    else:
        if groups and all_groups:
            raise InvalidInputError("--all-groups already sees every group; leave out --group, or --all-groups.")
        client = LocalSearchClient(groups, all_groups=all_groups)
    FerretSearchApp(client, corpus=corpus, configuration=configuration).run()
