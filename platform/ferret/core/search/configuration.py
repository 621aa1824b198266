"""Search configurations: what search runs (retriever + fusion + reranker), promoted and rolled back as one unit.

A ``SearchConfig`` row names models; a ``SearchPlan`` is what the Searcher needs to run it (the collection built by
the retriever, its model folder, the fusion, the loaded reranker). Turning a row into a plan is where missing
pieces are found, each with a one-sentence error naming it: a deleted model, a retriever with no live index, a
reranker whose files are gone. Promotion resolves the plan first, so a broken configuration is never made active
and the active one keeps serving.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ferret.core.db.activation import CONFIG, PROMOTE, ROLLBACK, record_activation, rollback_target
from ferret.core.db.audit import SYSTEM_ACTOR, record_event
from ferret.core.db.corpus import get_corpus
from ferret.core.db.index_version import (
    LIVE_STATES,
    active_index_version,
    get_index_version,
    live_index_versions,
    plain_index_versions,
)
from ferret.core.db.model_version import find_model_version
from ferret.core.db.models import Corpus, IndexVersion, ModelVersion, SearchConfig
from ferret.core.db.search_config import (
    active_search_config,
    create_search_config,
    get_search_config,
    list_search_configs,
    mark_active,
)
from ferret.core.encoder.registry import BASE_MODEL_NAME
from ferret.core.errors import ConflictError, InvalidInputError, NotFoundError
from ferret.core.index.backend import IndexBackend
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.rerank.cross_encoder import CROSS_ENCODER_KIND, CrossScorer, load_reranker
from ferret.core.search.fusion import DEFAULT_FUSION, Fusion
from ferret.core.settings import FerretSettings

log = logging.getLogger(__name__)

DEFAULT_RERANK_DEPTH = 10
"""Documents the reranker reads per query by default: the deepest setting whose p50 meets issue 12's 300 ms on 2 CPU
cores. Served by ONNX Runtime with int8 weights at 128 wordpieces (``FERRET_RERANKER_RUNTIME``), one query costs
246 ms p50 at depth 10 and 509 ms at depth 20 on the shared AMD EPYC cores at load 4 (torch fp32: 1,078 / 1,425 ms),
and 93 / 186 ms on idle Intel cores with VNNI (torch fp32: 118 / 237 ms; benchmarks/rerank_latency.py). Quality on
SciFact (300 test queries, 128 wordpieces): the trained rerankers' fused scores cost 1.0-2.2 nDCG@10 at depth 10 and
1.3-2.8 at depth 20 against the first stage alone, so no depth buys quality yet (benchmarks/RESULTS.md, issue 12,
third, fourth and twenty-first sessions)."""
DEFAULT_RERANK_WEIGHT = 0.5
"""The reranker's share of the fused score when nothing chose one (the tuning picks it from the task's evidence)."""

_ACTIVE_TTL_S = 2.0


@dataclass(frozen=True)
class SearchPlan:
    collection: str
    model_path: str
    fusion: Fusion = DEFAULT_FUSION
    reranker: CrossScorer | None = None
    rerank_depth: int = 0
    rerank_weight: float = DEFAULT_RERANK_WEIGHT
    label: str = "base"


def _index_of(session: Session, corpus: Corpus, model: ModelVersion) -> IndexVersion:
    live = plain_index_versions(session, corpus, model)
    if not live:
        missing = f"Model {model.name!r} has no live index of corpus {corpus.name!r}"
        raise ConflictError(
            f"{missing}; run `ferret index build --corpus {corpus.name} --model {model.name}`.",
            over_http=f"{missing}; build one with POST /v1/corpora/{corpus.name}/index-versions and "
            f'{{"model": "{model.name}"}}.',
        )
    return max(live, key=lambda v: (v.state.value == "active", v.version))


def _config_index(session: Session, corpus: Corpus, config: SearchConfig, retriever: ModelVersion) -> IndexVersion:
    """The index a configuration searches: the version it names (an expanded one), else its retriever's plain one."""
    named = config.index_version
    if named is None:
        return _index_of(session, corpus, retriever)
    if named.state not in LIVE_STATES:
        raise ConflictError(
            f"Search configuration {config.version} searches index version {named.version}, which is "
            f"{named.state.value}; promote another configuration or run the pipeline again to rebuild it."
        )
    return named


