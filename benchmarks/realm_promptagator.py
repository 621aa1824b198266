"""REALM → Promptagator against Promptagator alone, on one set of already generated synthetic queries (issue 13).

Both arms train exactly as the pipeline's train stage does (``ferret pipeline run`` and ``--init realm:<model>``):
the generation run's kept (query, document) pairs, the pipeline's held-out split (10%, seed 13), the pipeline's
defaults (learning rate 1e-5, WiSE-FT 0.5 with the model it started from) and ``DualEncoderTrainingConfig.scaled``;
only the starting weights differ (the base MiniLM, or a REALM-pre-trained retriever). Two steps, because the GPU
machine has no database:

    # here: the pairs of a Ferret home's generation run, as the train stage reads them
    python benchmarks/realm_promptagator.py export --home /work/wt13data/scifact-home --run 2 --out pairs.json.gz
    # there: train from each starting model, rank the bundle's corpus (benchmarks/realm.py's dense run)
    python benchmarks/realm_promptagator.py train --pairs pairs.json.gz --bundle B --out O \\
        --init base=O/base_fp32 --init realm=O/realm_wise

The rankings land in ``O/results.json`` beside REALM's, so ``benchmarks/realm.py report`` prints them as rows
``promptagator`` and ``realm_promptagator``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def export(home: Path, run_id: int, out: Path) -> None:
    from ferret.core.db.engine import session_scope
    from ferret.core.db.models import RetrievalTask
    from ferret.core.db.synthetic import document_texts, get_run, training_pairs
    from ferret.core.pipeline.promptagator.state import PipelineConfig
    from ferret.core.training.guard_evidence import passage_texts, split_held_out

    config = PipelineConfig()
    with session_scope(f"sqlite:///{home / 'ferret.db'}") as session:
        run = get_run(session, run_id)
        train, held_out = split_held_out(training_pairs(session, run), config.held_out_fraction, config.seed)
        task = session.get(RetrievalTask, run.task_id)
        assert task is not None
        texts = passage_texts(document_texts(session, task.corpus))
        data: dict[str, Any] = {
            "run": run_id,
            "queries": [query for query, _ in train],
            "passages": [texts[doc_id] for _, doc_id in train],
            "held_out_pairs": len(held_out),
            "learning_rate": config.learning_rate,
            "base_weight": config.base_weight,
            "seed": config.seed,
        }
    with gzip.open(out, "wt") as handle:
        json.dump(data, handle)
    print(f"{len(data['queries'])} training pairs ({len(held_out)} held out) from run {run_id} → {out}")


def train(pairs: Path, bundle: Path, out: Path, inits: list[str]) -> None:
    import torch

    from ferret.core.training.config import DualEncoderTrainingConfig
    from ferret.core.training.dual_encoder_trainer import train_dual_encoder
    from realm import _dense_run  # benchmarks/ is the script's folder

    with gzip.open(pairs, "rt") as handle:
        data = json.load(handle)
    with gzip.open(bundle / "data.json.gz", "rt") as handle:
        corpus = json.load(handle)
    path = out / "results.json"
    results: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {"runs": {}, "realm": {}}
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for spec in inits:
        name, start = spec.split("=", 1)
        if not Path(start).exists():
            print(f"{name}: {start} is missing, skipped", flush=True)
            continue
        started = time.perf_counter()
        config = DualEncoderTrainingConfig.scaled(
            len(data["queries"]),
            gpu=device == "cuda",
            base_model=start,
            output_dir=str(out / f"promptagator_{name}"),
            seed=data["seed"],
            learning_rate=data["learning_rate"],
            base_weight=data["base_weight"],
        )
        model_dir = train_dual_encoder(config, data["queries"], data["passages"])
        row = "promptagator" if name == "base" else f"{name}_promptagator"
        results["runs"][row] = _dense_run(str(model_dir), corpus, device)
        results.setdefault("promptagator", {})[row] = {
            "init": name,
            "pairs": len(data["queries"]),
            "training": config.to_json(),
            "wall_s": round(time.perf_counter() - started, 1),
        }
        path.write_text(json.dumps(results))
        print(f"{row}: {len(data['queries'])} pairs, {config.max_steps} steps, {time.perf_counter() - started:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    e = sub.add_parser("export")
    e.add_argument("--home", type=Path, required=True, help="a Ferret home (its ferret.db)")
    e.add_argument("--run", type=int, required=True, help="the generation run")
    e.add_argument("--out", type=Path, required=True)
    t = sub.add_parser("train")
    t.add_argument("--pairs", type=Path, required=True)
    t.add_argument("--bundle", type=Path, required=True, help="benchmarks/realm.py prepare's bundle")
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--init", action="append", required=True, help="name=sentence-transformers folder")
    args = parser.parse_args()
    if args.command == "export":
        export(args.home, args.run, args.out)
    else:
        train(args.pairs, args.bundle, args.out, args.init)


if __name__ == "__main__":
    main()
