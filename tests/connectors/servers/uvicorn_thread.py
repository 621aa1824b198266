"""Serve an ASGI app with uvicorn on 127.0.0.1 from a thread of the test process, for the vendor stubs."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import uvicorn


@dataclass
class RunningApp:
    """A started uvicorn server; ``url`` has no trailing slash."""

    url: str
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def serve(app: Any, port: int) -> RunningApp:
    """Start ``app`` on ``127.0.0.1:port`` and return once it accepts connections (well under a second)."""
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"uvicorn did not start on port {port}")
        time.sleep(0.02)
    return RunningApp(f"http://127.0.0.1:{port}", server, thread)