def plan_for(session: Session, corpus: Corpus, config: SearchConfig) -> SearchPlan:
    """The runnable form of a configuration, or a one-sentence error naming what is missing."""
    label = f"configuration {config.version}"
    if config.retriever is None:
        raise ConflictError(f"Search {label} uses model {config.retriever_name!r}, which was deleted.")
    index = _config_index(session, corpus, config, config.retriever)
    reranker = None
    if config.reranker_name is not None:
        if config.reranker is None:
            raise ConflictError(f"Search {label} uses reranker {config.reranker_name!r}, which was deleted.")
        reranker = load_reranker(config.reranker.path, name=config.reranker.name)
    return SearchPlan(
        collection=index.collection,
        model_path=index.model_version.path,
        fusion=Fusion.from_json(config.fusion),
        reranker=reranker,
        rerank_depth=config.rerank_depth,
        rerank_weight=config.rerank_weight,
        label=label,
    )


def index_activation_note(
    session: Session, corpus: Corpus, index_version: IndexVersion, *, over_http: bool = False
) -> str | None:
    """What an index promotion or rollback leaves unchanged: with a search configuration active, searches read the
    index of that configuration's retriever, so activating another model's index does not change them (None when
    it does). ``over_http``: the remedy as API routes, not CLI commands."""
    config = active_search_config(session, corpus)
    if config is None or config.retriever_id in (None, index_version.model_version_id):
        return None
    model = index_version.model_version.name
    how = (
        f'POST /v1/corpora/{corpus.name}/search-configs with {{"retriever": "{model}"}}, then its promote route'
        if over_http
        else f"`ferret config create --corpus {corpus.name} --retriever {model}`, then `ferret config promote`"
    )
    return (
        f"Search configuration {config.version} is active and searches with retriever {config.retriever_name!r}, so "
        f"searches keep reading that model's index; to search with {model!r}, promote a configuration that uses it "
        f"({how})."
    )


def base_plan(session: Session, corpus: Corpus) -> SearchPlan:
    """The untrained default: the base model's index with the default fusion (``DEFAULT_FUSION``), no reranker."""
    model = session.scalar(select(ModelVersion).where(ModelVersion.name == BASE_MODEL_NAME))
    if model is None:
        raise NotFoundError("The base model is not registered; build an index first.")
    index = _index_of(session, corpus, model)
    return SearchPlan(collection=index.collection, model_path=model.path, label="base")


def default_plan(session: Session, corpus: Corpus) -> SearchPlan | None:
    """What search runs when a corpus has no active configuration: the default fusion over its active index
    version."""
    index = active_index_version(session, corpus)
    if index is None:
        return None
    label = f"default fusion over {index.model_version.name}"
    return SearchPlan(index.collection, index.model_version.path, label=label)


def read_active_plan(session: Session, corpus_name: str) -> SearchPlan | None:
    """The active configuration's plan, read now (``ActivePlans`` keeps it per searcher). A broken active
    configuration (a reranker's files deleted after promotion) keeps serving its first stage, with the error in the
    log, rather than failing every search."""
    corpus = get_corpus(session, corpus_name)
    config = active_search_config(session, corpus)
    if config is None:
        return None
    try:
        return plan_for(session, corpus, config)
    except ConflictError as error:
        log.error("%s; serving the first stage of the active configuration without it", error)
        return _first_stage_only(session, corpus, config)


class ActivePlans:
    """The active plan of each corpus, kept for a couple of seconds by one searcher, so search runs one small query
    per corpus at most that often; a promotion (in this process or another) is seen within that time, or at once
    after ``forget``."""

    def __init__(self, ttl_s: float = _ACTIVE_TTL_S) -> None:
        self.ttl_s = ttl_s
        self._plans: dict[str, tuple[float, SearchPlan | None]] = {}
        self._lock = threading.Lock()

    def get(self, corpus_name: str, sessions: Callable[[], AbstractContextManager[Session]]) -> SearchPlan | None:
        now = time.monotonic()
        with self._lock:
            cached = self._plans.get(corpus_name)
            if cached is not None and now - cached[0] < self.ttl_s:
                return cached[1]
        with sessions() as session:
            plan = read_active_plan(session, corpus_name)
        with self._lock:
            self._plans[corpus_name] = (now, plan)
        return plan

    def forget(self, corpus_name: str | None = None) -> None:
        """Drop the kept plan of ``corpus_name`` (or of every corpus), after a promotion in this process."""
        with self._lock:
            if corpus_name is None:
                self._plans.clear()
            else:
                self._plans.pop(corpus_name, None)


