"""Ferret's domain: settings, database, sources, corpus, encoder, index, search, evaluation, training, pipelines and
jobs. It imports nothing from the faces (ferret.cli, ferret.api, ferret.ui), the adapters (ferret.connectors,
ferret.workers) or the composition root (ferret.runtime)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ferret")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"

__all__ = ["__version__"]
