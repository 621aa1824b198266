"""Promptagator on a BEIR dataset: every system side by side, from one run.

Usage:
    python benchmarks/promptagator.py --dataset ../shared/datasets/scifact [--split test] [--train-split train] \
        [--examples 8] [--seed 13] [--e-doc Article --e-query Claim --description "..."] \
        [--max-documents N] [--queries-per-doc 1] [--rows zero-shot,unfiltered,filtered,best] \
        [--variant 'lr5e-6={"learning_rate": 5e-6}' ...] [--zero-shot-max-documents N] \
        [--home DIR] [--json benchmarks/out/promptagator-scifact.json]

Few-shot examples come from the train split (a fixed-seed sample, recorded in the output); a folder without one gives
them from ``dev``, or else from the evaluated split, whose example queries are then left out of the evaluation.
Rows: BM25 | base | zero-shot trained | few-shot unfiltered | few-shot filtered (Promptagator: round trip with the
retriever trained on the unfiltered pairs, K=1) | best recipe (Ferret's defaults: examples cut to 250 characters in the
prompt, length/copy filters, round trip with the base model at the K the examples give, lr 1e-5, WiSE-FT 0.5).
"unfiltered" and "filtered" are the naive recipe of EVALUATION.md (whole examples, learning rate 2e-5, batch 32, one
epoch, no length/copy filters), the case the guard must refuse.
``--variant NAME=JSON`` adds a few-shot row whose pipeline settings are the best recipe's with JSON's keys changed
(the recipe study: one change at a time); the key ``example_chars`` changes the prompt instead (a task of its own,
with its own generation run). A row whose model already exists in ``--home`` is reused, not trained again, so a
study can grow over several invocations. Each trained row reports nDCG@10 dense and hybrid,
Recall@100, the guard's estimate, queries generated / kept, and seconds per stage. Generation is shared by the
rows of one task (the generation run is reused), so only the first few-shot row pays for it.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROWS = ("zero-shot", "unfiltered", "filtered", "best")
NAIVE_ROWS = ("unfiltered", "filtered")


def example_split(dataset: Path, wanted: str, evaluated: str) -> str:
    """The qrels split the few-shot examples come from: ``wanted`` when the folder has it, else ``dev``, else the
    evaluated split itself (many BEIR collections ship only ``test``), whose example queries the caller must then
    leave out of the evaluation (``pick_examples``)."""
    folder = dataset / "qrels"
    for split in (wanted, "dev"):
        if split != evaluated and (folder / f"{split}.tsv").is_file():
            return split
    return evaluated


def pick_examples(dataset: Path, split: str, count: int, seed: int) -> list[dict[str, str]]:
    """``count`` (query, first relevant document) pairs of ``split``, a fixed-seed sample."""
    from ferret.core.eval.beir import load_qrels, load_queries

    queries, qrels = load_queries(dataset), load_qrels(dataset, split)
    candidates = sorted(q for q, docs in qrels.items() if q in queries and any(r > 0 for r in docs.values()))
    chosen = random.Random(seed).sample(candidates, min(count, len(candidates)))
    return [
        {"query": queries[q], "document": sorted(d for d, r in qrels[q].items() if r > 0)[0], "query_id": q}
        for q in chosen
    ]


def task_parser(doc: str | None, *, max_documents: int | None) -> argparse.ArgumentParser:
    """The options every few-shot benchmark on a BEIR folder takes: the dataset and its splits, the task's examples
    (how many, seeded) and its descriptions, and how many documents get queries (``max_documents`` by default)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--train-split", default="train")
    parser.add_argument("--examples", type=int, default=8)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--e-doc", default="Document")
    parser.add_argument("--e-query", default="Query")
    parser.add_argument("--description", default="")
    parser.add_argument("--max-documents", type=int, default=max_documents)
    return parser