def _first_stage_only(session: Session, corpus: Corpus, config: SearchConfig) -> SearchPlan | None:
    if config.retriever is None:
        return None
    try:
        index = _config_index(session, corpus, config, config.retriever)
    except ConflictError:  # its expanded index is gone: its retriever's plain one serves, if there is one
        try:
            index = _index_of(session, corpus, config.retriever)
        except ConflictError:
            return None
    return SearchPlan(index.collection, index.model_version.path, Fusion.from_json(config.fusion), label="degraded")


def create_config(
    session: Session,
    corpus: Corpus,
    *,
    retriever: str = BASE_MODEL_NAME,
    fusion: Fusion = DEFAULT_FUSION,
    reranker: str | None = None,
    rerank_depth: int = DEFAULT_RERANK_DEPTH,
    rerank_weight: float = DEFAULT_RERANK_WEIGHT,
    note: str = "",
    actor: str = SYSTEM_ACTOR,
    index_version: int | None = None,
) -> SearchConfig:
    """A configuration made by hand (an admin's fusion weight, RRF, a reranker at another depth), stored and not
    active: ``promote_config`` makes it what search runs, and ``--config N`` searches it beside the active one. Its
    plan is resolved before it is committed, so a model that is not registered, a reranker named as a retriever (or
    the reverse), a retriever without a live index of the corpus or a reranker without its files is refused in one
    sentence and nothing is stored. ``index_version`` names the version it searches (an expanded one, which a
    configuration naming only the model never finds); it must be a live version built by ``retriever``. A plain one
    is stored as the retriever's own index, which follows its rebuilds."""
    model = find_model_version(session, retriever)
    if model is None:
        raise NotFoundError(
            f"Model {retriever!r} is not registered; `ferret index list --corpus {corpus.name}` names the models "
            "indexed for this corpus.",
            over_http=f"Model {retriever!r} is not registered; GET /v1/corpora/{corpus.name}/index-versions names "
            "the models indexed for this corpus.",
        )
    if model.kind == CROSS_ENCODER_KIND:
        raise InvalidInputError(f"Model {retriever!r} is a reranker (a cross-encoder), not a retriever.")
    scorer = None
    if reranker is not None:
        scorer = find_model_version(session, reranker)
        if scorer is None:
            raise NotFoundError(f"Reranker {reranker!r} is not registered.")
        if scorer.kind != CROSS_ENCODER_KIND:
            raise InvalidInputError(f"Model {reranker!r} is a retriever, not a reranker (a cross-encoder).")
        if not 1 <= rerank_depth <= 1000:
            raise InvalidInputError(f"The reranker's depth must be between 1 and 1000 documents, not {rerank_depth}.")
    if not 0.0 <= rerank_weight <= 1.0:
        raise InvalidInputError(f"The reranker's weight must be between 0 and 1, not {rerank_weight}.")
    named = None if index_version is None else get_index_version(session, corpus, index_version)
    if named is not None and named.model_version_id != model.id:
        raise InvalidInputError(
            f"Index version {named.version} was built by model {named.model_version.name!r}, not {retriever!r}."
        )
    config = create_search_config(
        session, corpus, model, fusion.to_json(), reranker=scorer, rerank_depth=rerank_depth,
        rerank_weight=rerank_weight, evidence={"made_by": actor}, note=note,
        index_version=named if named is not None and named.expansion is not None else None,
    )  # fmt: skip
    try:
        plan_for(session, corpus, config)
    except BaseException:
        session.rollback()
        raise
    shown = describe(config)
    keys = ("version", "retriever", "fusion", "reranker", "rerank_depth", "index_version")
    detail = {key: shown[key] for key in keys}
    record_event(session, actor, "config.create", corpus.name, detail)
    session.commit()
    return config


