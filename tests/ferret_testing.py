"""Helpers shared by the test folders (on pytest's path through ``pythonpath`` in pyproject.toml)."""

from __future__ import annotations

import os
import socket

import pytest


def in_ci() -> bool:
    """True under CI (the ``CI`` environment variable set to anything but empty, 0, false or no)."""
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def skip_or_fail(reason: str, remedy: str = "`make test` installs it") -> None:
    """Skip on a workstation; fail under CI, which must run every test."""
    if in_ci():
        pytest.fail(f"{reason} CI must run these tests ({remedy}).", pytrace=False)
    pytest.skip(reason)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
