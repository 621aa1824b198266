"""The configuration stage (issue 12): the unit of promotion is a search system, not a model.

After the index stage, the pipeline tunes a search configuration: the fusion weight from the task's evidence
(``ferret.core.search.tuning``) for its trained retriever and for the base model (each when it has a live index of
the corpus), keeping the retriever whose tuned fusion scores higher on that evidence, and optionally a cross-encoder
reranker trained on the kept pairs. A trained model is not assumed to be better: on SciFact, four trained retrievers
promoted 71.8–73.3 nDCG@10 while the base model with fusion tuned on the same evidence read 72.5, and where both
were tuned on the same evidence it preferred the base (benchmarks/RESULTS.md, issue 12, eighteenth session). With
``promote: force`` the pipeline's own retriever is kept, as asked. The configuration guard compares it, by searching,
with what is active (the active configuration, else the untrained default) on held-out queries it was not tuned on,
and the configuration is promoted as one unit when the guard passes (``promote: auto``), or always (``force``).
A redelivered stage finds the configuration carrying the pipeline's key and reuses it.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from functools import partial
from typing import Any

from sqlalchemy.orm import Session

from ferret.core.db.index_version import plain_index_versions
from ferret.core.db.model_version import find_model_version
from ferret.core.db.models import Corpus, ModelVersion, SearchConfig
from ferret.core.db.search_config import create_search_config, list_search_configs
from ferret.core.db.synthetic import document_texts, get_run
from ferret.core.db.task import example_document
from ferret.core.encoder.registry import BASE_MODEL_NAME
from ferret.core.errors import InvalidInputError
from ferret.core.pipeline.declaration import StageContext
from ferret.core.pipeline.promptagator.distill import distill_candidate
from ferret.core.pipeline.promptagator.expand import expand_candidate
from ferret.core.pipeline.promptagator.state import PipelineState
from ferret.core.rerank.cross_encoder import load_reranker
from ferret.core.rerank.stage import reranker_groups, train_reranker
from ferret.core.rerank.training import RerankerTrainingConfig
from ferret.core.search.configuration import (
    DEFAULT_RERANK_DEPTH,
    SearchPlan,
    default_plan,
    promote_config,
    read_active_plan,
)
from ferret.core.search.searcher import Searcher
from ferret.core.search.tuning import Evidence, FusionChoice, choose_fusion, choose_rerank_weight
from ferret.core.training.config_guard import run_config_guard, split_evidence
from ferret.core.training.guard import LabelledQuery
from ferret.core.training.guard_evidence import held_out_queries, is_held_out, passage_texts


def _retrievers(session: Session, corpus: Corpus, name: str) -> list[tuple[ModelVersion, SearchPlan]]:
    """The pipeline's model and the base model, each that has a live index of the corpus (its newest), in that
    order."""
    found = []
    for candidate in dict.fromkeys((name, BASE_MODEL_NAME)):
        model = find_model_version(session, candidate)
        if model is None:
            continue
        live = plain_index_versions(session, corpus, model)
        if live:
            index = max(live, key=lambda v: v.version)
            found.append((model, SearchPlan(index.collection, model.path, label=model.name)))
    if not found:
        raise InvalidInputError(f"Corpus {corpus.name!r} has no live index to configure search on.")
    return found


def tune_retrievers(
    searcher: Searcher, retrievers: list[tuple[ModelVersion, SearchPlan]], evidence: Evidence
) -> list[tuple[ModelVersion, SearchPlan, FusionChoice]]:
    """Each retriever with the fusion tuned for it on ``evidence``, the best objective first; a tie, or too little
    evidence to tune on, keeps the given order."""
    tuned = [(model, plan, choose_fusion(searcher, plan, evidence)) for model, plan in retrievers]
    return sorted(tuned, key=lambda t: math.inf if t[2].objective is None else -t[2].objective)


def _own_config(session: Session, corpus: Corpus, key: str) -> SearchConfig | None:
    return next((c for c in list_search_configs(session, corpus) if c.evidence.get("key") == key), None)


def configure_stage(context: StageContext, state: PipelineState) -> PipelineState:
    started = time.perf_counter()
    config = state.config
    if not config.configure or state.run_id is None:
        return state
    session, settings, status = context.session, context.settings, context.progress
    run = get_run(session, state.run_id)
    task = run.task
    corpus = task.corpus
    if (found := _own_config(session, corpus, state.key)) is not None:  # a redelivery
        return state.advance("configure", time.perf_counter() - started, search_config=dict(found.evidence))
    searcher = Searcher.over(session, settings, context.backend)
    reference = read_active_plan(session, corpus.name) or default_plan(session, corpus)
    if reference is None:  # nothing is indexed yet: there is no search to configure
        skipped = {"skipped": f"corpus {corpus.name!r} has no active index"}
        return state.advance("configure", time.perf_counter() - started, search_config=skipped)
    retrievers = _retrievers(session, corpus, state.model_name)
    if config.promote == "force":
        retrievers = retrievers[:1]
    examples = [
        LabelledQuery(e.query, d.id) for e in task.examples if (d := example_document(session, task, e)) is not None
    ]
    texts = passage_texts(document_texts(session, corpus))
    held = held_out_queries(session, run, task, texts, config.held_out_fraction, config.seed)
    tuning, guarding = split_evidence(examples, held, seed=config.seed)
    status("configure: fusion weight", 0.0)
    tuned = tune_retrievers(searcher, retrievers, tuning)
    model, first, fusion = tuned[0]
    candidate = replace(first, fusion=fusion.fusion)
    evidence: dict[str, Any] = {"key": state.key, "fusion": fusion.as_dict(), "retriever": model.name}
    if len(tuned) > 1:
        evidence["retrievers"] = {m.name: {"objective": c.objective, "reason": c.reason} for m, _, c in tuned}
    reranker, scorer, index_version = None, None, None
    tuned_examples = fusion.example_ranks  # the examples' ranks out of sample, for the guard
    held_out = partial(is_held_out, fraction=config.held_out_fraction, seed=config.seed)
    if config.expand:
        status("configure: expansion", 0.1)
        try:
            expanded = expand_candidate(
                context, corpus, run, searcher, retriever=model, candidate=candidate,
                candidate_examples=tuned_examples, tuning=tuning, guarding=guarding, held_out=held_out,
                key=state.key, progress=lambda what, done: status(f"configure: {what}", 0.1 + 0.2 * done),
            )  # fmt: skip
            evidence["expansion"] = expanded.evidence
            if expanded.kept:
                candidate, tuned_examples, index_version = expanded.plan, expanded.example_ranks, expanded.index
                evidence["fusion"] = expanded.evidence["fusion"]
        except InvalidInputError as error:  # no kept query to expand with
            evidence["expansion"] = {"refused": str(error)}
    first_stage = candidate
    if config.reranker:
        status("configure: reranker", 0.3)
        training = RerankerTrainingConfig(seed=config.seed)
        reranker_share = 0.2 if config.distill else 0.4  # of the stage; distillation takes the next 0.2
        try:
            groups = reranker_groups(session, searcher, corpus, run, candidate, held_out=held_out, config=training)
            reranker = train_reranker(
                session, settings, groups, f"{state.model_name}-reranker", training,
                progress=lambda done: status("configure: training the reranker", 0.3 + reranker_share * done),
            )  # fmt: skip
            scorer = load_reranker(reranker.path, name=reranker.name, settings=settings)
            weight = choose_rerank_weight(searcher, corpus.name, candidate, scorer, DEFAULT_RERANK_DEPTH, tuning)
            reranked = replace(
                candidate, reranker=scorer, rerank_depth=DEFAULT_RERANK_DEPTH, rerank_weight=weight.weight,
            )  # fmt: skip
            # the reranker costs ten times the first stage's time: it stays only if it beats the first stage alone
            own = run_config_guard(
                searcher, corpus.name, reranked, candidate, guarding,
                candidate_examples=weight.example_ranks, active_examples=fusion.example_ranks,
            )  # fmt: skip
            evidence["reranker"] = {**weight.as_dict(), "guard": own.as_dict(), "kept": own.passed}
            if own.passed:
                first_stage, candidate, tuned_examples = candidate, reranked, weight.example_ranks
            else:
                reranker = None
        except InvalidInputError as error:  # too few kept pairs: no reranker, and the configuration says why
            evidence["reranker"] = {"refused": str(error)}
        if config.distill and (reranker is None or scorer is None):
            evidence["distillation"] = {"skipped": "no reranker was kept, so none can teach the retriever"}
        elif config.distill and reranker is not None and scorer is not None:  # (the second half narrows the types)
            try:
                distilled = distill_candidate(
                    context, corpus, run, searcher, teacher=reranker, scorer=scorer, retriever=model,
                    first_stage=first_stage, candidate=candidate, candidate_examples=tuned_examples,
                    tuning=tuning, guarding=guarding, held_out=held_out, name=f"{state.model_name}-distilled",
                    seed=config.seed, progress=lambda what, done: status(f"configure: {what}", 0.5 + 0.2 * done),
                )  # fmt: skip
                evidence["distillation"] = distilled.evidence
                if distilled.kept:  # the student searches its own plain index
                    model, candidate, tuned_examples = distilled.model, distilled.plan, distilled.example_ranks
                    evidence["retriever"], index_version = model.name, None
            except InvalidInputError as error:  # too few clean pairs to distil
                evidence["distillation"] = {"refused": str(error)}
    status("configure: guard", 0.7)
    verdict = run_config_guard(searcher, corpus.name, candidate, reference, guarding, candidate_examples=tuned_examples)
    evidence["guard"] = {**verdict.as_dict(), "reference": reference.label}
    row = create_search_config(
        session, corpus, model, candidate.fusion.to_json(), reranker=reranker,
        rerank_depth=candidate.rerank_depth, rerank_weight=candidate.rerank_weight, evidence=evidence,
        note=f"pipeline {state.model_name}", index_version=index_version,
    )  # fmt: skip
    session.commit()
    promote = config.promote == "force" or (config.promote == "auto" and verdict.passed)
    if promote:
        promote_config(session, settings, context.backend, corpus, row)
    evidence["version"], evidence["promoted"] = row.version, promote
    row.evidence = dict(evidence)
    session.commit()
    status("configure: guard", 1.0)
    return state.advance("configure", time.perf_counter() - started, search_config=evidence)