def promote_config(
    session: Session,
    settings: FerretSettings,
    backend: IndexBackend,
    corpus: Corpus,
    config: SearchConfig,
    *,
    actor: str = SYSTEM_ACTOR,
    via: str = PROMOTE,
) -> SearchConfig:
    """Make ``config`` what search runs: its retriever's index becomes the alias target and the row the active one.
    Its plan is resolved first, so a configuration with a missing piece is refused and nothing changes. The audit
    trail names ``actor``, as for index versions (issue 11, item 2); the activation history gets a row, committed
    with the index's alias swap (or rolled back with it)."""
    plan = plan_for(session, corpus, config)
    index = next(v for v in live_index_versions(session, corpus) if v.collection == plan.collection)
    previous = active_search_config(session, corpus)
    if previous is None or previous.id != config.id:
        record_event(  # one event, named by what the admin did: config.promote or config.rollback
            session,
            actor,
            f"config.{via}",
            corpus.name,
            {"version": config.version, "previous": previous.version if previous is not None else None},
        )
        record_activation(session, corpus, CONFIG, config.version, actor=actor, via=via)
    mark_active(session, config)
    try:
        VersionedCollection(session, settings, backend, corpus).promote(index, actor=actor, via=via)
        session.commit()  # when the index was already active, promote committed nothing
    except BaseException:
        session.rollback()
        raise
    return config


def rollback_config(
    session: Session, settings: FerretSettings, backend: IndexBackend, corpus: Corpus, *, actor: str = SYSTEM_ACTOR
) -> SearchConfig:
    """Re-activate the configuration active before the current one; each rollback goes one step further back in the
    activation history (3 → 2 → 1), as index rollback does."""
    current = active_search_config(session, corpus)
    configs = {c.version: c for c in list_search_configs(session, corpus)}
    number = rollback_target(
        session, corpus, CONFIG, is_live=lambda n: n in configs and (current is None or n != current.version)
    )
    if number is None:
        where = (
            f"configuration {current.version} is the oldest activation left"
            if current is not None
            else "no configuration is active"
        )
        nothing = f"Corpus {corpus.name!r} has no earlier search configuration to roll back to ({where})"
        raise ConflictError(
            f"{nothing}; promote one by number with `ferret config promote`.",
            over_http=f"{nothing}; promote one with POST /v1/corpora/{corpus.name}/search-configs/{{version}}/promote.",
        )
    try:
        return promote_config(session, settings, backend, corpus, configs[number], actor=actor, via=ROLLBACK)
    except BaseException:
        session.rollback()  # the withdrawn history rows come back: nothing changed
        raise


def plan_by_name(session: Session, corpus: Corpus, selector: str) -> SearchPlan:
    """An explicit configuration for a comparison: ``base`` (the untrained default) or a version number."""
    if selector == "base":
        return base_plan(session, corpus)
    if not selector.isdigit():
        raise InvalidInputError(f"A search configuration is 'base' or a version number, not {selector!r}.")
    return plan_for(session, corpus, get_search_config(session, corpus, int(selector)))


def retriever_label(shown: Mapping[str, Any]) -> str:
    """A described configuration's retriever as a table shows it: with the expanded index it searches, if any."""
    expansion = shown.get("expansion")
    if not isinstance(expansion, dict):
        return str(shown["retriever"])
    return f"{shown['retriever']} + expansion ({expansion.get('queries', 0)} queries, index v{shown['index_version']})"


def describe(config: SearchConfig) -> dict[str, object]:
    """One configuration as the CLI and the API show it; ``index_version`` and ``expansion`` are set when it
    searches an expanded index rather than its retriever's plain one."""
    return {
        "version": config.version,
        "active": config.active,
        "retriever": config.retriever_name + ("" if config.retriever_id is not None else " (deleted)"),
        "fusion": Fusion.from_json(config.fusion).describe(),
        "reranker": None
        if config.reranker_name is None
        else config.reranker_name + ("" if config.reranker_id is not None else " (deleted)"),
        "rerank_depth": config.rerank_depth,
        "rerank_weight": config.rerank_weight,
        "index_version": config.index_version.version if config.index_version is not None else None,
        "expansion": config.index_version.expansion if config.index_version is not None else None,
        "guard": config.evidence.get("guard"),
        "note": config.note,
        "created_at": config.created_at.isoformat() if config.created_at else None,
        "activated_at": config.activated_at.isoformat() if config.activated_at else None,
    }
