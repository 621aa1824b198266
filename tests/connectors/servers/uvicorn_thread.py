"""Serve an ASGI app with uvicorn on 127.0.0.1 from a thread of the test process, for the vendor stubs."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
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
        self.server.force_exit = True  # do not wait for the clients' keep-alive connections
        self.thread.join(timeout=10)


def serve(app: Any, port: int, tls: tuple[Path, Path] | None = None) -> RunningApp:
    """Start ``app`` on ``127.0.0.1:port`` (HTTPS with ``tls=(certificate, key)``) and return once it accepts
    connections (well under a second)."""
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="off",
        access_log=False,
        ssl_certfile=str(tls[0]) if tls else None,
        ssl_keyfile=str(tls[1]) if tls else None,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"uvicorn did not start on port {port}")
        time.sleep(0.02)
    return RunningApp(f"{'https' if tls else 'http'}://127.0.0.1:{port}", server, thread)
