"""Score the synthetic queries of an earlier generation run with the generator's mean token log-probability.

Usage:
    python benchmarks/query_logprobs.py --home DIR [--task few-shot-ex250] [--run ID] [--threads 2] [--limit N]

Runs generated before revision 0019 (or replayed from a GPU run, as the SciFact/NFCorpus runs of
benchmarks/RESULTS.md) have no ``logprob``. This script computes it the way the sampler does (the model's own
distribution at temperature 1) by teacher forcing: each usable query's text, after its task's prompt, followed by
the newline that ends it; the prompt's shared few-shot prefix is computed once. The scores are written to the
query rows, so ``FilterConfig(logprob_quantile=...)`` can then be measured on the run. Differences from what the
sampler would have recorded: the stored text is the cleaned query (``clean_generation``: stripped, without a
leading label), re-tokenised, so the token boundaries can differ from those sampled.
"""

from __future__ import annotations

import argparse
import copy
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--task", default="few-shot-ex250")
    parser.add_argument("--run", type=int, default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--limit", type=int, default=None, help="score the first N documents only")
    args = parser.parse_args()
    os.environ["FERRET_HOME"] = str(args.home)

    import torch

    from ferret.core.db.models import QueryStatus
    from ferret.core.db.synthetic import documents_by_ids, get_run, latest_run, run_queries
    from ferret.core.db.task import get_task
    from ferret.core.llm.local_backend import default_generator_path, load_generator
    from ferret.core.llm.prefix_cache_sampler import common_prefix_length
    from ferret.core.synth.generation import task_prompt_builder
    from ferret.core.synth.prompt import PromptBudget, document_text
    from ferret.core.synth.task_spec import task_generation_settings
    from ferret.runtime.context import app_context

    torch.set_num_threads(args.threads)
    with app_context() as ctx:
        session = ctx.session
        task = get_task(session, args.task)
        run = get_run(session, args.run) if args.run else latest_run(session, task)
        assert run is not None, "the task has no generation run"
        settings = task_generation_settings(task)
        builder = task_prompt_builder(
            session, task, PromptBudget(max_new_tokens=settings.max_tokens), example_chars=settings.example_chars
        )
        queries = [q for q in run_queries(session, run) if q.status is not QueryStatus.FAILED]
        by_document: dict[int, list] = {}
        for query in queries:
            by_document.setdefault(query.document_id, []).append(query)
        document_ids = sorted(by_document)[: args.limit]
        started = time.perf_counter()
        loaded = load_generator(default_generator_path(), "cpu", cache_dir=ctx.settings.models_path / "generators")
        print(f"generator loaded in {time.perf_counter() - started:.0f} s; {len(document_ids)} documents")
        tokenizer, model = loaded.tokenizer, loaded.model
        newline = tokenizer("\n", add_special_tokens=False)["input_ids"]
        documents = {d.id: d for d in documents_by_ids(session, document_ids)}
        prompts = {
            i: tokenizer(builder.build(document_text(d.title, d.body)))["input_ids"] for i, d in documents.items()
        }
        prefix_length = min(common_prefix_length(list(prompts.values())), min(len(p) for p in prompts.values()) - 1)
        from transformers import DynamicCache

        prefix_cache = DynamicCache()
        with torch.inference_mode():
            model(
                input_ids=torch.tensor([list(prompts[document_ids[0]][:prefix_length])]), past_key_values=prefix_cache
            )
        print(f"shared prefix: {prefix_length} tokens")
        scored = 0
        started = time.perf_counter()
        for number, document_id in enumerate(document_ids, 1):
            if document_id not in prompts:
                continue
            suffix = list(prompts[document_id][prefix_length:])
            rows = by_document[document_id]
            continuations = [
                tokenizer(" " + q.text.strip(), add_special_tokens=False)["input_ids"] + newline for q in rows
            ]
            # The document once (batch 1, after the shared prefix), then its queries as a batch after it.
            cache = copy.deepcopy(prefix_cache)
            with torch.inference_mode():
                last = model(input_ids=torch.tensor([suffix]), past_key_values=cache).logits[0, -1].float()
            context = prefix_length + len(suffix)
            width = max(len(c) for c in continuations)
            input_ids = torch.full((len(rows), width), tokenizer.eos_token_id or 0, dtype=torch.long)
            mask = torch.zeros((len(rows), context + width), dtype=torch.long)
            mask[:, :context] = 1
            for row, continuation in enumerate(continuations):  # right padding: the padded tail is never read
                input_ids[row, : len(continuation)] = torch.tensor(continuation)
                mask[row, context : context + len(continuation)] = 1
            cache.batch_repeat_interleave(len(rows))
            with torch.inference_mode():
                logits = model(input_ids=input_ids, attention_mask=mask, past_key_values=cache).logits.float()
            first = torch.log_softmax(last, dim=-1)
            logprobs = torch.log_softmax(logits, dim=-1)
            for row, (query, continuation) in enumerate(zip(rows, continuations, strict=True)):
                # The first token is predicted by the document's last logits, token i by the logits at i - 1.
                values = [float(first[continuation[0]])]
                values += [float(logprobs[row, i - 1, token]) for i, token in enumerate(continuation) if i > 0]
                query.logprob = sum(values) / len(values)
                scored += 1
            if number % 10 == 0:
                session.commit()
                rate = number / (time.perf_counter() - started)
                print(f"{number}/{len(document_ids)} documents, {scored} queries, {rate:.2f} documents/s", flush=True)
        session.commit()
        print(f"scored {scored} queries of run {run.id} in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
