"""GPU figures in one device call (issue 16, item 5): Ferret's index-build embedding path against a raw fp16
``encode`` of the same model on the same passages, and training steps/s of the dual-encoder trainer.

The device machine has no network and takes at most 64 MiB per call, so the work is split in three steps:

    # here (CPU): the bundle: MiniLM (fp16, its word-embedding matrix int8 per row), SciFact's passages chunked by
    # Ferret's chunker, and the 100k benchmark sentences of benchmarks/api_speed.py
    python benchmarks/gpu_speed.py prepare --dataset ../shared/datasets/scifact --sentences-from \
        ../shared/datasets/scifact --sentences-from ../shared/datasets/nfcorpus \
        --sentences-from ../shared/datasets/squad-v1.1-dev --bundle .gpu16/bundle
    # there (GPU): measure, embed the sentences, write the tables and the int8 vectors under $OUT
    python benchmarks/gpu_speed.py run --bundle .gpu16/bundle --out $OUT
    # here again: the returned vectors become benchmarks/api_speed.py's embedding cache
    python benchmarks/gpu_speed.py unpack --returned DIR --bundle .gpu16/bundle --cache benchmarks/out

What "Ferret's path" is: ``PointBuilder.build`` (``ferret.core.index.points``), the function every index build and
update calls per batch of passages: ``DualEncoder.encode_passages`` (fp16 on CUDA, ``FERRET_ENCODE_BATCH_SIZE``),
BM25 sparse vectors (Qdrant Edge's BM25, on the CPU) and the points with their payloads. The database reads and
the Qdrant upsert of a build are not in it (measured on the CPU in "Speed (issue 2)": about 1% of a build). "Raw" is
sentence-transformers' ``encode`` of the same fp16 model at the same batch size. The word-embedding matrix
travels int8 (per-row scale, to fit the 64 MiB) and is restored to float on the device: the network is MiniLM's,
its weights differ from the package's by that rounding, which changes no timing.
"""

from __future__ import annotations

import argparse
import json
import lzma
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

EMBEDDINGS = "embeddings.word_embeddings.weight"
SHARDS = 3  # returned int8 vector files: each under the device tool's 16 MB per file


