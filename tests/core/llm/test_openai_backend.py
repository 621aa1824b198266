"""The OpenAI-compatible backend against a real HTTP server from the standard library (fast, no model)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from ferret.core.llm.base import LLMError, cut_at_stop
from ferret.core.llm.openai_backend import OpenAICompatibleBackend

Stub = Callable[..., Any]


def backend_for(url: str, **options: Any) -> OpenAICompatibleBackend:
    defaults: dict[str, Any] = {"model": "stub-model", "timeout_s": 5.0, "max_retries": 3, "backoff_s": 0.01}
    return OpenAICompatibleBackend(url, **{**defaults, **options})


def test_cut_at_stop_takes_the_earliest_stop() -> None:
    assert cut_at_stop("a query\nDocument: x", ["\n"]) == ("a query", True)
    assert cut_at_stop("one. two\nthree", ["\n", "."]) == ("one", True)
    assert cut_at_stop("no stop here", ["\n", ""]) == ("no stop here", False)


def test_completions_cut_at_stop_and_count_usage(stub_endpoint: Stub) -> None:
    stub = stub_endpoint()
    backend = backend_for(stub.base_url)

    results = backend.complete(["p1", "p2"], n=2, max_tokens=16, stop=["\n"], seed=5)

    assert [[c.text for c in row] for row in results] == [[" stub query"] * 2] * 2
    assert all(c.finish_reason == "stop" and c.completion_tokens == 3 for row in results for c in row)
    assert backend.usage.calls == 2 and backend.usage.retries == 0
    assert backend.usage.prompt_tokens == 14 and backend.usage.completion_tokens == 12
    sent = sorted(stub.requests, key=lambda r: r["prompt"])
    assert [r["path"] for r in sent] == ["/v1/completions"] * 2
    assert sent[0] | {"prompt": "p1"} == {
        "path": "/v1/completions",
        "model": "stub-model",
        "prompt": "p1",
        "n": 2,
        "temperature": 0.7,
        "max_tokens": 16,
        "stop": ["\n"],
        "seed": 5,
        "logprobs": 0,
    }
    # The mean over " stub", " query" and the newline that stopped it: the tokens past the stop are left out.
    assert all(c.logprob == pytest.approx((-0.5 - 1.5 - 0.1) / 3) for row in results for c in row)


def test_logprobs_can_be_turned_off(stub_endpoint: Stub) -> None:
    stub = stub_endpoint()
    backend = backend_for(stub.base_url, logprobs=False)

    [[completion]] = backend.complete(["p"], n=1)

    assert "logprobs" not in stub.requests[0] and completion.logprob is None


def test_429_twice_then_success_is_retried_and_counted(stub_endpoint: Stub) -> None:
    stub = stub_endpoint(statuses=[429, 429])
    backend = backend_for(stub.base_url)

    [[completion]] = backend.complete(["p"], n=1)

    assert completion.text == " stub query"
    assert len(stub.requests) == 3
    assert backend.usage.retries == 2 and backend.usage.calls == 1


def test_5xx_is_retried_and_retry_after_is_honoured(stub_endpoint: Stub) -> None:
    stub = stub_endpoint(statuses=[503, 429], retry_after="0.3")
    backend = backend_for(stub.base_url)

    started = time.monotonic()
    backend.complete(["p"], n=1)

    assert len(stub.requests) == 3 and backend.usage.retries == 2
    assert time.monotonic() - started >= 0.3


def test_lasting_5xx_gives_up_with_one_clear_sentence(stub_endpoint: Stub) -> None:
    stub = stub_endpoint(statuses=[500] * 10)
    backend = backend_for(stub.base_url, max_retries=2)

    with pytest.raises(LLMError, match=r"kept answering HTTP 500 in 3 attempts") as error:
        backend.complete(["p"])

    assert stub.base_url in str(error.value)
    assert len(stub.requests) == 3 and backend.usage.retries == 2


@pytest.mark.parametrize(("status", "hint"), [(400, "FERRET_LLM_MODEL"), (401, "FERRET_LLM_API_KEY"), (404, "/v1")])
def test_other_4xx_is_not_retried(stub_endpoint: Stub, status: int, hint: str) -> None:
    stub = stub_endpoint(statuses=[status] * 5)
    backend = backend_for(stub.base_url)

    with pytest.raises(LLMError, match=rf"rejected the request with HTTP {status}") as error:
        backend.complete(["p"])

    assert hint in str(error.value)
    assert len(stub.requests) == 1 and backend.usage.retries == 0


def test_server_that_ignores_n_gets_more_requests_with_new_seeds(stub_endpoint: Stub) -> None:
    stub = stub_endpoint(choices_per_response=1)
    backend = backend_for(stub.base_url)

    [row] = backend.complete(["p"], n=3, seed=10)

    assert len(row) == 3
    assert [r["n"] for r in stub.requests] == [3, 2, 1]
    assert [r["seed"] for r in stub.requests] == [10, 11, 12]
    assert backend.usage.calls == 3


def test_concurrency_limit_is_respected(stub_endpoint: Stub) -> None:
    stub = stub_endpoint(delay_s=0.15)
    backend = backend_for(stub.base_url, concurrency=3)

    results = backend.complete([f"p{i}" for i in range(9)], n=1)

    assert len(results) == 9 and all(len(row) == 1 for row in results)
    assert stub.max_in_flight == 3


def test_timeouts_are_retried_then_reported(stub_endpoint: Stub) -> None:
    stub = stub_endpoint(delay_s=1.0)
    backend = backend_for(stub.base_url, timeout_s=0.2, max_retries=1)

    started = time.monotonic()
    with pytest.raises(LLMError, match=r"did not answer within 0.2 s in 2 attempts"):
        backend.complete(["p"])

    assert backend.usage.retries == 1
    assert time.monotonic() - started < 3


def test_unreachable_endpoint_fails_quickly_after_retries(unused_port: int) -> None:
    url = f"http://127.0.0.1:{unused_port}/v1"
    backend = backend_for(url, max_retries=2, timeout_s=1.0)

    started = time.monotonic()
    with pytest.raises(LLMError, match=r"^Could not reach the LLM endpoint at .* in 3 attempts") as error:
        backend.complete(["p"])

    assert url in str(error.value) and "FERRET_LLM_BASE_URL" in str(error.value)
    assert backend.usage.retries == 2 and backend.usage.calls == 0
    assert time.monotonic() - started < 5


def test_chat_mode_sends_one_user_message(stub_endpoint: Stub) -> None:
    stub = stub_endpoint()
    backend = backend_for(stub.base_url, api="chat")

    [[completion]] = backend.complete(["Document: d\nQuery:"], n=1, stop=["\n"])

    assert completion.text == " stub query"
    assert completion.logprob == pytest.approx((-0.5 - 1.5 - 0.1) / 3)
    [request] = stub.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["logprobs"] is True
    assert request["messages"] == [{"role": "user", "content": "Document: d\nQuery:"}]


def test_model_is_discovered_when_not_configured(stub_endpoint: Stub) -> None:
    stub = stub_endpoint()
    backend = backend_for(stub.base_url, model=None)

    backend.complete(["p"])

    assert backend.model == "stub-model" and "stub-model" in backend.name
    assert [r["path"] for r in stub.requests] == ["/v1/models", "/v1/completions"]


def test_api_key_is_sent_but_never_shown(stub_endpoint: Stub) -> None:
    stub = stub_endpoint()
    backend = backend_for(stub.base_url, api_key="sk-very-secret")

    assert "sk-very-secret" not in repr(backend)
    assert "sk-very-secret" not in str(backend.api_key)
    backend.complete(["p"])
    backend.close()

    assert stub.authorizations == ["Bearer sk-very-secret"]


def test_unknown_api_is_refused() -> None:
    with pytest.raises(LLMError, match="FERRET_LLM_API"):
        OpenAICompatibleBackend("http://127.0.0.1:1/v1", api="responses")  # type: ignore[arg-type]


@pytest.fixture
def unused_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
