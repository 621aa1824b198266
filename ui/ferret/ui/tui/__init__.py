"""``ferret tui``: the Textual terminal search client (search as you type, document view, corpus and
configuration switcher), against the local store or a remote Ferret API."""

from __future__ import annotations

import os

from ferret.ui.tui.app import FerretSearchApp
from ferret.ui.tui.search_client import LocalSearchClient, RemoteSearchClient, SearchClient, check_configuration

API_KEY_VARIABLE = "FERRET_API_KEY"


def run_tui(
    *, corpus: str | None, api: str | None, configuration: str, api_key_variable: str = API_KEY_VARIABLE
) -> None:
    """Open the client on the local store, or on the API at ``api`` with the key from ``api_key_variable``."""

    check_configuration(configuration)
    client: SearchClient
    if api is not None:
        client = RemoteSearchClient(api, api_key=os.environ.get(api_key_variable), key_variable=api_key_variable)
    else:
        client = LocalSearchClient()
    FerretSearchApp(client, corpus=corpus, configuration=configuration).run()
