"""The ``ferret`` command line (typer + rich)."""
