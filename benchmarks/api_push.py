"""The push half of benchmarks/api_speed.py (issue 16, item 2): documents/s from the first push request until the
last document is searchable, against a raw encode of exactly the same passages in the same run.

The raw encode is sentence-transformers' own ``encode`` of the same model in one call (it sorts the texts by length
and cuts batches of ``FERRET_ENCODE_BATCH_SIZE``), run in the benchmark's process after the push while the server is
idle, twice (the ratio uses their mean): what embedding alone costs on these cores, so "vs raw encode" (raw seconds
/ push seconds) is the share of that ceiling the whole path reaches (the issue's goal: >= 0.90). Ferret's own
``DualEncoder.encode`` of the same texts (batches of about one token length on a CPU) is timed once beside it, so
the table shows how much of the ratio is the encoder and how much the rest of the path. Neither reads the
encoder's passage memo.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from speed_support import console, open_platform, open_session

WARMUP = {
    "external_id": "warmup",
    "title": "Warm-up",
    "text": "Pushed before the timing, so the server's encoder is loaded.",
}


RAW_ENCODE_RUNS = 2
"""The same encode differed by up to 15% between two runs back to back on the 2-core VM (benchmarks/RESULTS.md,
issue 16, sixth session): the ratio is taken against the mean of two, and the table says how far apart they were."""


def raw_encode(home: Path, corpus: str) -> dict[str, Any]:
    """A raw ``encode_passages`` of exactly the passages the push stored (title + text, as every build embeds
    them), in this process at the platform's batch size: the ceiling the push path is compared with."""
    from sqlalchemy import select

    from ferret.core.corpus.chunking import passage_text
    from ferret.core.db.corpus import get_corpus
    from ferret.core.db.models import Document, Passage
    from ferret.core.encoder.registry import ModelRegistry

    app = open_platform(home)
    session = open_session(app.settings)
    try:
        row = get_corpus(session, corpus)
        pairs = session.execute(
            select(Document.title, Passage.text).join(Document, Passage.document_id == Document.id)
            .where(Passage.corpus_id == row.id, Document.source != "bench")
            .order_by(Passage.id)
        ).all()  # fmt: skip
        registry = ModelRegistry(session, app.settings)
        encoder = registry.encoder(registry.ensure_base())
    finally:
        session.close()
        app.backend.close()
    texts = [passage_text(title, text) for title, text in pairs]
    model: Any = encoder.model  # the sentence-transformers model itself
    batch_size = app.settings.encode_batch_size

    def library() -> None:
        model.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True)

    model.encode(texts[:64], batch_size=batch_size)  # warm-up
    runs = [timed(library) for _ in range(RAW_ENCODE_RUNS)]
    ferret = timed(lambda: encoder.encode(texts, batch_size=batch_size))
    return {"passages": len(texts), "seconds": statistics.mean(runs), "runs": runs, "ferret_encode_s": ferret}


