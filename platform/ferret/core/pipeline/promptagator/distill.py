"""The configuration stage's distillation step (issue 12, item 4): the kept reranker teaches the retriever (GPL).

Only a reranker that the configuration guard kept (it beat the first stage on the task's evidence) may teach: the
third session distilled one that had not, and the student lost 3.2 nDCG@10 in hybrid search on SciFact
(benchmarks/RESULTS.md, issue 12). The student starts from the configuration's retriever and learns the teacher's
margins over negatives mined from the first stage (``ferret.core.rerank.stage.distill_encoder``) for every clean
query of the training documents: the kept ones and those the round trip dropped, since the teacher's margin, not the
filter's yes or no, is the label (GPL, Wang et al. 2022 §3). It gets an index version of its own (not promoted), its
own fusion weight from the tuning evidence and its own reranker weight, and the guard compares that configuration
with the one it would replace. A redelivered stage finds the student and its index by name and reuses them, without
mining or scoring again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ferret.core.db.model_version import find_model_version
from ferret.core.db.models import Corpus, GenerationRun, ModelVersion, QueryStatus, SyntheticQuery
from ferret.core.db.synthetic import run_queries
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.pipeline.declaration import StageContext
from ferret.core.pipeline.promptagator.candidate import StepCandidate
from ferret.core.progress import Progress, quiet
from ferret.core.rerank.cross_encoder import CrossScorer
from ferret.core.rerank.stage import distill_encoder, mine_groups
from ferret.core.rerank.training import RerankerTrainingConfig
from ferret.core.search.configuration import DEFAULT_RERANK_DEPTH, SearchPlan
from ferret.core.search.searcher import Searcher
from ferret.core.search.tuning import Evidence, choose_fusion, choose_rerank_weight
from ferret.core.synth.filters import ROUND_TRIP_REASON
from ferret.core.training.config_guard import run_config_guard
from ferret.core.training.distillation import DistillationConfig


@dataclass(frozen=True)
class Distilled(StepCandidate):
    """The student, the configuration built around it, the examples' ranks under it, and what was decided."""

    model: ModelVersion


def clean_pairs(queries: Sequence[SyntheticQuery], held_out: Callable[[int], bool]) -> list[tuple[str, int]]:
    """(query, document) of every usable query of a training document, and of those only the round trip dropped:
    copies, duplicates and run-ons stay out, as failures of the generator rather than hard queries."""
    return [
        (q.text, q.document_id)
        for q in queries
        if not held_out(q.document_id)
        and (
            q.status == QueryStatus.OK
            or (q.status == QueryStatus.DROPPED and (q.reason or "").startswith(ROUND_TRIP_REASON))
        )
    ]


def distill_candidate(
    context: StageContext,
    corpus: Corpus,
    run: GenerationRun,
    searcher: Searcher,
    *,
    teacher: ModelVersion,
    scorer: CrossScorer,
    retriever: ModelVersion,
    first_stage: SearchPlan,
    candidate: SearchPlan,
    candidate_examples: Sequence[float],
    tuning: Evidence,
    guarding: Evidence,
    held_out: Callable[[int], bool],
    name: str,
    seed: int,
    distillation: DistillationConfig | None = None,
    minimum_pairs: int | None = None,
    progress: Progress = quiet,
) -> Distilled:
    """Distil ``teacher`` into ``retriever`` and judge the student's configuration against ``candidate``:
    ``first_stage`` (the retriever with its tuned fusion, which mines the negatives) with the kept reranker on top.
    Too few clean pairs raise ``InvalidInputError`` with the count, before anything is trained. ``progress`` gets
    the distillation's own fraction done."""
    session, settings = context.session, context.settings
    student = find_model_version(session, name)  # a redelivery: trained already, nothing to mine again
    if student is None:
        progress("distillation: mining negatives", 0.0)
        pairs = clean_pairs(run_queries(session, run), held_out)
        groups = mine_groups(session, searcher, corpus, pairs, first_stage, RerankerTrainingConfig(seed=seed))
        extra = {} if minimum_pairs is None else {"minimum_pairs": minimum_pairs}
        student = distill_encoder(
            session, settings, groups, teacher, name, distillation or DistillationConfig(seed=seed),
            student=retriever, progress=lambda done: progress("distillation: training the retriever", 0.6 * done),
            **extra,
        )  # fmt: skip
        session.commit()
    training = {k: v for k, v in (student.training_config or {}).items() if k != "loss_by_tenth"}
    versions = VersionedCollection(session, settings, context.backend, corpus)
    index = versions.publish(
        student, reuse=versions.live_version(student), promote=False,
        progress=lambda activity, done: progress(f"distillation: {activity}", 0.6 + 0.2 * done),
    )  # fmt: skip
    student_first = SearchPlan(index.collection, student.path, label=student.name)
    fusion = choose_fusion(searcher, student_first, tuning)
    student_first = replace(student_first, fusion=fusion.fusion)
    weight = choose_rerank_weight(searcher, corpus.name, student_first, scorer, DEFAULT_RERANK_DEPTH, tuning)
    plan = replace(student_first, reranker=scorer, rerank_depth=DEFAULT_RERANK_DEPTH, rerank_weight=weight.weight)
    verdict = run_config_guard(
        searcher, corpus.name, plan, candidate, guarding,
        candidate_examples=weight.example_ranks, active_examples=candidate_examples,
    )  # fmt: skip
    progress("distillation: guard", 1.0)
    evidence = {
        "student": student.name,
        "teacher": teacher.name,
        "groups": training.get("groups"),
        "training": training,
        "fusion": fusion.as_dict(),
        "reranker_weight": weight.as_dict(),
        "guard": verdict.as_dict(),
        "kept": verdict.passed,
    }
    return Distilled(plan=plan, example_ranks=weight.example_ranks, evidence=evidence, model=student)