def main() -> None:
    parser = task_parser(__doc__, max_documents=None)
    parser.add_argument("--queries-per-doc", type=int, default=1)
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=JSON")
    parser.add_argument("--zero-shot-max-documents", type=int, default=None)
    parser.add_argument("--home", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    rows = [r for r in args.rows.split(",") if r]
    if unknown := set(rows) - set(ROWS):
        parser.error(f"unknown rows: {', '.join(sorted(unknown))}")

    os.environ["FERRET_HOME"] = str(args.home or Path(tempfile.mkdtemp(prefix="ferret-promptagator-")))
    from rich.console import Console
    from rich.table import Table

    from ferret.cli.render import eval_table
    from ferret.connectors.beir.connector import BeirConnector
    from ferret.connectors.registry import build_connector
    from ferret.core.corpus.ingest import Ingestor
    from ferret.core.db.corpus import get_or_create_corpus
    from ferret.core.db.model_version import find_model_version
    from ferret.core.db.synthetic import get_run
    from ferret.core.db.task import find_task
    from ferret.core.encoder.registry import ModelRegistry
    from ferret.core.errors import FerretError
    from ferret.core.eval.evaluate import corpus_name_for, evaluate_dataset
    from ferret.core.llm.factory import build_backend
    from ferret.core.pipeline.promptagator.in_process import PipelineConfig, PipelineResult, run_pipeline
    from ferret.core.synth.filters import FilterReport
    from ferret.core.synth.task_spec import ExampleSpec, GenerationSettings, TaskSpec, create_task
    from ferret.core.training.guard import run_guard
    from ferret.core.training.guard_evidence import guard_evidence
    from ferret.runtime.context import app_context

    console = Console(width=160)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    console.print(f"{args.dataset.name}: commit {commit}, {os.cpu_count()} cpus, home {os.environ['FERRET_HOME']}")
    source_split = example_split(args.dataset, args.train_split, args.split)
    examples = pick_examples(args.dataset, source_split, args.examples, args.seed)
    held_back = {e["query_id"] for e in examples} if source_split == args.split else set()
    console.print(f"examples ({source_split} split, seed {args.seed}): {[e['query_id'] for e in examples]}")
    if held_back:
        console.print(
            f"no {args.train_split} or dev qrels: the {len(held_back)} example queries are left out of the evaluation"
        )
    corpus_name = corpus_name_for(args.dataset)
    report: dict[str, Any] = {
        "dataset": args.dataset.name, "commit": commit, "examples": examples, "examples_split": source_split,
        "rows": [],
    }  # fmt: skip
    results: dict[str, PipelineResult] = {}
    with app_context() as ctx:
        corpus = get_or_create_corpus(ctx.session, corpus_name)
        started = time.perf_counter()
        Ingestor(ctx.session, ctx.settings, ctx.backend, corpus).run(BeirConnector(path=str(args.dataset), name="beir"))
        console.print(f"ingest {time.perf_counter() - started:.0f} s")

        def task(name: str, zero_shot: bool) -> Any:
            max_documents = args.zero_shot_max_documents if zero_shot else None
            example_chars = int(name.rsplit("-ex", 1)[1]) if "-ex" in name else None
            generation = GenerationSettings(
                queries_per_doc=args.queries_per_doc,
                max_documents=max_documents or args.max_documents,
                seed=args.seed,
                example_chars=example_chars,
            )
            spec = TaskSpec(
                name=name,
                corpus=corpus_name,
                description=args.description,
                e_doc=args.e_doc,
                e_query=args.e_query,
                zero_shot=zero_shot,
                generation=generation,
                examples=[] if zero_shot else [ExampleSpec(query=e["query"], document=e["document"]) for e in examples],
            )
            found = find_task(ctx.session, name) or create_task(ctx.session, spec)
            ctx.session.commit()
            return found

        llm = build_backend(ctx.settings)
        # EVALUATION.md's recipe, spelled out so that a change of Ferret's defaults does not change it.
        naive = {"basic_filters": False, "learning_rate": 2e-5, "batch_size": 32, "base_weight": 0.0}
        best = PipelineConfig()  # Ferret's default recipe
        plans = {
            "zero-shot": ("zero-shot", True, best),
            "unfiltered": ("few-shot", False, PipelineConfig(round_trip="none", **naive)),  # type: ignore[arg-type]
            "filtered": ("few-shot", False, PipelineConfig(round_trip="unfiltered", round_trip_k=1, **naive)),  # type: ignore[arg-type]
            "best": ("few-shot-ex250", False, best),  # the default prompt: examples cut to 250 characters
        }
        for variant in args.variant:
            name, _, text = variant.partition("=")
            changes = json.loads(text)
            task_name = f"few-shot-ex{changes.pop('example_chars', 250)}"
            plans[name] = (task_name, False, PipelineConfig(**{**best.to_json(), **changes}))
            rows.append(name)

        registry = ModelRegistry(ctx.session, ctx.settings)

        @functools.cache
        def base_encoder() -> Any:
            return registry.encoder(registry.get("base"))

        def stored(name: str) -> PipelineResult | None:
            """The result of a row trained by an earlier invocation on this home, its guard run again with the
            current guard (so every row is judged the same way)."""
            model = find_model_version(ctx.session, name)
            if model is None or not model.training_config or "guard" not in model.metrics:
                return None
            run = get_run(ctx.session, model.training_config["generation_run"])
            recipe = PipelineConfig(**model.training_config["pipeline"])
            evidence = guard_evidence(
                ctx.session, run.task, run, held_out_fraction=recipe.held_out_fraction, seed=recipe.seed
            )
            guard = run_guard(registry.encoder(model), base_encoder(), evidence)
            return PipelineResult(
                run=run,
                filters=FilterReport(**model.training_config["filters"]),
                model=model,
                guard=guard,
                index_version=None,
                promoted=False,
                seconds={"reused": 0.0},
            )

        try:
            for row in rows:
                task_name, zero_shot, config = plans[row]
                if (previous := stored(row)) is not None:
                    console.print(f"[bold]{row}[/bold]: reusing the model trained earlier in this home")
                    results[row] = previous
                    continue
                if row == "filtered" and "unfiltered" not in results:
                    console.print("[yellow]filtered needs the unfiltered row first; skipped[/]")
                    continue
                # The naive rows generate with their task's own settings, so "filtered" round-trips the very
                # queries "unfiltered" trained on; the other rows take this invocation's sizes.
                sizes = {} if row in NAIVE_ROWS else {
                    "queries_per_doc": args.queries_per_doc,
                    "max_documents": (zero_shot and args.zero_shot_max_documents) or args.max_documents,
                }  # fmt: skip
                config = PipelineConfig(
                    **{**config.to_json(), "promote": "never", "model_name": row, "seed": args.seed, **sizes}
                )
                console.print(f"[bold]{row}[/bold]: {config.to_json()}")
                try:
                    results[row] = run_pipeline(
                        ctx.session, ctx.settings, ctx.backend, task(task_name, zero_shot), llm, config
                    )
                except FerretError as error:  # e.g. every query filtered out: report the row, keep the others
                    ctx.session.rollback()
                    console.print(f"[red]{row} failed:[/] {error}")
                    report["rows"].append({"name": row, "error": str(error)})
        finally:
            llm.close()
        evaluation = evaluate_dataset(
            ctx.session, ctx.settings, ctx.backend, args.dataset, connectors=build_connector, split=args.split,
            corpus_name=corpus_name, models=["base", *results], modes=("dense", "hybrid"), exclude_queries=held_back,
        )  # fmt: skip
    console.print(eval_table(f"{args.dataset.name} ({args.split})", evaluation))

    table = Table(title=f"Promptagator on {args.dataset.name}: trained rows")
    for column in ("row", "nDCG dense", "nDCG hybrid", "R@100 dense", "guard (held-out MRR cand/active)",
                   "passed", "generated", "kept", "seconds per stage"):  # fmt: skip
        table.add_column(column)
    metrics = {(r.model, r.mode): r.metrics for r in evaluation if r.model}
    for row, result in results.items():
        dense, hybrid = metrics[(row, "dense")], metrics[(row, "hybrid")]
        guard = result.guard
        table.add_row(
            row,
            f"{dense['ndcg@10']:.1f}",
            f"{hybrid['ndcg@10']:.1f}",
            f"{dense['recall@100']:.1f}",
            f"{guard.candidate.held_out_mrr:.3f} / {guard.reference.held_out_mrr:.3f} (n={guard.held_out}, "
            f"low {guard.held_out_gain_low:+.3f})",
            "yes" if guard.passed else "no",
            str(result.filters.considered),
            str(result.filters.kept),
            ", ".join(f"{k} {v:.0f}" for k, v in result.seconds.items()),
        )
        report["rows"].append(
            {"name": row, "dense": dense, "hybrid": hybrid, "guard": guard.as_dict(),
             "generated": result.filters.considered, "kept": result.filters.kept, "seconds": result.seconds}
        )  # fmt: skip
    console.print(table)
    report["evaluation"] = [r.as_dict() for r in evaluation]
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