def prepare(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from ferret.core.corpus.chunking import PassageChunker
    from ferret.core.eval.beir import iter_corpus
    from speed_support import corpus_sentences

    bundle: Path = args.bundle
    shutil.rmtree(bundle, ignore_errors=True)
    source = pack_model(bundle)

    from transformers import AutoTokenizer

    chunker = PassageChunker(AutoTokenizer.from_pretrained(str(source)), max_tokens=288, overlap=32)
    with lzma.open(bundle / "passages.jsonl.xz", "wt") as handle:
        for record in iter_corpus(args.dataset):
            for chunk in chunker.chunk(record.title, record.text):
                handle.write(json.dumps({"title": record.title, "text": chunk.text}) + "\n")
    sentences = [s.text for s in corpus_sentences(args.sentences_from, args.sentences)]
    (bundle / "sentences.json").write_text(json.dumps({"datasets": [d.name for d in args.sentences_from]}))
    with lzma.open(bundle / "sentences.txt.xz", "wt") as handle:
        handle.write("\n".join(sentences))
    print(f"bundle {bundle}: {sum(f.stat().st_size for f in bundle.rglob('*') if f.is_file()) / 2**20:.1f} MiB")


def pack_model(bundle: Path) -> Path:
    """MiniLM under ``bundle/model`` in ~34 MB: fp16, its word-embedding matrix int8 per row; returns the source."""
    from safetensors.numpy import load_file, save_file

    from ferret.core.encoder.registry import base_model_path

    model_dir = bundle / "model"
    source = base_model_path()
    shutil.copytree(source, model_dir, ignore=shutil.ignore_patterns("model.safetensors", "README.md", ".git*"))
    tensors = load_file(str(source / "model.safetensors"))
    words = tensors.pop(EMBEDDINGS).astype(np.float32)
    scale = np.abs(words).max(axis=1, keepdims=True) / 127.0
    save_file({name: t.astype(np.float16) for name, t in tensors.items()}, str(model_dir / "rest.fp16.safetensors"))
    quantized = np.round(words / scale).astype(np.int8)
    np.savez_compressed(model_dir / "words.int8.npz", q=quantized, scale=scale.astype(np.float32))
    return Path(source)


def restore_model(bundle: Path, target: Path) -> Path:
    """The fp32 model folder from the bundle: the trainer loads fp32 (AdamW on fp16 weights would not train)."""
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(bundle / "model", target, dirs_exist_ok=True)
    tensors = {name: t.float() for name, t in load_file(str(target / "rest.fp16.safetensors")).items()}
    words = np.load(target / "words.int8.npz")
    tensors[EMBEDDINGS] = torch.from_numpy(words["q"].astype(np.float32) * words["scale"])
    save_file(tensors, str(target / "model.safetensors"))
    (target / "rest.fp16.safetensors").unlink()
    (target / "words.int8.npz").unlink()
    return target


def timed(function: Any, repeats: int, *, before: Callable[[], None] | None = None) -> float:
    """Best wall time of ``repeats`` runs after one warm-up (GPU clocks, kernels, allocator). ``before`` runs, untimed,
    before each: Ferret's path empties the encoder's passage memo there, as a first build starts with none (a repeat
    would find every vector in it)."""
    import torch

    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    prepare = before or (lambda: None)
    prepare()
    function()
    best = float("inf")
    for _ in range(repeats):
        prepare()
        sync()
        started = time.perf_counter()
        function()
        sync()
        best = min(best, time.perf_counter() - started)
    return best


def run(args: argparse.Namespace) -> None:
    import torch
    from sentence_transformers import SentenceTransformer

    from ferret.core.corpus.chunking import passage_text
    from ferret.core.db.models import Document, Passage
    from ferret.core.encoder.dual_encoder import DualEncoder
    from ferret.core.index.points import PointBuilder
    from ferret.core.index.sparse import SparseEncoder
    from ferret.core.settings import FerretSettings
    from ferret.core.training.config import DualEncoderTrainingConfig
    from ferret.core.training.dual_encoder_trainer import train_dual_encoder

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    model = str(restore_model(args.bundle, Path("/tmp/ferret-gpu-model")))
    settings = FerretSettings(home=Path("/tmp/ferret-gpu-home"))
    device = args.device
    gpu = torch.cuda.get_device_name(0) if device == "cuda" else "cpu (smoke run)"
    result: dict[str, Any] = {"gpu": gpu, "torch": torch.__version__, "batch_size": settings.encode_batch_size}
    with lzma.open(args.bundle / "passages.jsonl.xz", "rt") as handle:
        records = [json.loads(line) for line in handle][: args.limit]
    rows = []
    for i, record in enumerate(records):
        document = Document(id=i, external_id=str(i), title=record["title"], source="bench", acl_groups=["public"])
        document.meta = {}
        rows.append((Passage(id=i, corpus_id=1, text=record["text"]), document))
    texts = [passage_text(document.title, passage.text) for passage, document in rows]
    encoder = DualEncoder.load(model, device=device, max_seq_length=settings.max_passage_tokens + 2)
    builder = PointBuilder(encoder, SparseEncoder.for_wordpiece_length(220.0), batch_size=settings.encode_batch_size)
    raw = SentenceTransformer(model, device=device, local_files_only=True)
    if device == "cuda":
        raw.half()  # what DualEncoder.load does on CUDA
    raw.max_seq_length = encoder.max_seq_length
    table = []
    for batch in sorted({settings.encode_batch_size, 256}):
        builder.batch_size = batch
        ferret_s = timed(lambda: builder.build(rows), args.repeats, before=encoder.passage_memo.clear)
        embed_s = timed(
            lambda b=batch: encoder.encode_passages(texts, batch_size=b),
            args.repeats,
            before=encoder.passage_memo.clear,
        )
        raw_s = timed(
            lambda b=batch: raw.encode(texts, batch_size=b, normalize_embeddings=True, convert_to_numpy=True),
            args.repeats,
        )
        table.append(
            {
                "batch": batch,
                "passages": len(texts),
                "ferret_point_builder_per_s": len(texts) / ferret_s,
                "ferret_encode_passages_per_s": len(texts) / embed_s,
                "raw_fp16_encode_per_s": len(texts) / raw_s,
                "ratio_point_builder": raw_s / ferret_s,
                "ratio_encode": raw_s / embed_s,
            }
        )
        print(json.dumps(table[-1]), flush=True)
    result["embedding"] = table

    with lzma.open(args.bundle / "sentences.txt.xz", "rt") as handle:
        sentences = handle.read().split("\n")[: args.limit]
    started = time.perf_counter()
    vectors = encoder.encode_passages(sentences, batch_size=256)
    result["sentences"] = {"count": len(sentences), "seconds": time.perf_counter() - started}
    scale = np.abs(vectors).max(axis=1, keepdims=True) / 127.0
    quantized = np.round(vectors / scale).astype(np.int8)
    for part, rows_part in enumerate(np.array_split(np.arange(len(sentences)), SHARDS)):
        np.save(out / f"sentences-int8-{part}.npy", quantized[rows_part])
    np.save(out / "sentences-scale.npy", scale.astype(np.float32))
    print(json.dumps(result["sentences"]), flush=True)

    queries = [record["title"] for record in records]
    steps: list[float] = []
    training = []
    for batch_size in args.train_batches:
        steps.clear()
        config = DualEncoderTrainingConfig(
            base_model=model, output_dir=f"/tmp/ferret-gpu-train-{batch_size}", batch_size=batch_size,
            max_steps=args.train_steps, device=device,
        )  # fmt: skip
        started = time.perf_counter()
        train_dual_encoder(config, queries, texts, progress=lambda _a, _f: steps.append(time.perf_counter()))
        total = time.perf_counter() - started
        timed_steps = steps[10:]  # the first steps pay for kernels and the allocator
        rate = (len(timed_steps) - 1) / (timed_steps[-1] - timed_steps[0])
        training.append({"batch": batch_size, "steps": args.train_steps, "steps_per_s": rate, "wall_s": total})
        print(json.dumps(training[-1]), flush=True)
    result["training"] = training
    (out / "gpu-speed.json").write_text(json.dumps(result, indent=1))


def unpack(args: argparse.Namespace) -> None:
    """The returned int8 vectors (dequantised, renormalised) as api_speed.py's cache of the 100k sentences."""
    import hashlib
    from datetime import UTC, datetime

    from ferret.core.encoder.registry import base_model_path

    with lzma.open(args.bundle / "sentences.txt.xz", "rt") as handle:
        sentences = handle.read().split("\n")
    datasets = json.loads((args.bundle / "sentences.json").read_text())["datasets"]
    parts = [np.load(args.returned / f"sentences-int8-{part}.npy") for part in range(SHARDS)]
    vectors = np.concatenate(parts).astype(np.float32) * np.load(args.returned / "sentences-scale.npy")
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    model = str(base_model_path())
    key = f"speed-sentences_{'+'.join(datasets)}_{len(sentences)}_{Path(model).name}"
    args.cache.mkdir(parents=True, exist_ok=True)
    np.save(args.cache / f"{key}.npy", vectors.astype(np.float32))
    speed = json.loads((args.returned / "gpu-speed.json").read_text())
    meta = {
        "sha256": hashlib.sha256("\n".join(sentences).encode()).hexdigest(),
        "model": model,
        "device": f"{speed['gpu']} fp16, returned int8 per row",
        "texts": len(sentences),
        "seconds": speed["sentences"]["seconds"],
        "per_second": len(sentences) / speed["sentences"]["seconds"],
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    (args.cache / f"{key}.json").write_text(json.dumps(meta, indent=1))
    print(f"cache {args.cache / key}.npy: {vectors.shape}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("prepare")
    make.add_argument("--dataset", type=Path, required=True, help="BEIR folder whose passages are embedded")
    make.add_argument("--sentences-from", type=Path, action="append", required=True)
    make.add_argument("--sentences", type=int, default=100_000)
    make.add_argument("--bundle", type=Path, required=True)
    measure = commands.add_parser("run")
    measure.add_argument("--bundle", type=Path, required=True)
    measure.add_argument("--out", type=Path, required=True)
    measure.add_argument("--repeats", type=int, default=3)
    measure.add_argument("--train-steps", type=int, default=60)
    measure.add_argument("--device", default="cuda")
    measure.add_argument("--train-batches", type=int, nargs="+", default=[32, 128])
    measure.add_argument("--limit", type=int, default=None, help="passages and sentences, for a smoke run")
    back = commands.add_parser("unpack")
    back.add_argument("--returned", type=Path, required=True)
    back.add_argument("--bundle", type=Path, required=True)
    back.add_argument("--cache", type=Path, required=True)
    args = parser.parse_args()
    {"prepare": prepare, "run": run, "unpack": unpack}[args.command](args)


if __name__ == "__main__":
    main()
