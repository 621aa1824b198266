"""Reliability runs of issue 11: searches during promote/rollback swaps, and the CLI's start-up time.

Usage:
    python benchmarks/reliability.py swap --dataset ../shared/datasets/scifact [--documents 300] [--swaps 250] \
        [--clients 4] [--home DIR]
    python benchmarks/reliability.py startup [--runs 7] [--home DIR]

swap: the first --documents documents of a BEIR corpus are pushed into a corpus with two index versions, then a real
``ferret serve`` (its own process, one worker) answers searches from --clients threads (the dataset's queries, hybrid,
one keep-alive connection each) while an admin thread alternates promote and rollback --swaps times over HTTP,
letting the clients answer --clients more searches after each swap, so that every swap overlaps searches.
Reported: searches, failed searches (any non-200), empty result lists, swaps done, and whether the alias and the
database agree at the end.

startup: median wall time of ``ferret --help`` and of a cold ``ferret search`` (a new process each run, on a
one-document corpus: sparse mode, which loads no model, and the default hybrid mode, which loads the query encoder)
over --runs runs, with the load average before and after, since the cores may be shared.

The fuzz counts (deep and wide metadata, ACL-change sequences) come from tests/api/test_reliability_fuzz.py with
``FERRET_RELIABILITY_ROUNDS``; see benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import httpx

from api_speed import free_port, start_server

CORPUS = "swap"


def prepare(home: Path, dataset: Path | None, documents: int) -> str:
    """A corpus with two ready index versions (the second active) and an owner key; returns the key."""
    from ferret.core.corpus.push import PushedDocument, PushIngestor
    from ferret.core.db.api_key import create_api_key
    from ferret.core.db.corpus import create_corpus
    from ferret.core.db.engine import session_scope
    from ferret.core.encoder.registry import ModelRegistry
    from ferret.core.eval.beir import iter_corpus
    from ferret.core.index.versioned_collection import VersionedCollection
    from ferret.core.settings import FerretSettings
    from ferret.core.sources.documents import Document as SourceDocument
    from ferret.runtime.context import open_runtime

    settings = FerretSettings(home=home)
    with open_runtime(settings) as runtime, session_scope(settings.database_url) as session:
        corpus = create_corpus(session, CORPUS)
        if dataset is None:
            texts = [("only", "Glaciers carve fjords over millennia.")]
        else:
            texts = []
            for record in iter_corpus(dataset):
                texts.append((record.doc_id, f"{record.title}. {record.text}"))
                if len(texts) == documents:
                    break
        pushed = [PushedDocument(SourceDocument(external_id=i, text=t)) for i, t in texts]
        PushIngestor(session, settings, runtime.backend, corpus).push("bench", pushed)
        versions = VersionedCollection(session, settings, runtime.backend, corpus)
        model = ModelRegistry(session, settings).ensure_base()
        versions.promote(versions.build(model))
        versions.promote(versions.build(model))
        _, key = create_api_key(session, "bench-owner", ["owner"], [])
        session.commit()
    return key


def queries_of(dataset: Path, limit: int = 200) -> list[str]:
    import json

    lines = (dataset / "queries.jsonl").read_text().splitlines()[:limit]
    return [json.loads(line)["text"] for line in lines]


def swap_run(args: argparse.Namespace, home: Path) -> dict[str, Any]:
    key = prepare(home, args.dataset, args.documents)
    queries = queries_of(args.dataset)
    port = free_port()
    server = start_server(home, port)
    base, headers = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {key}"}
    counts = {"searches": 0, "failed": 0, "empty": 0, "swaps": 0, "swap_errors": 0}
    lock, stop = threading.Lock(), threading.Event()

    def searcher(worker: int) -> None:
        with httpx.Client(base_url=base, headers=headers, timeout=120) as client:
            i = worker
            while not stop.is_set():
                response = client.post(f"/v1/corpora/{CORPUS}/search", json={"query": queries[i % len(queries)]})
                with lock:
                    counts["searches"] += 1
                    counts["failed"] += response.status_code != 200
                    counts["empty"] += response.status_code == 200 and not response.json()["results"]
                i += args.clients

    threads = [threading.Thread(target=searcher, args=(w,)) for w in range(args.clients)]
    started = time.perf_counter()
    try:
        for thread in threads:
            thread.start()
        with httpx.Client(base_url=base, headers=headers, timeout=120) as admin:
            for swap in range(args.swaps):
                # v2 is active at the start: a rollback makes v1 active, promoting v2 swaps back; every call swaps.
                path = "rollback" if swap % 2 == 0 else "2/promote"
                response = admin.post(f"/v1/corpora/{CORPUS}/index-versions/{path}")
                counts["swaps"] += 1
                counts["swap_errors"] += response.status_code != 200
                # Let every swap overlap searches: wait until the clients have answered a few more.
                seen, deadline = counts["searches"], time.monotonic() + 30
                while counts["searches"] < seen + args.clients and time.monotonic() < deadline:
                    time.sleep(0.01)
            stop.set()
            for thread in threads:
                thread.join()
            versions = admin.get(f"/v1/corpora/{CORPUS}/index-versions").json()["versions"]
    finally:
        stop.set()
        server.terminate()
        server.wait(timeout=60)
    active = [v["collection"] for v in versions if v["state"] == "active"]
    return {**counts, "seconds": round(time.perf_counter() - started, 1), "active": active}


def startup_run(args: argparse.Namespace, home: Path) -> dict[str, Any]:
    prepare(home, None, 1)
    env = {**os.environ, "FERRET_HOME": str(home)}
    ferret = [sys.executable, "-c", "from ferret.cli.main import main; main()"]

    def median_of(command: list[str]) -> float:
        times = []
        for _ in range(args.runs):
            started = time.perf_counter()
            subprocess.run([*ferret, *command], env=env, check=True, capture_output=True)
            times.append(time.perf_counter() - started)
        return round(statistics.median(times), 2)

    load = os.getloadavg()[0]
    return {
        "load_average_1min": round(load, 2),
        "cpus": os.cpu_count(),
        "help_median_s": median_of(["--help"]),
        "cold_search_median_s": median_of(["search", "glaciers", "--corpus", CORPUS, "--mode", "sparse"]),
        # The default mode loads the query encoder: torch and sentence-transformers are imported then.
        "cold_hybrid_search_median_s": median_of(["search", "glaciers", "--corpus", CORPUS]),
        "runs": args.runs,
        "load_average_1min_after": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", choices=("swap", "startup"))
    parser.add_argument("--dataset", type=Path, default=None, help="BEIR folder (swap)")
    parser.add_argument("--documents", type=int, default=300)
    parser.add_argument("--swaps", type=int, default=250)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--home", type=Path, default=None)
    args = parser.parse_args()
    if args.run == "swap" and args.dataset is None:
        parser.error("swap needs --dataset")
    with tempfile.TemporaryDirectory(prefix="ferret-reliability-") as tmp:
        home = args.home or Path(tmp)
        result = swap_run(args, home) if args.run == "swap" else startup_run(args, home)
    print(result)


if __name__ == "__main__":
    main()
