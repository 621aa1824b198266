"""A generator behind any OpenAI-compatible endpoint: vLLM, llama.cpp server, Ollama, TGI, OpenAI or Azure.

Raw completions (``/v1/completions``) by default, since small and base models follow few-shot completion prompts
far better than chat templates; ``api="chat"`` sends each prompt as one user message for chat-only endpoints.
Prompts run on a bounded thread pool. Retries are our own loop (the client's ``max_retries`` is 0) so that every
retry is counted in ``usage.retries``: 429, 408, 5xx, timeouts and refused connections are retried with
exponential backoff and jitter (``Retry-After`` honoured); any other 4xx is a configuration mistake and fails at once.

Example:
    >>> backend = OpenAICompatibleBackend("http://127.0.0.1:8080/v1", model="smollm2", concurrency=4)
    >>> backend.complete(["Document: ...\\nQuery:"], n=2, max_tokens=32, stop=["\\n"], seed=1)[0][0].text
    ' what is ...'
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any, Literal, TypeVar

import openai
from pydantic import SecretStr

from ferret.core.llm.base import Completion, LLMBackend, LLMError, UsageCounters, cut_at_stop

logger = logging.getLogger(__name__)

ApiKind = Literal["completions", "chat"]
T = TypeVar("T")

# Statuses worth another try: rate limiting, request timeout, and server-side failures.
_RETRYABLE_STATUS = frozenset({408, 429})
# The OpenAI API accepts at most 4 stop sequences; the rest are applied here after the answer arrives.
_MAX_SERVER_STOPS = 4
# Servers that ignore ``n`` answer one choice per request; give up when a prompt still lacks choices after this many
# requests beyond ``n``.
_EXTRA_REQUESTS = 2


def _is_retryable_status(status: int) -> bool:
    return status in _RETRYABLE_STATUS or status >= 500


def _short(message: object, limit: int = 200) -> str:
    text = " ".join(str(message).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class OpenAICompatibleBackend(LLMBackend):
    """Completions from an OpenAI-compatible HTTP endpoint, ``n`` samples per prompt, in prompt order.

    Args:
        base_url: the API root, usually ending in ``/v1`` (``http://127.0.0.1:8000/v1``).
        model: the model name the server serves; ``None`` asks the server (``GET /models``) and takes the first.
        api_key: sent as a bearer token; kept as a ``SecretStr`` and never logged nor shown by ``repr``.
        api: ``"completions"`` (raw prompts) or ``"chat"`` (each prompt as one user message).
        concurrency: requests in flight at once, over all callers of this backend.
        timeout_s: timeout of one HTTP request.
        max_retries: further attempts after a retryable failure; ``usage.retries`` counts them.
        backoff_s, max_backoff_s: the first retry waits about ``backoff_s``, doubling up to ``max_backoff_s``.
        logprobs: ask for the sampled tokens' log-probabilities (``logprobs=0`` on completions, ``logprobs=true`` on
            chat) so each completion carries its mean (``Completion.logprob``); off for servers that refuse it.

    Example:
        >>> backend = OpenAICompatibleBackend("http://gpu-box:8000/v1", model="Qwen/Qwen2.5-7B", api_key="sk-...")
        >>> [c.text for c in backend.complete([prompt], n=4, max_tokens=48, seed=7)[0]]
    """

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        api_key: SecretStr | str | None = None,
        api: ApiKind = "completions",
        concurrency: int = 4,
        timeout_s: float = 60.0,
        max_retries: int = 4,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        logprobs: bool = True,
    ) -> None:
        if api not in ("completions", "chat"):
            raise LLMError(f"Unknown LLM API '{api}'; set FERRET_LLM_API to 'completions' or 'chat'.")
        if concurrency < 1:
            raise LLMError("The LLM concurrency must be at least 1; fix FERRET_LLM_CONCURRENCY.")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key if isinstance(api_key, SecretStr) or api_key is None else SecretStr(api_key)
        self.api: ApiKind = api
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.max_retries = max(0, max_retries)
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.logprobs = logprobs
        self.usage = UsageCounters()
        self.name = self._describe()
        self._usage_lock = threading.Lock()
        self._model_lock = threading.Lock()
        self._random = random.Random()
        # Local servers accept any key; the client insists on one.
        key = self.api_key.get_secret_value() if self.api_key is not None else "not-needed"
        self._client = openai.OpenAI(base_url=self.base_url, api_key=key, timeout=timeout_s, max_retries=0)
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="ferret-llm")

    def __repr__(self) -> str:
        key = "'**********'" if self.api_key is not None else "None"
        return (
            f"{type(self).__name__}(base_url={self.base_url!r}, model={self.model!r}, api={self.api!r}, "
            f"concurrency={self.concurrency}, api_key={key})"
        )

    def _describe(self) -> str:
        return f"openai-compatible:{self.model or '?'}@{self.base_url}"

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._client.close()

    # -- the interface -------------------------------------------------------------------------------------------

    def complete(
        self,
        prompts: Sequence[str],
        *,
        n: int = 1,
        temperature: float = 0.7,
        max_tokens: int = 64,
        stop: Sequence[str] = ("\n",),
        seed: int | None = None,
    ) -> list[list[Completion]]:
        if n < 1 or not prompts:
            return [[] for _ in prompts]
        model = self._resolve_model()
        stops = [sequence for sequence in stop if sequence]
        futures: list[Future[list[Completion]]] = [
            self._pool.submit(self._complete_one, model, prompt, n, temperature, max_tokens, stops, seed)
            for prompt in prompts
        ]
        try:
            return [future.result() for future in futures]
        except BaseException:
            for future in futures:
                future.cancel()
            raise

    # -- one prompt ----------------------------------------------------------------------------------------------

    def _complete_one(
        self,
        model: str,
        prompt: str,
        n: int,
        temperature: float,
        max_tokens: int,
        stop: list[str],
        seed: int | None,
    ) -> list[Completion]:
        completions: list[Completion] = []
        requests = 0
        while len(completions) < n:
            if requests >= n + _EXTRA_REQUESTS:
                raise LLMError(
                    f"The LLM endpoint at {self.base_url} returned {len(completions)} of {n} completions after "
                    f"{requests} requests; check that model '{model}' can complete this prompt."
                )
            # A server that ignored ``n`` would repeat itself under the same seed: each request gets its own.
            request_seed = None if seed is None else seed + requests
            missing = n - len(completions)
            request = partial(self._request, model, prompt, missing, temperature, max_tokens, stop, request_seed)
            choices = self._with_retries(request)
            requests += 1
            completions.extend(choices[:missing])
        return completions

    def _request(
        self,
        model: str,
        prompt: str,
        n: int,
        temperature: float,
        max_tokens: int,
        stop: list[str],
        seed: int | None,
    ) -> list[Completion]:
        server_stop = stop[:_MAX_SERVER_STOPS] or None
        choices: list[tuple[str, str | None, float | None]]
        if self.api == "chat":
            chat = self._client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": prompt}],
                n=n,
                temperature=temperature,
                max_tokens=max_tokens,
                stop=server_stop,
                seed=seed,
                logprobs=True if self.logprobs else openai.omit,
            )
            choices = [
                (c.message.content or "", c.finish_reason, _chat_logprob(c.logprobs, c.message.content or "", stop))
                for c in sorted(chat.choices, key=lambda c: c.index)
            ]
            usage = chat.usage
        else:
            response = self._client.completions.create(
                model=model,
                prompt=prompt,
                n=n,
                temperature=temperature,
                max_tokens=max_tokens,
                stop=server_stop,
                seed=seed,
                logprobs=0 if self.logprobs else openai.omit,
            )
            choices = [
                (c.text or "", c.finish_reason, _completion_logprob(c.logprobs, c.text or "", stop))
                for c in sorted(response.choices, key=lambda c: c.index)
            ]
            usage = response.usage
        completion_tokens = usage.completion_tokens if usage is not None else 0
        with self._usage_lock:
            self.usage.calls += 1
            if usage is not None:
                self.usage.prompt_tokens += usage.prompt_tokens
                self.usage.completion_tokens += completion_tokens
        # The API reports tokens per response, not per choice: each choice gets an even share.
        per_choice = completion_tokens // max(1, len(choices))
        completions = []
        for raw_text, reason, logprob in choices:
            text, stopped = cut_at_stop(raw_text, stop)
            finish = "length" if reason == "length" and not stopped else "stop"
            completions.append(Completion(text, finish, per_choice, logprob))
        return completions

    # -- model discovery -----------------------------------------------------------------------------------------

    def _resolve_model(self) -> str:
        with self._model_lock:
            if self.model is None:
                models = self._with_retries(lambda: [entry.id for entry in self._client.models.list()])
                if not models:
                    raise LLMError(f"The LLM endpoint at {self.base_url} lists no model; set FERRET_LLM_MODEL.")
                self.model = models[0]
                self.name = self._describe()
                logger.info("LLM endpoint %s: using model %s", self.base_url, self.model)
            return self.model

    # -- retries -------------------------------------------------------------------------------------------------

    def _with_retries(self, request: Callable[[], T]) -> T:
        attempt = 0
        while True:
            try:
                return request()
            except openai.APIStatusError as exc:
                if not _is_retryable_status(exc.status_code):
                    raise self._rejected(exc) from exc
                failure: Exception = exc
            except openai.APIConnectionError as exc:  # refused, reset, DNS, and APITimeoutError
                failure = exc
            except openai.OpenAIError as exc:  # an answer that is not a completions response
                raise LLMError(
                    f"The LLM endpoint at {self.base_url} answered with something that is not an OpenAI "
                    f"{self.api} response ({_short(exc)}); check FERRET_LLM_BASE_URL and FERRET_LLM_API."
                ) from exc
            if attempt >= self.max_retries:
                raise self._gave_up(failure, attempt + 1) from failure
            delay = self._backoff(attempt, failure)
            with self._usage_lock:
                self.usage.retries += 1
            logger.warning(
                "LLM endpoint %s: %s; retry %d/%d in %.2f s",
                self.base_url,
                _short(failure, 120),
                attempt + 1,
                self.max_retries,
                delay,
            )
            time.sleep(delay)
            attempt += 1

    def _backoff(self, attempt: int, failure: Exception) -> float:
        """Exponential backoff with equal jitter: half the doubled delay fixed, half random."""
        delay = min(self.max_backoff_s, self.backoff_s * 2**attempt)
        delay = delay / 2 + self._random.uniform(0, delay / 2)
        if isinstance(failure, openai.APIStatusError):
            retry_after = failure.response.headers.get("retry-after")
            try:
                if retry_after is not None:
                    delay = max(delay, min(float(retry_after), self.max_backoff_s))
            except ValueError:
                pass  # an HTTP date: the computed backoff will do
        return delay

    def _gave_up(self, failure: Exception, attempts: int) -> LLMError:
        if isinstance(failure, openai.APITimeoutError):
            return LLMError(
                f"The LLM endpoint at {self.base_url} did not answer within {self.timeout_s:g} s in {attempts} "
                "attempts; check that the server is not overloaded, or raise FERRET_LLM_TIMEOUT_S."
            )
        if isinstance(failure, openai.APIStatusError):
            return LLMError(
                f"The LLM endpoint at {self.base_url} kept answering HTTP {failure.status_code} in {attempts} "
                "attempts; check the server's load and logs, or lower FERRET_LLM_CONCURRENCY."
            )
        return LLMError(
            f"Could not reach the LLM endpoint at {self.base_url} in {attempts} attempts ({_short(failure, 80)}); "
            "check that the server is running and that FERRET_LLM_BASE_URL is right."
        )

    def _rejected(self, exc: openai.APIStatusError) -> LLMError:
        status = exc.status_code
        detail = _short(exc.message)
        if status in (401, 403):
            hint = "check FERRET_LLM_API_KEY"
        elif status == 404:
            hint = f"check FERRET_LLM_MODEL (now '{self.model}') and that FERRET_LLM_BASE_URL ends in /v1"
        else:
            hint = "check FERRET_LLM_MODEL, FERRET_LLM_API and the request limits of the server"
            if self.logprobs and "logprob" in detail.lower():
                hint = "set FERRET_LLM_LOGPROBS=false: this server does not give token log-probabilities"
        return LLMError(
            f"The LLM endpoint at {self.base_url} rejected the request with HTTP {status} ({detail}); {hint}."
        )


def mean_logprob_until_stop(tokens: Sequence[tuple[str, float | None]], text: str, stop: Sequence[str]) -> float | None:
    """Mean log-probability of the tokens that make up ``text`` up to its stop sequence, the token that holds the
    stop included (the local sampler counts it too); tokens a server generated past the stop are left out.

    Example:
        >>> mean_logprob_until_stop([(" a", -1.0), (" b", -3.0), ("\\n", -0.5), ("x", -9.0)], " a b\\nx", ["\\n"])
        -1.5
    """
    kept_chars = len(cut_at_stop(text, stop)[0])
    values: list[float] = []
    consumed = 0
    for token, logprob in tokens:
        if logprob is None:  # some servers give the first token none
            continue
        values.append(float(logprob))
        consumed += len(token)
        if consumed > kept_chars:
            break
    return sum(values) / len(values) if values else None


def _completion_logprob(logprobs: Any, text: str, stop: Sequence[str]) -> float | None:
    """``choice.logprobs`` of the completions API: parallel ``tokens`` and ``token_logprobs`` lists."""
    if logprobs is None or not getattr(logprobs, "tokens", None) or not getattr(logprobs, "token_logprobs", None):
        return None
    return mean_logprob_until_stop(list(zip(logprobs.tokens, logprobs.token_logprobs, strict=False)), text, stop)


def _chat_logprob(logprobs: Any, text: str, stop: Sequence[str]) -> float | None:
    """``choice.logprobs`` of the chat API: ``content`` holds one entry (token, logprob) per generated token."""
    content = getattr(logprobs, "content", None) if logprobs is not None else None
    if not content:
        return None
    return mean_logprob_until_stop([(entry.token, entry.logprob) for entry in content], text, stop)
