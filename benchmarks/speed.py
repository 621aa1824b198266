"""Speed of the platform beside its raw parts, one run: indexing throughput and search latency.

Usage:
    python benchmarks/speed.py --dataset ../shared/datasets/scifact --dataset ../shared/datasets/nfcorpus \
        --dataset ../shared/datasets/squad-v1.1-dev [--part both|index|search] [--index-docs 2000] \
        [--search-passages 100000] [--queries 500] [--cache benchmarks/out] [--home DIR] \
        [--json benchmarks/out/speed.json]

(a) Indexing: the first --index-docs documents of the datasets (in order) are ingested into a fresh corpus
    (chunking + database rows), built into a versioned collection (embed + BM25 + upsert + finalize) and promoted
    (alias swap). That end-to-end time is compared with a raw encode of exactly the
    passage texts the platform embedded, same warm encoder, same run: sentence-transformers' own ``encode`` of the
    model in one call, which neither reads nor fills the encoder's passage memo (the build's embedding would
    otherwise find every vector there). Goal: overhead at most 10 %.
(b) Search: sentences of the datasets' corpora (regex splitter, 5-60 words, deduplicated; titles count as
    sentences) become --search-passages real passages, embedded with the base model (cached as .npy under
    --cache, so a re-run skips the embedding) and BM25-encoded, then indexed in the embedded backend. Real queries
    from the datasets' queries.jsonl are timed through the platform (``Searcher.search``: database lookup, query
    encoding, ``EdgeIndexBackend``, dedupe), the raw Qdrant Edge shard query, the query encoder alone and an exact
    numpy dot product, at 1 and 8 concurrent callers. Goals: platform p99 at most 1.2 x (raw shard p99 + encoding
    p99), and HNSW recall@10 against exact search at least 0.95.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any
from unittest.mock import patch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
from rich.table import Table

if TYPE_CHECKING:
    pass


from speed_search import print_search, search_benchmark
from speed_support import (
    OVERHEAD_GOAL,
    Platform,
    Stages,
    console,
    first_documents_connector,
    indexed_vectors_note,
    machine_info,
    open_platform,
    open_session,
)


def index_benchmark(app: Platform, datasets: Sequence[Path], n_docs: int) -> dict[str, Any]:
    from ferret.core.corpus.chunking import passage_text
    from ferret.core.corpus.ingest import Ingestor
    from ferret.core.db.corpus import create_corpus
    from ferret.core.db.document import iter_passages
    from ferret.core.encoder.registry import ModelRegistry
    from ferret.core.index.points import PointBuilder
    from ferret.core.index.sparse import SparseEncoder
    from ferret.core.index.versioned_collection import VersionedCollection

    settings, backend = app.settings, app.backend
    session = open_session(settings)
    try:
        model = ModelRegistry(session, settings).ensure_base()
        encoder = ModelRegistry(session, settings).encoder(model)
        corpus = create_corpus(
            session,
            f"speed-index-{app.stamp}",
            max_passage_tokens=settings.max_passage_tokens,
            passage_overlap_tokens=settings.passage_overlap_tokens,
        )
        session.commit()
        connector = first_documents_connector(datasets, n_docs)
        warm = [passage_text(d.title, d.text) for d in islice(connector.load_from_source(), settings.encode_batch_size)]
        library: Any = encoder.model  # sentence-transformers itself: no passage memo
        library.encode(warm, batch_size=settings.encode_batch_size)  # warm-up batch, before both timings
        ingestor = Ingestor(session, settings, backend, corpus)  # loads the chunking tokenizer (once per process)
        stages = Stages()

        console.print(f"[dim]ingesting {n_docs} documents into {corpus.name}[/dim]")
        with patch.object(ingestor.chunker, "chunk", stages.timed("chunk", ingestor.chunker.chunk)):
            started = time.perf_counter()
            report = ingestor.run(connector)
            ingest_s = time.perf_counter() - started

        rows = [row for batch in iter_passages(session, corpus) for row in batch]
        texts = [passage_text(document.title, passage.text) for passage, document in rows]
        tokens = [passage.token_count for passage, _ in rows]
        console.print(f"[dim]raw encode of {len(texts)} passages[/dim]")
        started = time.perf_counter()
        library.encode(texts, batch_size=settings.encode_batch_size, normalize_embeddings=True)
        raw_s = time.perf_counter() - started

        console.print("[dim]build + promote[/dim]")
        versions = VersionedCollection(session, settings, backend, corpus)
        with ExitStack() as stack:
            for owner, name, stage in (
                (encoder, "encode_passages", "embed"),
                (SparseEncoder, "embed_documents", "sparse"),
                (PointBuilder, "build", "points"),
                (backend, "create_collection", "create"),
                (backend, "upsert", "upsert"),
                (backend, "finalize", "finalize"),
                (backend, "count", "count"),
            ):
                stack.enter_context(patch.object(owner, name, stages.timed(stage, getattr(owner, name))))
            started = time.perf_counter()
            index_version = versions.build(model)
            build_s = time.perf_counter() - started
        started = time.perf_counter()
        versions.promote(index_version)
        promote_s = time.perf_counter() - started
        info = backend._shard(index_version.collection).info()  # the shard the backend itself holds open
    finally:
        session.close()

    platform_s = ingest_s + build_s + promote_s
    breakdown = {
        "chunk (tokenizer)": stages.get("chunk"),
        "documents + passages to DB": ingest_s - stages.get("chunk"),
        "embed (dense)": stages.get("embed"),
        "sparse (BM25)": stages.get("sparse"),
        "point assembly": stages.get("points") - stages.get("embed") - stages.get("sparse"),
        "upsert": stages.get("upsert"),
        "finalize (optimize + flush)": stages.get("finalize"),
        "create collection + payload indexes": stages.get("create"),
        "read passages, count, DB bookkeeping": build_s
        - stages.get("points")
        - stages.get("create")
        - stages.get("upsert")
        - stages.get("finalize"),
        "promote (alias swap)": promote_s,
    }
    n = len(texts)
    return {
        "documents": report.added,
        "passages": n,
        "mean_passage_tokens": float(np.mean(tokens)),
        "device": encoder.device,
        "batch_size": settings.encode_batch_size,
        "segments": info.segments_count,
        "indexed_vectors": info.indexed_vectors_count,
        "indexed": indexed_vectors_note(info.indexed_vectors_count, n),
        "raw_encode_s": raw_s,
        "raw_passages_per_s": n / raw_s,
        "platform_s": platform_s,
        "platform_passages_per_s": n / platform_s,
        "overhead": platform_s / raw_s - 1,
        "embed_vs_raw": stages.get("embed") / raw_s - 1,
        "stages_s": breakdown,
        "goal_overhead": OVERHEAD_GOAL,
        "pass": platform_s / raw_s - 1 <= OVERHEAD_GOAL,
    }


def print_index(result: dict[str, Any]) -> None:
    n, platform_s, raw_s = result["passages"], result["platform_s"], result["raw_encode_s"]
    table = Table(
        title=f"(a) Indexing {result['documents']} documents = {n} passages "
        f"(mean {result['mean_passage_tokens']:.0f} wordpieces), device {result['device']}"
    )
    for column in ("stage", "seconds", "% of platform", "passages/s"):
        table.add_column(column, justify="left" if column == "stage" else "right")
    for stage, seconds in result["stages_s"].items():
        rate = f"{n / seconds:,.0f}" if seconds > 0 else "-"
        table.add_row(f"  {stage}", f"{seconds:.2f}", f"{100 * seconds / platform_s:.1f}", rate)
    table.add_row("platform: ingest + build + promote", f"{platform_s:.2f}", "100.0", f"{n / platform_s:,.1f}")
    table.add_row(
        "raw encode (sentence-transformers)", f"{raw_s:.2f}", f"{100 * raw_s / platform_s:.1f}", f"{n / raw_s:,.1f}"
    )
    console.print(table)
    verdict = "PASS" if result["pass"] else "FAIL"
    console.print(
        f"  {verdict}  overhead = platform / raw encode - 1 = {100 * result['overhead']:+.1f} % "
        f"(goal <= {100 * OVERHEAD_GOAL:.0f} %); the platform's own embed step alone is "
        f"{100 * result['embed_vs_raw']:+.1f} % vs raw; collection: {result['segments']} segment(s), "
        f"{result['indexed']}"
    )


# -- (b) search latency --------------------------------------------------------------------------------------------
def _json_default(value: object) -> object:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, action="append", required=True, help="BEIR folder; repeatable")
    parser.add_argument("--part", choices=("both", "index", "search"), default="both")
    parser.add_argument("--index-docs", type=int, default=2000)
    parser.add_argument("--search-passages", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--hnsw-ef", type=int, action="append", default=None, help="default: 64, 128, 256")
    parser.add_argument("--cache", type=Path, default=Path(__file__).resolve().parent / "out")
    parser.add_argument("--home", type=Path, default=None, help="FERRET_HOME of the run; default: a temporary folder")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    home = args.home or Path(tempfile.mkdtemp(prefix="ferret-speed-"))
    machine = machine_info()
    dirty = " (uncommitted changes)" if machine["dirty"] else ""
    console.print(
        f"machine: {machine['host']}, {machine['cpu']}, {machine['cpus']} cpus, {machine['memory_gib']} GiB, "
        f"load {machine['load_average']}; torch {machine['torch']} ({machine['torch_threads']} threads), "
        f"cuda: {machine['cuda'] or 'none'}"
    )
    console.print(f"commit {machine['commit']}{dirty}; {machine['date']}; home {home}")
    if machine["load_average"][0] > 0.5 * (machine["cpus"] or 1):
        console.print("[yellow]the machine is busy (load average above half the cpus): timings will be noisy[/yellow]")
    report: dict[str, Any] = {"machine": machine, "args": {k: v for k, v in vars(args).items()}}
    app = open_platform(home)
    try:
        if args.part in ("both", "index"):
            started = time.perf_counter()
            report["index"] = index_benchmark(app, args.dataset, args.index_docs)
            report["index"]["wall_s"] = time.perf_counter() - started
            print_index(report["index"])
        if args.part in ("both", "search"):
            started = time.perf_counter()
            efs = args.hnsw_ef or [64, 128, 256]
            report["search"] = search_benchmark(app, args.dataset, args.search_passages, args.queries, args.cache, efs)
            report["search"]["wall_s"] = time.perf_counter() - started
            print_search(report["search"])
    finally:
        app.backend.close()
        if args.home is None:
            shutil.rmtree(home, ignore_errors=True)
    walls = ", ".join(f"{part} {report[part]['wall_s']:.0f} s" for part in ("index", "search") if part in report)
    console.print(f"wall time: {walls}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2, default=_json_default))
        console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
