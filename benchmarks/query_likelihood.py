"""The task's few-shot generator as a reranker: query likelihood (UPR, Sachan et al. 2022), measured on a test split.

A candidate passage p of query q is scored by log P(q | the task's few-shot prefix, "{e_doc}: p", "{e_query}:")
under the embedded generator (SmolLM2-135M), the Promptagator prompt read backwards: no training, the task's own
examples as the only adaptation. The first stage is the home's untrained default (base index, default fusion); the
top ``--depth`` documents are rescored, min-max normalised and fused with the first stage's scores at the weights
printed (w = 0: the first stage alone; w = 1: the likelihood alone), as the trained reranker is
(``rerank.cross_encoder.fused_scores``).

Usage (a home made by ``benchmarks/search_configs.py`` on the same collection, with its task and converted
generator under ``models/generators``):
    python benchmarks/query_likelihood.py score --dataset ../shared/datasets/scifact --home H --out OUT.jsonl \
        [--depth 10] [--limit 96]
    python benchmarks/query_likelihood.py report --dataset ../shared/datasets/scifact --out OUT.jsonl

``score`` appends one line per query (resumable: a rerun continues) and prints the p50 time of the scoring per query.
The few-shot prefix's key/value cache is computed once and reused for every candidate.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0)


def score(args: argparse.Namespace) -> None:
    os.environ["FERRET_HOME"] = str(args.home)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.cache_utils import DynamicCache

    from ferret.core.corpus.chunking import passage_text
    from ferret.core.db.corpus import get_corpus
    from ferret.core.db.models import RetrievalTask
    from ferret.core.eval.beir import load_qrels, load_queries
    from ferret.core.eval.evaluate import corpus_name_for
    from ferret.core.search.configuration import base_plan
    from ferret.core.synth.generation import task_prompt_builder
    from ferret.core.synth.prompt import PromptBudget, one_line, truncate
    from ferret.core.synth.task_spec import GenerationSettings
    from ferret.runtime.context import app_context

    torch.set_num_threads(args.threads)
    folder = next((args.home / "models" / "generators").iterdir())
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    pad = tokenizer.pad_token_id or 0

    def tokens(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    @torch.inference_mode()
    def log_likelihoods(prefix: list[int], cache: Any, suffixes: list[list[int]], query: list[int]) -> list[float]:
        """Summed log P(query | prefix + suffix) for each suffix, the suffixes in one right-padded batch."""
        rows = [suffix + query for suffix in suffixes]
        width, count = max(len(row) for row in rows), len(rows)
        ids = torch.full((count, width), pad, dtype=torch.long)
        mask = torch.zeros((count, width), dtype=torch.long)
        for index, row in enumerate(rows):
            ids[index, : len(row)] = torch.tensor(row)
            mask[index, : len(row)] = 1
        batch_cache = copy.deepcopy(cache)
        batch_cache.batch_repeat_interleave(count)
        output = model(
            input_ids=ids,
            attention_mask=torch.cat([torch.ones((count, len(prefix)), dtype=torch.long), mask], 1),
            position_ids=(len(prefix) + torch.arange(width)).unsqueeze(0).expand(count, -1),
            past_key_values=batch_cache,
            use_cache=True,
        )
        target = torch.tensor(query).unsqueeze(1)
        sums = []
        for index, suffix in enumerate(suffixes):
            logits = output.logits[index, len(suffix) - 1 : len(suffix) - 1 + len(query)].float()
            sums.append(float(torch.log_softmax(logits, -1).gather(1, target).sum()))
        return sums

    queries, qrels = load_queries(args.dataset), load_qrels(args.dataset, args.split)
    todo = [q for q in qrels if q in queries][: args.limit]
    done = {json.loads(line)["qid"] for line in args.out.read_text().splitlines()} if args.out.exists() else set()
    todo = [q for q in todo if q not in done]
    times: list[float] = []
    with app_context() as ctx, args.out.open("a") as out:
        corpus = get_corpus(ctx.session, corpus_name_for(args.dataset))
        plan = base_plan(ctx.session, corpus)
        task = ctx.session.query(RetrievalTask).filter_by(corpus_id=corpus.id).first()
        if task is None:
            sys.exit(f"{args.home} holds no task on corpus {corpus.name}; run benchmarks/search_configs.py first.")
        settings = GenerationSettings.model_validate(task.generation or {})
        builder = task_prompt_builder(
            ctx.session, task, PromptBudget(max_new_tokens=settings.max_tokens), example_chars=settings.example_chars
        )
        prefix = tokens(builder.prefix)
        cache = DynamicCache()
        with torch.inference_mode():
            model(input_ids=torch.tensor([prefix]), use_cache=True, past_key_values=cache)
        print(f"few-shot prefix: {len(prefix)} tokens; {len(todo)} queries to score", file=sys.stderr)
        for start in range(0, len(todo), 8):
            part = todo[start : start + 8]
            found = ctx.searcher.search_many(corpus.name, [queries[q] for q in part], k=100, mode="hybrid", plan=plan)
            for qid, results in zip(part, found, strict=True):
                began = time.perf_counter()
                suffixes = [
                    tokens(
                        f"{task.e_doc}: {truncate(one_line(passage_text(r.title, r.text)), builder.document_chars)}"
                        f"\n{task.e_query}:"
                    )
                    for r in results[: args.depth]
                ]
                likelihoods = log_likelihoods(prefix, cache, suffixes, tokens(" " + one_line(queries[qid]) + "\n"))
                times.append(time.perf_counter() - began)
                row = {"qid": qid, "ids": [r.external_id for r in results], "first": [r.score for r in results],
                       "likelihood": likelihoods}  # fmt: skip
                out.write(json.dumps(row) + "\n")
                out.flush()
    if times:
        p50_ms = statistics.median(times) * 1000
        print(f"{len(times)} queries scored at depth {args.depth}: p50 {p50_ms:.0f} ms per query")


def report(args: argparse.Namespace) -> None:
    from ferret.core.eval.beir import load_qrels

    qrels = load_qrels(args.dataset, args.split)
    rows = [json.loads(line) for line in args.out.read_text().splitlines()]

    def ndcg10(ranked: list[str], relevant: dict[str, int]) -> float:
        gain = sum((2 ** relevant.get(d, 0) - 1) / math.log2(i + 2) for i, d in enumerate(ranked[:10]))
        ideal = sorted(relevant.values(), reverse=True)[:10]
        best = sum((2**r - 1) / math.log2(i + 2) for i, r in enumerate(ideal))
        return gain / best if best else 0.0

    def minmax(values: list[float]) -> list[float]:
        low, high = min(values), max(values)
        return [(v - low) / (high - low) if high > low else 0.0 for v in values]

    depth = len(rows[0]["likelihood"])
    print(f"nDCG@10 over {len(rows)} queries of {args.dataset.name} ({args.split}), the top {depth} rescored")
    for weight in WEIGHTS:
        total = 0.0
        for row in rows:
            depth = len(row["likelihood"])
            fused = [
                (1 - weight) * f + weight * q
                for f, q in zip(minmax(row["first"][:depth]), minmax(row["likelihood"]), strict=True)
            ]
            head = [d for _, d in sorted(zip(fused, row["ids"][:depth], strict=True), key=lambda pair: -pair[0])]
            total += ndcg10(head + row["ids"][depth:], qrels[row["qid"]])
        label = {0.0: " (first stage alone)", 1.0: " (likelihood alone)"}.get(weight, "")
        print(f"  w={weight:.1f}: {100 * total / len(rows):.1f}{label}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["score", "report"])
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--home", type=Path)
    parser.add_argument("--split", default="test")
    parser.add_argument("--depth", type=int, default=10)
    parser.add_argument("--limit", type=int, default=96)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if args.command == "score":
        if args.home is None:
            parser.error("score needs --home")
        score(args)
    else:
        report(args)


if __name__ == "__main__":
    main()
