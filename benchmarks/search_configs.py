"""Search configurations on a BEIR dataset: what each component of Promptagator++ buys, from one run (issue 12).

Usage:
    python benchmarks/search_configs.py --dataset ../shared/datasets/scifact --home DIR \
        [--e-doc Article --e-query Claim --description "..."] [--max-documents 400 --queries-per-doc 3] \
        [--reranker-dir DIR | --export-groups FILE] [--distill] [--expand] [--depths 10,20,50] [--latency-queries 100] \
        [--json OUT] [--max-queries N] [--round-trip-k K] [--no-generate --retriever-name NAME]

Rows, one change at a time: BM25 (Ferret's sparse vectors) | base dense | base hybrid RRF (the default until the
twentieth session) | base hybrid with the default fusion (``DEFAULT_FUSION``, the untrained default; its row names the
method and weight) | base + fusion tuned from the task's 8 examples only (no LLM) | base + fusion tuned on the examples
and held-out synthetic queries | trained retriever (default fusion) | trained + tuned fusion (the same evidence) | +
distillation (``--distilled-dir``: a dual encoder distilled elsewhere, under the same tuned fusion) | + reranker at the
default depth | with ``--distill``, the pipeline's distillation step (the reranker teaches the kept retriever; the
student with its own tuned fusion, alone and with the reranker) | the configuration the guard promotes, built, as
the pipeline's ``configure`` stage builds it, on whichever of the two tuned retrievers scores higher on the
evidence. ``--hard-negatives residual`` trains the retriever on what BM25 misses, ``--logprob-quantile`` adds the
generator log-probability filter, ``--round-trip hybrid`` runs the round trip against the hybrid first stage, and
``--max-steps``, ``--learning-rate``, ``--base-weight`` change the trained retriever's budget (with ``--no-generate
--retriever-name NAME``: another model from the same generation run).
With ``--expand``, the pipeline's expansion step (doc2query--: each training document's kept queries appended to
its BM25 vectors in a new index version of the configure stage's retriever) adds two rows, BM25 alone and hybrid
with its own tuned fusion; ``benchmarks/doc2query.py`` compares the filters' effect on expansion. Each row: nDCG@10,
Recall@100, MRR@10 on the test split and p50 latency per query (single queries, sequential, on this machine).
Reranker rows at other depths follow, for the depth/latency trade-off. ``--json`` writes every row with ``name`` and
``ndcg@10`` and ``"promoted": true`` on the guard's choice.

After the table, each tuned retriever's **α curve on the test labels**: nDCG@10 under RRF and at every α of the
tuning grid. It is a reference, not a configuration (the test labels choose it, so nothing may promote it): it says
whether a shortfall comes from the label-free choice of α or from the components themselves (on SciFact no α of any
retriever tried reached 73.5; benchmarks/RESULTS.md, issue 12, nineteenth session). ``--no-alpha-curve`` skips it.

The home is reused: ingestion, the generation run, the trained retriever (the Promptagator pipeline, Ferret's
default recipe) and a registered reranker are found there instead of made again. The reranker trains here, or on
another machine from ``--export-groups`` (then ``--reranker-dir`` registers the trained folder).
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from promptagator import example_split, pick_examples
from search_configs_support import LineProgress, parse_args, precomputed_passage_vectors, print_report

RERANKER = "reranker"


def main() -> None:
    args = parse_args(__doc__)
    os.environ["FERRET_HOME"] = str(args.home or Path(tempfile.mkdtemp(prefix="ferret-configs-")))

    import torch
    from rich.console import Console

    from ferret.connectors.beir.connector import BeirConnector
    from ferret.core.corpus.ingest import Ingestor
    from ferret.core.db.corpus import get_or_create_corpus
    from ferret.core.db.model_version import find_model_version
    from ferret.core.db.synthetic import document_texts, get_run
    from ferret.core.db.task import example_document, find_task
    from ferret.core.encoder.registry import ModelRegistry
    from ferret.core.errors import InvalidInputError
    from ferret.core.eval.beir import load_qrels, load_queries
    from ferret.core.eval.configs import fusion_curve
    from ferret.core.eval.evaluate import corpus_name_for, ensure_index
    from ferret.core.eval.metrics import evaluate_run
    from ferret.core.pipeline.promptagator.configure import tune_retrievers
    from ferret.core.pipeline.promptagator.state import PipelineConfig
    from ferret.core.rerank.cross_encoder import load_reranker
    from ferret.core.rerank.stage import register_reranker, reranker_groups, train_reranker
    from ferret.core.rerank.training import RerankerTrainingConfig, write_groups
    from ferret.core.search.configuration import DEFAULT_RERANK_DEPTH, SearchPlan, base_plan
    from ferret.core.search.fusion import RRF
    from ferret.core.search.tuning import Evidence, choose_fusion, choose_rerank_weight
    from ferret.core.synth.task_spec import ExampleSpec, GenerationSettings, TaskSpec, create_task
    from ferret.core.training.config_guard import run_config_guard, split_evidence
    from ferret.core.training.guard import LabelledQuery
    from ferret.core.training.guard_evidence import held_out_queries, is_held_out, passage_texts
    from ferret.runtime.context import app_context

    torch.set_num_threads(args.threads)
    untrained = "base hybrid, default fusion (untrained default)"
    if args.vectors:
        precomputed_passage_vectors(*args.vectors)
    console = Console(width=160)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    console.print(f"{args.dataset.name}: commit {commit}, {os.cpu_count()} cpus, torch threads {args.threads}")
    source_split = example_split(args.dataset, args.train_split, args.split)
    examples = pick_examples(args.dataset, source_split, args.examples, args.seed)
    held_back = {e["query_id"] for e in examples} if source_split == args.split else set()
    if held_back:
        console.print(f"no {args.train_split} or dev qrels: examples from {args.split}, left out of the evaluation")
    corpus_name = corpus_name_for(args.dataset)
    queries, qrels = load_queries(args.dataset), load_qrels(args.dataset, args.split)
    query_ids = [q for q in qrels if q in queries and q not in held_back]
    if args.max_queries and len(query_ids) > args.max_queries:
        query_ids = sorted(random.Random(args.seed).sample(query_ids, args.max_queries))
        console.print(f"scoring a sample of {len(query_ids)} {args.split} queries (--max-queries, seed {args.seed})")
    qrels = {q: qrels[q] for q in query_ids}
    texts = [queries[q] for q in query_ids]
    report: dict[str, Any] = {
        "dataset": args.dataset.name, "commit": commit, "examples_split": source_split, "rows": [], "notes": [],
    }  # fmt: skip

    with app_context() as ctx:
        corpus = get_or_create_corpus(ctx.session, corpus_name)
        Ingestor(ctx.session, ctx.settings, ctx.backend, corpus).run(BeirConnector(path=str(args.dataset), name="beir"))
        registry = ModelRegistry(ctx.session, ctx.settings)
        ensure_index(ctx.session, ctx.settings, ctx.backend, corpus, registry.ensure_base(), console.print)
        searcher = ctx.searcher
        base = base_plan(ctx.session, corpus)

        # -- the task and its generated queries (reused from the home) ----------------------------------------------
        task = find_task(ctx.session, "few-shot-ex250")
        if task is None:
            spec = TaskSpec(
                name="few-shot-ex250", corpus=corpus_name, description=args.description, e_doc=args.e_doc,
                e_query=args.e_query, zero_shot=False,
                generation=GenerationSettings(queries_per_doc=args.queries_per_doc, max_documents=args.max_documents,
                                              seed=args.seed, example_chars=250),
                examples=[ExampleSpec(query=e["query"], document=e["document"]) for e in examples],
            )  # fmt: skip
            task = create_task(ctx.session, spec)
            ctx.session.commit()
        labelled_examples = [
            LabelledQuery(e.query, d.id) for e in task.examples if (d := example_document(ctx.session, task, e))
        ]
        from ferret.core.db.synthetic import latest_run
        from ferret.core.llm.factory import build_backend
        from ferret.core.pipeline.declaration import StageContext
        from ferret.core.pipeline.promptagator.stages import generate_stage, guard_stage, index_stage, train_stage
        from ferret.core.pipeline.promptagator.state import PipelineState
        from ferret.core.synth.filters import ROUND_TRIP_MAX_K, FilterConfig, apply_filters, length_bounds
        from ferret.core.synth.retrievers import SearcherRetriever

        pipeline = PipelineConfig(
            queries_per_doc=args.queries_per_doc, max_documents=args.max_documents, promote="never",
            model_name=args.retriever_name, seed=args.seed, round_trip_k=args.round_trip_k,
            hard_negatives=args.hard_negatives, logprob_quantile=args.logprob_quantile, max_steps=args.max_steps,
            **{name: value for name in ("learning_rate", "base_weight") if (value := getattr(args, name)) is not None},
        )  # fmt: skip
        state = PipelineState.start(task, pipeline, model_name=args.retriever_name, reference_model="base")
        progress = LineProgress(console)
        stage_context = StageContext(ctx.session, ctx.settings, progress=progress, index_backend=ctx.backend)
        previous = latest_run(ctx.session, task)
        if args.no_generate and previous is not None:
            state = state.advance("generate", 0.0, run_id=previous.id)  # an earlier (perhaps partial) run, as it is
        else:
            stage_context.llm_backend = build_backend(ctx.settings)  # loaded only if queries are missing
            try:
                state = generate_stage(stage_context, state)
            finally:
                stage_context.llm_backend.close()
        run = get_run(ctx.session, state.run_id or 0)
        started = time.perf_counter()
        # The pipeline's filters (length, copy, duplicate, round trip by the base model at K, by default derived from
        # the examples' own ranks), the round trip read from the base index rather than from a second embedding of
        # the corpus (the same ranking, MaxP).
        base_index = ensure_index(ctx.session, ctx.settings, ctx.backend, corpus, registry.ensure_base(), console.print)
        bounds = length_bounds(task)
        depth = args.round_trip_k or ROUND_TRIP_MAX_K
        filters = apply_filters(
            ctx.session, run,
            FilterConfig(round_trip=SearcherRetriever(searcher, corpus_name, depth=depth,
                                                      mode="dense" if args.round_trip == "base" else "hybrid",
                                                      index_version=base_index),
                         round_trip_k=args.round_trip_k, min_words=bounds.get("min_words", 3),
                         max_words=bounds.get("max_words", 40), logprob_quantile=args.logprob_quantile),
        )  # fmt: skip
        ctx.session.commit()
        state = state.advance("filter", time.perf_counter() - started, filters=filters.as_dict())
        console.print(
            f"generation run {run.id}: {run.counters}; filters {state.filters} ({time.perf_counter() - started:.0f} s)"
        )
        report["filters"] = state.filters
        retriever = find_model_version(ctx.session, args.retriever_name)
        if retriever is None and args.train_retriever:
            try:
                for stage in (train_stage, guard_stage, index_stage):
                    state = stage(stage_context, state)
                retriever = registry.get(args.retriever_name)
            except InvalidInputError as error:  # too few kept pairs: the rows say so, the base rows still print
                console.print(f"[yellow]no trained retriever:[/] {error}")
                report["notes"].append(f"no trained retriever: {error}")
        report["stage_seconds"] = state.seconds
        console.print("pipeline stages (s): " + ", ".join(f"{k} {v:.1f}" for k, v in state.seconds.items()))
        passages = passage_texts(document_texts(ctx.session, corpus))
        held = held_out_queries(ctx.session, run, task, passages, pipeline.held_out_fraction, pipeline.seed)
        tuning, guarding = split_evidence(labelled_examples, held, seed=args.seed)
        console.print(
            f"evidence: {len(labelled_examples)} examples, {len(held)} held-out synthetic queries "
            f"({len(tuning.synthetic)} tune the weights, {len(guarding.synthetic)} are the guard's)"
        )
        if retriever is not None:
            trained_index = ensure_index(ctx.session, ctx.settings, ctx.backend, corpus, retriever, console.print)
            trained = SearchPlan(trained_index.collection, retriever.path, label="trained")
        else:
            report["notes"].append("no trained retriever in this run (--train-retriever not given)")
            trained = base

        # -- the configurations --------------------------------------------------------------------------------------
        examples_only = choose_fusion(searcher, base, Evidence(labelled_examples, []))
        console.print(f"base fusion from the examples only: {examples_only.reason}")
        # as the pipeline's configure stage: fusion tuned for the trained retriever and for the base on the same
        # evidence, the one with the higher objective kept
        base_model = registry.ensure_base()
        retrievers = [(retriever, trained)] if retriever is not None else []
        tuned_all = tune_retrievers(searcher, [*retrievers, (base_model, base)], tuning)
        choices = {model.name: tuned_choice for model, _, tuned_choice in tuned_all}
        for model, _, tuned_choice in tuned_all:
            console.print(f"tuned fusion ({model.name}): {tuned_choice.reason}")
        report["notes"] += [f"examples only: {examples_only.as_dict()}"]
        report["notes"] += [f"{model}: {tuned_choice.as_dict()}" for model, tuned_choice in choices.items()]
        trained_choice = choices[retriever.name] if retriever is not None else choices[base_model.name]
        picked, _, choice = tuned_all[0]
        first = "trained + tuned fusion" if picked is retriever else "base + tuned fusion"
        console.print(f"the configure stage keeps {first!r}")
        plans: dict[str, tuple[SearchPlan, str | None]] = {
            "bm25": (base, "sparse"),
            "base dense": (base, "dense"),
            "base hybrid rrf (the default until 2026-11-25)": (
                SearchPlan(base.collection, base.model_path, RRF, label="base+rrf"),
                "hybrid",
            ),
            untrained: (base, "hybrid"),
            "base + fusion from examples": (
                SearchPlan(base.collection, base.model_path, examples_only.fusion, label="base+fusion"),
                "hybrid",
            ),
        }
        plans["base + tuned fusion"] = (
            SearchPlan(base.collection, base.model_path, choices[base_model.name].fusion, label="base+tuned"),
            "hybrid",
        )
        if retriever is not None:
            plans["trained retriever (default fusion)"] = (trained, "hybrid")
            plans["trained + tuned fusion"] = (
                SearchPlan(trained.collection, trained.model_path, trained_choice.fusion, label="trained+fusion"),
                "hybrid",
            )
        tuned = plans[first][0]
        if args.distilled_dir is not None:  # one change: the distilled dual encoder under the tuned fusion
            distilled = find_model_version(ctx.session, "distilled") or registry.register(
                "distilled", args.distilled_dir.resolve(), parent=registry.ensure_base()
            )
            ctx.session.commit()
            distilled_index = ensure_index(ctx.session, ctx.settings, ctx.backend, corpus, distilled, console.print)
            plans["+ distillation (tuned fusion)"] = (
                SearchPlan(distilled_index.collection, distilled.path, trained_choice.fusion, label="distilled"),
                "hybrid",
            )

        expanded_row, expansion_kept = "+ expansion (kept queries in BM25, its tuned fusion)", False
        if args.expand:  # the pipeline's own step, on the configure stage's retriever and its tuned fusion
            from ferret.core.pipeline.promptagator.expand import expand_candidate

            expanded = expand_candidate(
                stage_context, corpus, run, searcher, retriever=picked, candidate=tuned,
                candidate_examples=choice.example_ranks, tuning=tuning, guarding=guarding,
                held_out=lambda d: is_held_out(d, pipeline.held_out_fraction, pipeline.seed), key="benchmark",
                progress=progress,
            )  # fmt: skip
            found = expanded.evidence
            console.print(
                f"expansion: {found['queries']} queries of {found['documents']} documents "
                f"(index v{found['index_version']}); {expanded.plan.fusion.describe()}; "
                f"against {first!r}: {found['guard']['reason']}"
            )
            report["notes"].append(f"expansion: {found}")
            plans["bm25 + expansion"] = (expanded.plan, "sparse")
            plans[expanded_row] = (expanded.plan, "hybrid")
            expansion_kept = expanded.kept

        reranker_model = None if args.no_reranker else find_model_version(ctx.session, RERANKER)
        if reranker_model is None and not args.no_reranker:
            config = RerankerTrainingConfig(seed=args.seed)
            try:
                groups = reranker_groups(
                    ctx.session, searcher, corpus, run, tuned,
                    held_out=lambda d: is_held_out(d, pipeline.held_out_fraction, pipeline.seed), config=config,
                )  # fmt: skip
            except InvalidInputError as error:  # too few kept pairs: the reranker is refused, the rows say so
                console.print(f"[yellow]no reranker:[/] {error}")
                report["notes"].append(f"no reranker: {error}")
                groups = []
            if groups and args.reranker_dir:
                reranker_model = register_reranker(
                    ctx.session, RERANKER, args.reranker_dir.resolve(),
                    training={"groups": len(groups), "where": "external", "config": config.to_json()},
                )  # fmt: skip
                ctx.session.commit()
            elif groups and args.export_groups:
                write_groups(args.export_groups, groups)
                console.print(f"wrote {len(groups)} training groups to {args.export_groups}; train them and rerun")
                return
            elif groups:
                reranker_model = train_reranker(
                    ctx.session,
                    ctx.settings,
                    groups,
                    RERANKER,
                    config,
                    progress=progress.fraction("training the reranker"),
                )
                ctx.session.commit()
        depths = [int(d) for d in args.depths.split(",") if d]
        full, keeps_reranker = first, False
        if reranker_model is not None:
            reranker = load_reranker(reranker_model.path, name=reranker_model.name)
            weight = choose_rerank_weight(searcher, corpus_name, tuned, reranker, DEFAULT_RERANK_DEPTH, tuning)
            console.print(f"reranker weight: {weight.reason}")
            report["notes"].append(f"reranker weight: {weight.as_dict()}")

            def reranked(depth: int) -> SearchPlan:
                return SearchPlan(
                    tuned.collection, tuned.model_path, tuned.fusion, reranker, depth, weight.weight,
                    label=f"+reranker@{depth}",
                )  # fmt: skip

            full = f"+ reranker (depth {DEFAULT_RERANK_DEPTH})"
            plans[full] = (reranked(DEFAULT_RERANK_DEPTH), "hybrid")
            # as the pipeline's configure stage: the reranker stays only if it beats the first stage alone
            own = run_config_guard(
                searcher, corpus_name, plans[full][0], tuned, guarding,
                candidate_examples=weight.example_ranks, active_examples=choice.example_ranks,
            )  # fmt: skip
            report["notes"].append(f"reranker against the first stage alone: {own.as_dict()}")
            console.print(f"reranker against {first!r}: {'kept' if own.passed else 'dropped'}: {own.reason}")
            keeps_reranker = own.passed

        # -- distillation, the pipeline's own step (it runs there only when the reranker is kept; here always) -------
        distilled_row = "+ distillation (student, its tuned fusion, + reranker)"
        if args.distill and reranker_model is not None:
            from ferret.core.pipeline.promptagator.distill import distill_candidate

            taught = distill_candidate(
                stage_context, corpus, run, searcher, teacher=reranker_model, scorer=reranker, retriever=picked,
                first_stage=tuned, candidate=plans[full][0], candidate_examples=weight.example_ranks, tuning=tuning,
                guarding=guarding, held_out=lambda d: is_held_out(d, pipeline.held_out_fraction, pipeline.seed),
                name="distilled", seed=args.seed, progress=progress,
            )  # fmt: skip
            training = taught.evidence["training"]
            console.print(
                f"distillation: {taught.evidence['groups']} groups, {training.get('steps')} steps in "
                f"{training.get('seconds')} s, margin-MSE {training.get('loss_first')} → {training.get('loss_last')}"
            )
            console.print(f"distilled student against {full!r}: {taught.evidence['guard']['reason']}")
            report["notes"].append(f"distillation: {taught.evidence}")
            student_first = SearchPlan(
                taught.plan.collection, taught.plan.model_path, taught.plan.fusion, label="distilled"
            )
            plans["distilled student (its tuned fusion, no reranker)"] = (student_first, "hybrid")
            plans[distilled_row] = (taught.plan, "hybrid")
            if keeps_reranker and taught.kept:  # as the configure stage: the student replaces the retriever
                full = distilled_row

        # -- the guard: the fullest configuration that passes against the untrained default -----------------------
        # (a kept expansion is tried after the reranker, which the benchmark trains on the plain first stage)
        expansion = [expanded_row] if expansion_kept else []
        guard_rows = list(
            dict.fromkeys([full if keeps_reranker else first, *expansion, first, "base + fusion from examples"])
        )
        out_of_sample = {first: choice.example_ranks, "base + fusion from examples": examples_only.example_ranks}
        if expansion_kept:
            out_of_sample[expanded_row] = expanded.example_ranks
        if reranker_model is not None:
            out_of_sample[full] = taught.example_ranks if full == distilled_row else weight.example_ranks
        promoted, decisions = None, {}
        for name in guard_rows:
            verdict = run_config_guard(
                searcher, corpus_name, plans[name][0], base, guarding, candidate_examples=out_of_sample.get(name, ())
            )
            decisions[name] = verdict.as_dict()
            console.print(f"guard on {name!r}: {'PASS' if verdict.passed else 'refused'}: {verdict.reason}")
            if verdict.passed and promoted is None:
                promoted = name
        report["guard"] = decisions
        if promoted is None:
            console.print("the guard promotes nothing: the untrained default stays")
            promoted = untrained

        # -- evaluation ----------------------------------------------------------------------------------------------
        def evaluate(name: str, plan: SearchPlan, mode: str | None) -> dict[str, Any]:
            started = time.perf_counter()
            results = searcher.search_many(corpus_name, texts, k=100, mode=mode, plan=plan)
            seconds = time.perf_counter() - started
            run_ = {
                qid: {r.external_id: float(len(hits) - rank) for rank, r in enumerate(hits)}
                for qid, hits in zip(query_ids, results, strict=True)
            }
            latencies = []
            for text in texts[: args.latency_queries]:
                t0 = time.perf_counter()
                searcher.search_many(corpus_name, [text], k=10, mode=mode, plan=plan)
                latencies.append(1000 * (time.perf_counter() - t0))
            row: dict[str, Any] = {"name": name, **{m: round(v, 2) for m, v in evaluate_run(run_, qrels).items()}}
            row["p50_ms"] = round(statistics.median(latencies), 1)
            row["batch_seconds"] = round(seconds, 1)
            row["fusion"] = plan.fusion.describe() if mode in (None, "hybrid") else "-"
            row["reranker_depth"] = plan.rerank_depth if plan.reranker else 0
            if name == promoted:
                row["promoted"] = True
            console.print(row)
            return row

        rows = [evaluate(name, plan, mode) for name, (plan, mode) in plans.items()]
        promoted_row = next(r for r in rows if r["name"] == promoted)
        rows.append({**promoted_row, "name": f"guard-promoted: {promoted}", "promoted": True})
        promoted_row.pop("promoted", None)
        for depth in depths if reranker_model is not None else []:
            if depth != DEFAULT_RERANK_DEPTH:
                rows.append(evaluate(f"+ reranker (depth {depth})", reranked(depth), "hybrid"))
        report["rows"] = rows
        if not args.no_alpha_curve:
            labelled = dict(zip(query_ids, texts, strict=True))
            report["alpha_curves"] = {
                model.name: {key: round(v, 2) for key, v in fusion_curve(searcher, plan, labelled, qrels).items()}
                for model, plan, _ in tuned_all
            }

    print_report(console, f"{args.dataset.name} ({args.split}, {len(query_ids)} queries)", args.split, report)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