def timed(work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def wait_for_job(client: httpx.Client, job_url: str, poll_s: float | None = None) -> dict[str, Any]:
    """The job once it has ended: by ``GET ...?wait=`` (one request, answered when the job ends), or, with
    ``poll_s``, by polling as a client of the API before ``wait`` existed did (each poll costs the server CPU)."""
    from ferret.core.db.job import FINISHED_STATES

    ended = {state.value for state in FINISHED_STATES}
    url = job_url if poll_s is not None else f"{job_url}?wait=60"
    while (job := client.get(url).raise_for_status().json())["state"] not in ended:
        if poll_s is not None:
            time.sleep(poll_s)
    if job["state"] != "succeeded":
        raise RuntimeError(f"push job {job_url} failed: {job['error']}")
    return dict(job)


def push_throughput(
    base: str,
    key: str,
    home: Path,
    corpus: str,
    datasets: Sequence[Path],
    n_docs: int,
    batch: int,
    *,
    poll_s: float | None = None,
) -> dict[str, Any]:
    from itertools import islice

    from ferret.core.eval.beir import iter_corpus

    def records() -> Any:
        for dataset in datasets:
            for record in iter_corpus(dataset):
                yield {"external_id": f"{dataset.name}:{record.doc_id}", "title": record.title, "text": record.text}

    documents = list(islice(records(), n_docs))
    batches = [documents[i : i + batch] for i in range(0, len(documents), batch)]
    result: dict[str, Any] = {"documents": len(documents), "batch": batch, "poll_ms": (poll_s or 0) * 1000}
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=600) as client:
        # A warm-up job first (source "bench", left out of the raw encode): the server loads its passage encoder
        # and tokenizer there, not inside the timed jobs (a py-spy profile of a cold 200-document run found about a
        # fifth of the job thread's time in that one-time load; the raw encode is timed after a warm-up too). A job,
        # not a synchronous push: in embedded mode a synchronous push leaves the shard open in the API's backend,
        # and the push jobs after it then fail with "open in another Ferret process" (found by this benchmark).
        warmup = [{**WARMUP, "external_id": f"warmup-{i}"} for i in range(40)]
        warm = client.post(f"/v1/corpora/{corpus}/documents", json={"source": "bench", "documents": warmup})
        if warm.raise_for_status().status_code == 202:
            wait_for_job(client, warm.json()["job_url"])
        for label in ("new", "unchanged"):
            console.print(f"[dim]push API: {len(documents)} {label} documents in batches of {batch}[/dim]")
            passages = 0
            jobs: list[str] = []
            accept_ms: list[float] = []
            started = time.perf_counter()
            for chunk in batches:
                sent = time.perf_counter()
                response = client.post(f"/v1/corpora/{corpus}/documents", json={"documents": chunk})
                response.raise_for_status()
                accept_ms.append((time.perf_counter() - sent) * 1000)
                if response.status_code == 202:  # above the synchronous line: searchable when its job succeeds
                    jobs.append(response.json()["job_url"])
                else:
                    passages += response.json()["passages_added"]
            accepted = time.perf_counter() - started
            for job_url in jobs:
                passages += wait_for_job(client, job_url, poll_s)["result"]["passages_added"]
            seconds = time.perf_counter() - started
            result[label] = {
                "seconds": seconds,
                "docs_per_s": len(documents) / seconds,
                "passages": passages,
                "jobs": len(jobs),
                "accepted_s": accepted,
                "accept_p50_ms": statistics.median(accept_ms),
                "load_1m": round(os.getloadavg()[0], 2),
            }
            if label == "new":  # the same passages through a raw encode, with the server idle
                console.print("[dim]raw encode of the pushed passages[/dim]")
                raw = raw_encode(home, corpus)
                result["raw_encode"] = {**raw, "docs_per_s": len(documents) / raw["seconds"]}
    return result


def print_push_table(push: dict[str, Any]) -> None:
    waits = f"polled every {push['poll_ms']:.0f} ms" if push.get("poll_ms") else "GET ?wait= per job"
    table = Table(
        title=f"Push API ingestion: {push['documents']:,} documents in batches of {push['batch']}, 1 client, {waits}"
    )
    for column in (
        "documents",
        "jobs",
        "all accepted s",
        "accept p50",
        "searchable s",
        "documents/s",
        "passages",
        "vs raw encode",
        "load",
    ):
        table.add_column(column, justify="right")
    raw = push.get("raw_encode")
    for label in ("new", "unchanged"):
        row = push[label]
        table.add_row(
            label,
            str(row["jobs"]),
            f"{row['accepted_s']:.1f}",
            f"{row['accept_p50_ms']:.0f} ms",
            f"{row['seconds']:.1f}",
            f"{row['docs_per_s']:,.1f}",
            f"{row['passages']:,}",
            f"{raw['seconds'] / row['seconds']:.2f}" if raw and label == "new" else "",
            f"{row['load_1m']:.1f}",
        )
    if raw:
        table.add_row(
            "raw encode",
            "",
            "",
            "",
            f"{raw['seconds']:.1f}",
            f"{raw['docs_per_s']:,.1f}",
            f"{raw['passages']:,}",
            "1.00",
            "",
        )
    Console(width=200).print(table)  # wider than the shared console: the rows stay one line each
    if raw and len(raw.get("runs", [])) > 1:
        seconds = push["new"]["seconds"]
        runs = ", ".join(f"{run:.1f} s" for run in raw["runs"])
        span = f"{min(raw['runs']) / seconds:.2f}-{max(raw['runs']) / seconds:.2f}"
        console.print(f"raw encode runs: {runs} (mean {raw['seconds']:.1f} s); vs raw encode by run: {span}")
    if raw and raw.get("ferret_encode_s"):
        ferret = raw["ferret_encode_s"]
        console.print(
            f"Ferret's encode alone (batches of one token length): {ferret:.1f} s, "
            f"{ferret / raw['seconds']:.2f} of the raw encode's time; the push path took "
            f"{push['new']['seconds'] / ferret:.2f}x Ferret's encode"
        )
