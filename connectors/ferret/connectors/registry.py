"""Lazy registry from source kind to connector class, after Onyx's ``connectors/registry.py``.

Only the connector a source uses is imported, so a heavy SDK or parser of one source never slows down or
breaks the others.

Example:
    >>> connector = build_connector("filesystem", root="/srv/docs")
    >>> type(connector).__name__
    'FilesystemConnector'
"""

from __future__ import annotations

import importlib
from typing import Any

from ferret.core.errors import InvalidInputError
from ferret.core.sources.capabilities import BaseConnector

CONNECTORS: dict[str, tuple[str, str]] = {
    "beir": ("ferret.connectors.beir.connector", "BeirConnector"),
    "confluence": ("ferret.connectors.confluence.connector", "ConfluenceConnector"),
    "filesystem": ("ferret.connectors.filesystem.connector", "FilesystemConnector"),
    "git": ("ferret.connectors.git.connector", "GitConnector"),
    "s3": ("ferret.connectors.s3.connector", "S3Connector"),
    "sharepoint": ("ferret.connectors.sharepoint.connector", "SharePointConnector"),
    "smb": ("ferret.connectors.smb.connector", "SmbConnector"),
    "sql": ("ferret.connectors.sql.connector", "SqlConnector"),
    "web": ("ferret.connectors.web.connector", "WebConnector"),
}
"""Source kind to ``(module path, class name)``."""


def known_kinds() -> list[str]:
    return sorted(CONNECTORS)


def get_connector_class(kind: str) -> type[BaseConnector]:
    """The connector class of ``kind``, importing its module now and not before."""
    if kind not in CONNECTORS:
        raise InvalidInputError(f"Unknown source kind {kind!r}; known kinds are {', '.join(known_kinds())}.")
    module_path, class_name = CONNECTORS[kind]
    try:
        module = importlib.import_module(module_path)
    except ModuleNotFoundError as error:
        if error.name and not error.name.startswith("ferret."):
            raise InvalidInputError(
                f"The {kind} connector needs the Python package {error.name!r}; install Ferret's {kind!r} extra "
                f"(pip install 'ferret[{kind}]')."
            ) from None
        raise
    connector_class = getattr(module, class_name)
    if not (isinstance(connector_class, type) and issubclass(connector_class, BaseConnector)):
        raise TypeError(f"{module_path}.{class_name} is not a BaseConnector subclass")
    return connector_class


def build_connector(kind: str, **config: Any) -> BaseConnector:
    """A connector of ``kind`` configured by ``config`` (the JSON stored on the source row)."""
    return get_connector_class(kind)(**config)
