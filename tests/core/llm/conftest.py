"""Fixtures of the generator tests: real HTTP endpoints, no mocks.

- ``stub_endpoint``: a tiny OpenAI-compatible server from the standard library (``ThreadingHTTPServer`` on
  127.0.0.1), scripted to answer given HTTP statuses before succeeding, slowly, or with fewer choices than asked.
- ``llama_server``: ``python -m llama_cpp.server`` on the SmolLM2 GGUF, started once per session. Without
  ``llama_cpp`` (or the SmolLM2 package) the tests are skipped on a workstation and fail when ``CI`` is set.

Test modules cannot import this conftest (importlib import mode), so helpers travel as fixtures.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from ferret.core.llm.base import LLMError
from ferret.core.llm.local_backend import default_generator_path
from ferret_testing import free_port, skip_or_fail

FEW_SHOT_PROMPT = (
    "Document: The Eiffel Tower was completed in 1889 for the World's Fair in Paris.\n"
    "Query: when was the eiffel tower built\n\n"
    "Document: Photosynthesis converts light energy into chemical energy stored in glucose.\n"
    "Query: what does photosynthesis produce\n\n"
    "Document: The Great Wall of China stretches over 21,000 kilometres across northern China.\n"
    "Query: how long is the great wall of china\n\n"
    "Document: {document}\n"
    "Query:"
)


@pytest.fixture(scope="session")
def few_shot_prompt() -> Callable[[str], str]:
    """A Promptagator-style few-shot prompt for a new document, ending in ``Query:``."""

    def prompt(document: str) -> str:
        return FEW_SHOT_PROMPT.format(document=document)

    return prompt


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    try:
        return default_generator_path()
    except LLMError as error:
        skip_or_fail(str(error))
        raise


# -- the standard-library endpoint ------------------------------------------------------------------------------


@dataclass
class StubEndpoint:
    """An OpenAI-compatible server that answers ``statuses`` in turn (then 200) and records every request."""

    statuses: list[int] = field(default_factory=list)
    retry_after: str | None = None
    delay_s: float = 0.0
    choices_per_response: int | None = None  # None: as many as ``n`` asks
    text: str = " stub query\nDocument: run-on"
    tokens: list[str] = field(default_factory=lambda: [" stub", " query", "\n", "Document", ": run-on"])
    """``text`` as tokens, with ``token_logprobs``: what the stub answers when asked for log-probabilities."""
    token_logprobs: list[float] = field(default_factory=lambda: [-0.5, -1.5, -0.1, -4.0, -4.0])
    requests: list[dict[str, Any]] = field(default_factory=list)
    authorizations: list[str | None] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            self.requests.append({"path": path, **body})
            status = self.statuses.pop(0) if self.statuses else 200
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            time.sleep(self.delay_s)
        finally:
            with self.lock:
                self.in_flight -= 1
        if status != 200:
            return status, {"error": {"message": f"scripted {status}", "type": "stub", "code": status}}
        if path.endswith("/models"):
            return 200, {"object": "list", "data": [{"id": "stub-model", "object": "model", "owned_by": "me"}]}
        count = self.choices_per_response or int(body.get("n") or 1)
        chat = path.endswith("/chat/completions")
        asked = body.get("logprobs") is not None and body.get("logprobs") is not False  # 0 asks too
        tokens = list(zip(self.tokens, self.token_logprobs, strict=True))
        chat_logprobs: dict[str, Any] = {
            "content": [{"token": t, "logprob": v, "bytes": None, "top_logprobs": []} for t, v in tokens]
        }
        completion_logprobs = {
            "tokens": self.tokens,
            "token_logprobs": self.token_logprobs,
            "top_logprobs": None,
            "text_offset": [sum(len(t) for t in self.tokens[:i]) for i in range(len(self.tokens))],
        }
        choices = [
            {
                "index": i,
                "message": {"role": "assistant", "content": self.text},
                "finish_reason": "stop",
                "logprobs": chat_logprobs if asked else None,
            }
            if chat
            else {
                "index": i,
                "text": self.text,
                "finish_reason": "stop",
                "logprobs": completion_logprobs if asked else None,
            }
            for i in range(count)
        ]
        return 200, {
            "id": "cmpl-stub",
            "object": "chat.completion" if chat else "text_completion",
            "created": 0,
            "model": body.get("model", "stub-model"),
            "choices": choices,
            "usage": {"prompt_tokens": 7, "completion_tokens": 3 * count, "total_tokens": 7 + 3 * count},
        }


class _StubHandler(BaseHTTPRequestHandler):
    server: Any

    def _reply(self, body: dict[str, Any]) -> None:
        endpoint: StubEndpoint = self.server.endpoint
        endpoint.authorizations.append(self.headers.get("Authorization"))
        status, answer = endpoint.answer(self.path, body)
        payload = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        if status == 429 and endpoint.retry_after is not None:
            self.send_header("Retry-After", endpoint.retry_after)
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client timed out and left
            self.wfile.write(payload)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self._reply(json.loads(self.rfile.read(length) or b"{}"))

    def do_GET(self) -> None:
        self._reply({})

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def stub_endpoint() -> Iterator[Callable[..., StubEndpoint]]:
    """Starts ``StubEndpoint(**options)`` servers on free loopback ports; all stop at the end of the test."""
    servers: list[ThreadingHTTPServer] = []

    def start(**options: Any) -> StubEndpoint:
        endpoint = StubEndpoint(**options)
        server = ThreadingHTTPServer(("127.0.0.1", 0), _StubHandler)
        server.daemon_threads = True
        server.endpoint = endpoint  # type: ignore[attr-defined]
        endpoint.server = server
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return endpoint

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


# -- llama.cpp's server -----------------------------------------------------------------------------------------


LLAMA_API_KEY = "sk-test-llama"


def _wait_ready(
    url: str, process: subprocess.Popen[bytes], log: Path, *, headers: dict[str, str], timeout_s: float = 180.0
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"llama_cpp.server exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(
                urllib.request.Request(f"{url}/models", headers=headers), timeout=2
            ) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"llama_cpp.server did not answer within {timeout_s:.0f} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="session")
def start_llama_server(smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., str]]:
    """Starts ``python -m llama_cpp.server`` on SmolLM2 (alias ``smollm2``) with extra options; returns its base URL
    (``.../v1``). Every server started stops at the end of the session."""
    try:
        import llama_cpp.server  # noqa: F401
    except ImportError as error:
        skip_or_fail(f"llama-cpp-python[server] is not installed ({error}).")
    processes: list[subprocess.Popen[bytes]] = []

    def start(*options: str) -> str:
        port = free_port()
        log = tmp_path_factory.mktemp("llama-server") / "server.log"
        command = [sys.executable, "-m", "llama_cpp.server", "--model", str(smollm2_gguf), "--model_alias", "smollm2"]
        command += ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", *options]
        with log.open("wb") as log_file:
            process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT)
        processes.append(process)
        url = f"http://127.0.0.1:{port}/v1"
        _wait_ready(url, process, log, headers={"Authorization": f"Bearer {LLAMA_API_KEY}"})
        return url

    yield start
    for process in processes:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def llama_server(start_llama_server: Callable[..., str]) -> str:
    """Base URL of llama.cpp's OpenAI-compatible server on SmolLM2, shared by the session."""
    return start_llama_server()


@pytest.fixture(scope="session")
def llama_server_with_key(start_llama_server: Callable[..., str]) -> str:
    """A second server that demands the bearer key ``LLAMA_API_KEY``."""
    return start_llama_server("--api_key", LLAMA_API_KEY)
