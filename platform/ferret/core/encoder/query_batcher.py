"""Micro-batching of query encoding across concurrent searches, as text-embedding servers batch their requests.

One forward pass of a small encoder over 32 short queries costs little more than over one (the matrix products
are tiny at batch 1, and the per-call overhead of tokenizer, torch dispatch and the encoder's lock dominates), so a
server whose requests each encode their own query is bound by that overhead: measured at 15-16 searches/s on 2
cores whatever the number of clients (benchmarks/RESULTS.md, "HTTP API and workers"). A ``QueryBatcher`` keeps
worker threads per model (``workers``, one by default); a caller hands its queries over and waits. A free worker
takes the first waiting request, waits at most ``window_s`` for more (or until ``max_batch`` queries are waiting),
encodes them in one call and hands each caller its rows. Under load, requests also pile up while a batch is being
encoded, so the next batch is as large as the load makes it (continuous batching, as Hugging Face's
text-embeddings-inference does); an idle server pays at most ``window_s`` of extra latency. With several workers,
one collects the next batch while the others encode theirs (a model server's instances of one model), so an encoder
that runs one batch on one core can use more than one.

Example:
    >>> batcher = QueryBatcher(encoder.encode_queries, window_s=0.002, max_batch=64)
    >>> batcher.encode(["parental leave"]).shape
    (1, 384)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

Encode = Callable[[list[str]], np.ndarray]


@dataclass
class _Request:
    queries: list[str]
    result: Future[np.ndarray] = field(default_factory=Future)


class QueryBatcher:
    """Encodes the queries of concurrent callers together; each caller gets exactly its own rows back.

    ``encode`` is called from the batcher's worker threads: never concurrently with itself with one worker (the
    default); with ``workers`` > 1, up to that many batches at once, so ``encode`` must then be thread-safe (ONNX
    Runtime sessions are). An error raised by it reaches every caller of that batch. ``batches`` and ``queries``
    count what the workers encoded, so a benchmark (or a test) can see the mean batch size.
    """

    def __init__(self, encode: Encode, *, window_s: float = 0.002, max_batch: int = 64, workers: int = 1) -> None:
        if window_s < 0 or max_batch < 1 or workers < 1:
            raise ValueError("window_s must be >= 0, max_batch >= 1 and workers >= 1")
        self._encode = encode
        self.window_s = window_s
        self.max_batch = max_batch
        self.workers = workers
        self.batches = 0
        self.queries = 0
        self._pending: list[_Request] = []
        self._ready = threading.Condition()
        self._closed = False
        self._threads: list[threading.Thread] = []
        self._counts = threading.Lock()
        self._collecting = threading.Lock()

    def encode(self, queries: Sequence[str]) -> np.ndarray:
        """The vectors of ``queries``, in order. A request as large as a whole batch (an evaluation run) is encoded
        at once in the calling thread, so it never holds interactive searches back behind it."""
        texts = list(queries)
        if len(texts) >= self.max_batch:
            return self._encode(texts)
        request = _Request(texts)
        with self._ready:
            if self._closed:
                raise RuntimeError("the query batcher is closed")
            self._pending.append(request)
            if not self._threads:
                for number in range(self.workers):
                    name = "ferret-query-batcher" + (f"-{number}" if number else "")
                    worker = threading.Thread(target=self._run, name=name, daemon=True)
                    worker.start()
                    self._threads.append(worker)
            self._ready.notify()
        return request.result.result()

    def close(self) -> None:
        """Stop the workers after the batches they are encoding; requests still waiting are encoded first."""
        with self._ready:
            self._closed = True
            self._ready.notify_all()
        for worker in self._threads:
            worker.join(timeout=30)

    def _waiting(self) -> int:
        return sum(len(request.queries) for request in self._pending)

    def _take(self) -> list[_Request] | None:
        """The next batch: the waiting requests once ``window_s`` has passed since the first arrived, or sooner when
        ``max_batch`` queries wait. ``None`` when closed and nothing is left. One worker collects at a time (the
        others encode, or wait for their turn), so no two workers split the requests of one window."""
        with self._collecting, self._ready:
            while not self._pending:
                if self._closed:
                    return None
                self._ready.wait()
            deadline = time.monotonic() + self.window_s
            while self._waiting() < self.max_batch and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._ready.wait(left)
            taken: list[_Request] = []
            size = 0
            while self._pending and (not taken or size + len(self._pending[0].queries) <= self.max_batch):
                request = self._pending.pop(0)
                taken.append(request)
                size += len(request.queries)
            return taken

    def _run(self) -> None:
        while (batch := self._take()) is not None:
            texts = [query for request in batch for query in request.queries]
            try:
                vectors = self._encode(texts)
            except BaseException as error:  # every waiting caller must be released, whatever went wrong
                for request in batch:
                    request.result.set_exception(error)
                continue
            with self._counts:
                self.batches += 1
                self.queries += len(texts)
            start = 0
            for request in batch:
                request.result.set_result(vectors[start : start + len(request.queries)])
                start += len(request.queries)
