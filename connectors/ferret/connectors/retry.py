"""One retry helper for every HTTP source: 429/503 honour ``Retry-After``, other transient errors back off, a total
time budget caps the whole thing.

``Retry-After`` is either delta-seconds or an HTTP date (RFC 9110 §10.2.3); a server asking for longer than the
remaining budget makes the call fail at once instead of sleeping past the budget. Without the header the wait is
exponential with full jitter (``base * 2**attempt``, capped at ``max_delay``). Non-transient answers (4xx other than
408/425/429) are returned to the caller untouched: the connector decides whether a 404 is a deletion or a skip.

Example:
    >>> policy = RetryPolicy(max_attempts=5, budget_s=60)
    >>> response = send_with_retry(client, client.build_request("GET", url), policy)

``call_with_retry`` wraps any other client (boto3, atlassian-python-api) with the same policy, given a function
that says how long a raised exception asks to wait (``None``: not transient, re-raise).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TypeVar

import httpx

RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
"""Answers worth another try; 429 and 503 usually carry ``Retry-After``."""

T = TypeVar("T")


class RetryBudgetExceededError(Exception):
    """A source kept failing (or asked to wait) past the retry budget; the sync fails and deletes nothing."""


@dataclass
class RetryPolicy:
    max_attempts: int = 6
    base_delay: float = 0.5
    max_delay: float = 30.0
    budget_s: float = 120.0
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    retries: int = 0
    """Retries made through this policy so far (reports and tests read it)."""

    def backoff(self, attempt: int) -> float:
        return random.uniform(0, min(self.max_delay, self.base_delay * 2**attempt))


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks for: delta-seconds or an HTTP date; ``None`` when absent or unreadable."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def _wait(policy: RetryPolicy, attempt: int, asked: float | None, started: float, what: str) -> None:
    delay = asked if asked is not None else policy.backoff(attempt)
    elapsed = policy.clock() - started
    remaining = policy.budget_s - elapsed
    tried = f"{what} still failing after {attempt + 1} attempts in {elapsed:.0f} s"
    if attempt + 1 >= policy.max_attempts:
        raise RetryBudgetExceededError(tried)
    if delay > remaining:
        wait = f"the server asks to wait {delay:.0f} s" if asked is not None else f"another wait of {delay:.1f} s"
        raise RetryBudgetExceededError(f"{tried}; {wait} would pass the retry budget ({policy.budget_s:.0f} s)")
    policy.retries += 1
    policy.sleep(min(delay, policy.max_delay) if asked is None else delay)


def send_with_retry(client: httpx.Client, request: httpx.Request, policy: RetryPolicy | None = None) -> httpx.Response:
    """Send ``request``, retrying transient answers and connection errors; the last answer otherwise."""
    policy = policy or RetryPolicy()
    started = policy.clock()
    attempt = 0
    while True:
        try:
            response = client.send(request)
        except (httpx.TransportError, httpx.TimeoutException) as error:
            _wait(policy, attempt, None, started, f"{request.method} {request.url} ({type(error).__name__})")
            attempt += 1
            continue
        if response.status_code not in RETRY_STATUSES:
            return response
        asked = retry_after_seconds(response.headers.get("Retry-After"))
        response.close()
        _wait(policy, attempt, asked, started, f"{request.method} {request.url} (HTTP {response.status_code})")
        attempt += 1


def call_with_retry(
    call: Callable[[], T], transient: Callable[[Exception], float | bool | None], policy: RetryPolicy | None = None
) -> T:
    """Run ``call``; when it raises and ``transient(error)`` is a number (seconds asked) or ``True`` (back off),
    wait and run it again within the policy's attempts and budget; otherwise re-raise."""
    policy = policy or RetryPolicy()
    started = policy.clock()
    attempt = 0
    while True:
        try:
            return call()
        except Exception as error:
            verdict = transient(error)
            if verdict is False or verdict is None:
                raise
            asked = None if verdict is True else float(verdict)
            _wait(policy, attempt, asked, started, f"{type(error).__name__}: {error}")
            attempt += 1
