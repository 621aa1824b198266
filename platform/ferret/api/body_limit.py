"""A request body larger than ``api_max_body_bytes`` gets 413 before anything parses it.

The declared ``Content-Length`` is checked first; a body sent without one (chunked) is counted while it streams and
refused the moment it passes the limit, so a client cannot make the server buffer more than the limit.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodySizeLimitMiddleware:
    """Pure ASGI middleware (no request object, no copy of the body beyond the limit)."""

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared == -1:
            await _reply(send, 400, "The Content-Length header is not a valid number.")
            return
        if declared is not None and declared > self.max_body_bytes:
            await _reply(send, 413, self._too_large())
            return

        # Read the whole body up to the limit, then replay it: the application never sees a partial body.
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, _replay([], message, receive), send)
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await _reply(send, 413, self._too_large())
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(chunks, None, receive), send)

    def _too_large(self) -> str:
        return (
            f"The request body is larger than the limit of {self.max_body_bytes:,} bytes; "
            "send fewer or smaller documents per request."
        )


def _content_length(scope: Scope) -> int | None:
    """The declared length; None when absent, -1 when malformed."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                length = int(value)
            except ValueError:
                return -1
            return length if length >= 0 else -1
    return None


def _replay(chunks: list[bytes], pending: Message | None, receive: Receive) -> Receive:
    body = b"".join(chunks)
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return pending or {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _reply(send: Send, status: int, detail: str) -> None:
    payload = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": payload})
