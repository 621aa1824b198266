"""``ferret admin``: Streamlit serving the admin, telemetry off, nothing fetched from outside.

The process is replaced by ``python -m streamlit run`` (``os.execv``), so a signal from the terminal, systemd or
Docker reaches Streamlit itself and no wrapper process is left behind.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

APP = Path(__file__).resolve().parent / "app.py"


def streamlit_arguments(*, host: str, port: int) -> list[str]:
    """The command line: headless, usage statistics off, no file watcher (a served admin is not edited live)."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(APP),
        "--server.headless",
        "true",
        "--server.address",
        host,
        "--server.port",
        str(port),
        "--server.fileWatcherType",
        "none",
        "--browser.gatherUsageStats",
        "false",
        "--theme.base",
        "light",
        "--runner.magicEnabled",
        "false",
        "--client.toolbarMode",
        "viewer",
    ]


def run_admin(*, host: str, port: int) -> None:
    os.environ["STREAMLIT_BROWSER_GATHER_USAGE_STATS"] = "false"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    arguments = streamlit_arguments(host=host, port=port)
    os.execv(arguments[0], arguments)
