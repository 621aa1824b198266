"""Ferret's domain: settings, database, corpus, encoder, index, search, evaluation and the CLI."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ferret")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"

__all__ = ["__version__"]
