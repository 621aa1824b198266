"""The configuration stage's expansion step (issue 12, item 6): the kept synthetic queries in the BM25 index.

doc2query-- (Gospodinov et al. 2023): each training document's kept queries (those every filter kept) are appended to
the BM25 text of its passages, in a new index version of the configuration's retriever; the dense vectors and the
text search returns stay the passages' own. The version is not promoted and no plain search finds it: only a
configuration that names it (``SearchConfig.index_version``). The fusion weight is tuned again for it, since the
sparse side changed, and the guard compares it with the configuration it would replace.

No document the evidence reads is expanded: not the held-out documents (so the guard's queries are never the ones
appended to their own documents), nor the task's examples' (their queries were written from prompts holding the
examples, so a near-copy of an example query would leak it). That makes the guard cautious: its documents compete,
unexpanded, with expanded ones. On SciFact the expansion
bought +0.2 nDCG@10 for BM25 alone and nothing once fused (``benchmarks/doc2query.py``; benchmarks/RESULTS.md,
issue 12), which is why it is off by default. A redelivered stage finds its version by the pipeline's key.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ferret.core.db.index_version import live_index_versions
from ferret.core.db.models import Corpus, GenerationRun, IndexVersion, ModelVersion, QueryStatus, SyntheticQuery
from ferret.core.db.synthetic import run_queries
from ferret.core.errors import InvalidInputError
from ferret.core.index.points import Expansion
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.pipeline.declaration import StageContext
from ferret.core.pipeline.promptagator.candidate import StepCandidate
from ferret.core.progress import Progress, quiet
from ferret.core.search.configuration import SearchPlan
from ferret.core.search.searcher import Searcher
from ferret.core.search.tuning import Evidence, choose_fusion
from ferret.core.training.config_guard import run_config_guard


@dataclass(frozen=True)
class Expanded(StepCandidate):
    """The expanded index version, the configuration built on it, the examples' ranks under it, and the decision."""

    index: IndexVersion


def expansion_texts(queries: Sequence[SyntheticQuery], held_out: Callable[[int], bool]) -> dict[int, list[str]]:
    """Document id → the queries every filter kept for it (once each, in sample order), training documents only."""
    texts: dict[int, list[str]] = {}
    for query in sorted(queries, key=lambda q: (q.document_id, q.sample)):
        if query.status != QueryStatus.OK or held_out(query.document_id):
            continue
        kept = texts.setdefault(query.document_id, [])
        if query.text not in kept:
            kept.append(query.text)
    return texts


def _own_version(context: StageContext, corpus: Corpus, retriever: ModelVersion, key: str) -> IndexVersion | None:
    return next(
        (
            v
            for v in live_index_versions(context.session, corpus)
            if v.model_version_id == retriever.id and (v.expansion or {}).get("key") == key
        ),
        None,
    )


def expand_candidate(
    context: StageContext,
    corpus: Corpus,
    run: GenerationRun,
    searcher: Searcher,
    *,
    retriever: ModelVersion,
    candidate: SearchPlan,
    candidate_examples: Sequence[float],
    tuning: Evidence,
    guarding: Evidence,
    held_out: Callable[[int], bool],
    key: str,
    progress: Progress = quiet,
) -> Expanded:
    """Build (or, redelivered, find) ``retriever``'s expanded index and judge it, with its own tuned fusion, against
    ``candidate`` (the same retriever over its plain index); the documents of ``tuning`` and ``guarding`` are not
    expanded. No kept query of a training document raises
    ``InvalidInputError`` before anything is built. ``progress`` gets the step's own fraction done."""
    index = _own_version(context, corpus, retriever, key)
    if index is None:
        judged = {q.document_id for q in (*tuning.all(), *guarding.all())}  # the examples' and held-out documents
        texts = expansion_texts(run_queries(context.session, run), lambda d: held_out(d) or d in judged)
        if not texts:
            raise InvalidInputError(
                f"Run {run.id} kept no synthetic query of a training document, so there is nothing to expand with."
            )
        versions = VersionedCollection(context.session, context.settings, context.backend, corpus)
        index = versions.build(
            retriever,
            expansion=Expansion(texts, {"run": run.id, "key": key}),
            progress=lambda activity, done: progress(f"expansion: {activity}", 0.8 * done),
        )
    plan = SearchPlan(index.collection, retriever.path, label=f"{retriever.name} + expansion")
    fusion = choose_fusion(searcher, plan, tuning)
    plan = replace(plan, fusion=fusion.fusion)
    verdict = run_config_guard(
        searcher, corpus.name, plan, candidate, guarding,
        candidate_examples=fusion.example_ranks, active_examples=candidate_examples,
    )  # fmt: skip
    progress("expansion: guard", 1.0)
    evidence = {
        "index_version": index.version,
        **(index.expansion or {}),
        "fusion": fusion.as_dict(),
        "guard": verdict.as_dict(),
        "kept": verdict.passed,
    }
    return Expanded(plan=plan, example_ranks=fusion.example_ranks, evidence=evidence, index=index)
