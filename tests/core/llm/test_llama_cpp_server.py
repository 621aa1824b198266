"""The OpenAI-compatible backend against a real llama.cpp server on SmolLM2 (started by the suite)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from ferret.core.llm.base import LLMError
from ferret.core.llm.openai_backend import OpenAICompatibleBackend

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DOCUMENTS = [
    "Honey never spoils because its low moisture and high acidity stop bacteria from growing.",
    "The Amazon river carries more water than the next seven largest rivers combined.",
    "Mount Everest grows about four millimetres a year as the Indian plate pushes north.",
    "Octopuses have three hearts and blue blood that carries oxygen with copper.",
]


def test_completions_with_n_and_stop(llama_server: str, few_shot_prompt: Callable[[str], str]) -> None:
    backend = OpenAICompatibleBackend(llama_server, model="smollm2", timeout_s=60)

    [row] = backend.complete([few_shot_prompt(DOCUMENTS[0])], n=2, max_tokens=24, stop=["\n"], seed=1)

    assert len(row) == 2
    assert all("\n" not in c.text and c.finish_reason in ("stop", "length") for c in row)
    assert any(c.text.strip() for c in row)
    assert all(c.logprob is not None and c.logprob <= 0 for c in row), "llama.cpp gives token log-probabilities"
    assert backend.usage.calls >= 1 and backend.usage.retries == 0
    assert backend.usage.prompt_tokens > 50 and backend.usage.completion_tokens > 0


def test_concurrent_requests_keep_prompt_order(llama_server: str, few_shot_prompt: Callable[[str], str]) -> None:
    """Greedy answers are deterministic: fetched two at a time they must match those fetched one by one."""
    prompts = [few_shot_prompt(document) for document in DOCUMENTS]
    concurrent = OpenAICompatibleBackend(llama_server, model="smollm2", concurrency=2, timeout_s=60)
    sequential = OpenAICompatibleBackend(llama_server, model="smollm2", concurrency=1, timeout_s=60)

    together = concurrent.complete(prompts, n=1, temperature=0.0, max_tokens=16)
    one_by_one = [sequential.complete([prompt], n=1, temperature=0.0, max_tokens=16)[0] for prompt in prompts]

    assert [row[0].text for row in together] == [row[0].text for row in one_by_one]
    assert len({row[0].text for row in together}) > 1
    assert concurrent.usage.calls == len(prompts)


def test_chat_api(llama_server: str) -> None:
    backend = OpenAICompatibleBackend(llama_server, model="smollm2", api="chat", timeout_s=60)

    [[completion]] = backend.complete(["Write a search query about honey."], n=1, max_tokens=16, seed=0)

    assert completion.text.strip() and "\n" not in completion.text


def test_model_is_discovered(llama_server: str) -> None:
    backend = OpenAICompatibleBackend(llama_server, timeout_s=60)

    backend.complete(["Query:"], n=1, max_tokens=4)

    assert backend.model == "smollm2"


def test_wrong_path_is_a_4xx_that_is_not_retried(llama_server: str) -> None:
    backend = OpenAICompatibleBackend(f"{llama_server}/missing", model="smollm2", max_retries=3, backoff_s=0.5)

    started = time.monotonic()
    with pytest.raises(LLMError, match=r"rejected the request with HTTP 404"):
        backend.complete(["Query:"], max_tokens=4)

    assert backend.usage.retries == 0 and time.monotonic() - started < 2


def test_wrong_api_key_is_a_401_that_is_not_retried(llama_server_with_key: str) -> None:
    wrong = OpenAICompatibleBackend(llama_server_with_key, model="smollm2", api_key="sk-wrong", backoff_s=0.5)
    right = OpenAICompatibleBackend(llama_server_with_key, model="smollm2", api_key="sk-test-llama")

    with pytest.raises(LLMError, match=r"rejected the request with HTTP 401 .*FERRET_LLM_API_KEY"):
        wrong.complete(["Query:"], max_tokens=4)

    assert wrong.usage.retries == 0 and wrong.usage.calls == 0
    assert len(right.complete(["Query:"], max_tokens=4)[0]) == 1
