"""Search configurations over a real embedded index: explicit and active configurations, promotion and rollback as
one unit, missing pieces named in one sentence while the active configuration keeps serving, and the label-free
pieces around them (fusion tuning, the configuration guard, the reranker's pair count and negatives)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy.orm import Session

from ferret.connectors.filesystem.connector import FilesystemConnector
from ferret.core.corpus.ingest import Ingestor
from ferret.core.db.activation import CONFIG, activation_history
from ferret.core.db.audit import list_events
from ferret.core.db.corpus import create_corpus
from ferret.core.db.engine import session_scope
from ferret.core.db.migrate import upgrade
from ferret.core.db.model_version import create_model_version
from ferret.core.db.models import Corpus, ModelVersion
from ferret.core.db.search_config import active_search_config, create_search_config, list_search_configs
from ferret.core.encoder.dual_encoder import DualEncoder
from ferret.core.encoder.registry import ModelRegistry
from ferret.core.errors import ConflictError, InvalidInputError, NotFoundError
from ferret.core.eval.configs import fusion_curve
from ferret.core.eval.metrics import evaluate_run
from ferret.core.index.edge_backend import EdgeIndexBackend
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.rerank.training import RerankerTrainingConfig, check_pair_count, mine_negatives
from ferret.core.search.configuration import (
    SearchPlan,
    base_plan,
    plan_by_name,
    promote_config,
    rollback_config,
)
from ferret.core.search.fusion import DEFAULT_FUSION, Fusion
from ferret.core.search.searcher import Searcher
from ferret.core.search.tuning import (
    ALPHAS,
    REFERENCE_ALPHAS,
    Evidence,
    choose_fusion,
    fusion_from_ranks,
    objective_low,
)
from ferret.core.settings import FerretSettings
from ferret.core.training.config_guard import judge, split_evidence
from ferret.core.training.guard import LabelledQuery, bootstrap_low

FILES = {
    "volcano.txt": "Volcano eruptions push magma, lava and ash through the crust of the earth.",
    "tectonics.txt": "Plate tectonics explains earthquakes and mountains; magma rises where plates part.",
    "espresso.txt": "Espresso coffee is brewed by forcing hot water through finely ground beans.",
    "tea.txt": "Green tea is steeped in water below boiling so that the leaves do not turn bitter.",
    "leave.txt": "Parental leave lasts sixteen weeks at full salary for every employee.",
}


@dataclass
class Home:
    settings: FerretSettings
    session: Session
    backend: EdgeIndexBackend
    corpus: Corpus
    base: ModelVersion


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory, encoder: DualEncoder) -> Iterator[Home]:
    root = tmp_path_factory.mktemp("configs-home")
    settings = FerretSettings(home=root)
    settings.ensure_home()
    upgrade(settings.database_url)
    backend = EdgeIndexBackend(settings.qdrant_path)
    docs = root / "docs"
    docs.mkdir()
    for name, text in FILES.items():
        (docs / name).write_text(text)
    with session_scope(settings.database_url) as session:
        corpus = create_corpus(session, "kb", max_passage_tokens=64, passage_overlap_tokens=8)
        Ingestor(session, settings, backend, corpus).run(FilesystemConnector(root=str(docs)))
        base = ModelRegistry(session, settings).ensure_base()
        versions = VersionedCollection(session, settings, backend, corpus)
        versions.promote(versions.build(base))
        yield Home(settings, session, backend, corpus, base)
    backend.close()


def top(home: Home, query: str, selector: str | None = None) -> list[str]:
    plan = plan_by_name(home.session, home.corpus, selector) if selector else None
    return [
        r.external_id for r in Searcher.over(home.session, home.settings, home.backend).search("kb", query, plan=plan)
    ]


def test_configurations_are_versioned_promoted_and_rolled_back_as_one_unit(home: Home) -> None:
    query = "magma water"
    bm25_only = create_search_config(home.session, home.corpus, home.base, Fusion("convex", 0.0).to_json())
    dense_only = create_search_config(home.session, home.corpus, home.base, Fusion("convex", 1.0).to_json())
    home.session.commit()
    assert [c.version for c in list_search_configs(home.session, home.corpus)][-2:] == [
        bm25_only.version,
        dense_only.version,
    ]
    base_order = top(home, query, "base")
    assert top(home, query) == base_order  # no active configuration: the default fusion over the active index

    promote_config(home.session, home.settings, home.backend, home.corpus, bm25_only)
    assert active_search_config(home.session, home.corpus) == bm25_only
    assert top(home, query) == top(home, query, str(bm25_only.version))
    assert top(home, query, "base") == base_order  # the base configuration stays searchable for comparisons

    promote_config(home.session, home.settings, home.backend, home.corpus, dense_only)
    assert top(home, query) == top(home, query, str(dense_only.version))
    assert rollback_config(home.session, home.settings, home.backend, home.corpus) == bm25_only
    assert active_search_config(home.session, home.corpus) == bm25_only
    assert not dense_only.active


def test_promotions_and_rollbacks_are_in_the_audit_trail(home: Home) -> None:
    """Like index versions (issue 11, item 2): who made which configuration active, and what it replaced."""
    first = create_search_config(home.session, home.corpus, home.base, Fusion("convex", 0.3).to_json())
    second = create_search_config(home.session, home.corpus, home.base, Fusion("convex", 0.7).to_json())
    home.session.commit()

    promote_config(home.session, home.settings, home.backend, home.corpus, first, actor="key:ops")
    promote_config(home.session, home.settings, home.backend, home.corpus, second, actor="key:ops")
    rollback_config(home.session, home.settings, home.backend, home.corpus, actor="cli:ann@host")

    promotions = [(e.actor, e.target, e.detail) for e in list_events(home.session, limit=2, action="config.promote")]
    assert promotions == [  # the rollback is not recorded as a third promotion
        ("key:ops", "kb", {"version": second.version, "previous": first.version}),
        ("key:ops", "kb", promotions[1][2]),
    ]
    assert promotions[1][2]["version"] == first.version
    rollback = list_events(home.session, limit=1, action="config.rollback")[0]
    assert (rollback.actor, rollback.detail) == ("cli:ann@host", {"version": first.version, "previous": second.version})


def test_configuration_rollback_walks_back_through_the_history(home: Home) -> None:
    """As index rollback (issue 11, item 12): 3 -> 2 -> 1, not 3 -> 2 -> 3."""
    weights = (0.2, 0.5, 0.8)
    configs = [
        create_search_config(home.session, home.corpus, home.base, Fusion("convex", w).to_json()) for w in weights
    ]
    home.session.commit()
    for config in configs:
        promote_config(home.session, home.settings, home.backend, home.corpus, config, actor="key:ops")

    rollback = [rollback_config(home.session, home.settings, home.backend, home.corpus) for _ in range(2)]

    assert rollback == [configs[1], configs[0]]
    assert active_search_config(home.session, home.corpus) == configs[0]
    recent = activation_history(home.session, home.corpus, CONFIG)[-5:]
    assert [(a.version, a.via, a.withdrawn) for a in recent] == [
        (configs[0].version, "promote", True),
        (configs[1].version, "promote", True),
        (configs[2].version, "promote", True),
        (configs[1].version, "rollback", True),
        (configs[0].version, "rollback", False),
    ]


def test_an_unknown_configuration_is_a_clear_error(home: Home) -> None:
    with pytest.raises(NotFoundError, match="no search configuration 999"):
        plan_by_name(home.session, home.corpus, "999")
    with pytest.raises(InvalidInputError, match="'base' or a version number"):
        plan_by_name(home.session, home.corpus, "latest")


def test_missing_reranker_files_are_named_and_the_active_configuration_keeps_serving(
    home: Home, tmp_path: Path
) -> None:
    serving = create_search_config(home.session, home.corpus, home.base, Fusion().to_json())
    promote_config(home.session, home.settings, home.backend, home.corpus, serving)
    before = top(home, "espresso coffee")
    reranker = create_model_version(home.session, "rr-missing", str(tmp_path / "nowhere"), 1)
    broken = create_search_config(
        home.session, home.corpus, home.base, Fusion().to_json(), reranker=reranker, rerank_depth=10
    )
    home.session.commit()

    with pytest.raises(ConflictError, match="reranker 'rr-missing' are missing"):
        plan_by_name(home.session, home.corpus, str(broken.version))
    with pytest.raises(ConflictError, match="rr-missing"):
        promote_config(home.session, home.settings, home.backend, home.corpus, broken)
    assert active_search_config(home.session, home.corpus) == serving
    assert top(home, "espresso coffee") == before

    # a reranker that disappears after promotion: the active configuration serves its first stage
    broken.active, serving.active = True, False
    home.session.commit()
    assert top(home, "espresso coffee")[0] == "espresso.txt"
    broken.active, serving.active = False, True
    home.session.commit()


def test_a_deleted_model_is_named(home: Home) -> None:
    gone = create_model_version(home.session, "retriever-gone", home.base.path, home.base.dimension)
    config = create_search_config(home.session, home.corpus, gone, Fusion().to_json())
    home.session.commit()
    home.session.delete(gone)
    home.session.commit()
    home.session.refresh(config)
    assert config.retriever_id is None and config.retriever_name == "retriever-gone"
    with pytest.raises(ConflictError, match="model 'retriever-gone', which was deleted"):
        plan_by_name(home.session, home.corpus, str(config.version))


def test_fusion_is_tuned_only_with_enough_evidence(home: Home) -> None:
    searcher = Searcher.over(home.session, home.settings, home.backend)
    plan = base_plan(home.session, home.corpus)
    ids = {r.external_id: r.document_id for r in searcher.search("kb", "espresso tea volcano leave magma", k=10)}
    thin = choose_fusion(searcher, plan, Evidence([LabelledQuery("espresso coffee", ids["espresso.txt"])], []))
    assert thin.fusion == DEFAULT_FUSION and "1 labelled queries" in thin.reason and "default" in thin.reason
    queries = [
        ("magma rises where plates part", "tectonics.txt"),
        ("volcano lava ash", "volcano.txt"),
        ("brewing espresso", "espresso.txt"),
        ("steeping green tea", "tea.txt"),
        ("parental leave salary", "leave.txt"),
        ("coffee beans ground", "espresso.txt"),
    ]
    evidence = Evidence([LabelledQuery(q, ids[d]) for q, d in queries], [])
    choice = choose_fusion(searcher, plan, evidence)
    assert choice.queries == 6 and set(choice.scores) == {"rrf", *(f"{a / 10:.1f}" for a in range(1, 10))}
    assert choice.scores["rrf"] == pytest.approx(1.0)  # RRF is scored for reference
    assert choice.scores[f"{DEFAULT_FUSION.weight:.1f}"] == pytest.approx(1.0)  # every labelled document first:
    assert choice.fusion == DEFAULT_FUSION and choice.objective == pytest.approx(1.0)  # nothing to gain on the default


def test_the_retriever_whose_tuned_fusion_scores_higher_is_kept(home: Home, tmp_path: Path) -> None:
    """The configure stage does not assume its trained model is the better retriever: a model whose word embeddings
    were shuffled (dense search at random) loses to the base model on the same evidence, although it comes first."""
    import torch
    from sentence_transformers import SentenceTransformer

    from ferret.core.pipeline.promptagator.configure import tune_retrievers

    scrambled_dir = tmp_path / "scrambled"
    model = SentenceTransformer(home.base.path, device="cpu", local_files_only=True)
    transformer: Any = model[0]
    embeddings = transformer.auto_model.get_input_embeddings().weight
    with torch.no_grad():
        embeddings.copy_(embeddings[torch.randperm(embeddings.shape[0], generator=torch.Generator().manual_seed(0))])
    model.save(str(scrambled_dir))
    scrambled = ModelRegistry(home.session, home.settings).register("scrambled", scrambled_dir, parent=home.base)
    index = VersionedCollection(home.session, home.settings, home.backend, home.corpus).build(scrambled)
    searcher = Searcher.over(home.session, home.settings, home.backend)
    ids = {r.external_id: r.document_id for r in searcher.search("kb", "espresso tea volcano leave magma", k=10)}
    queries = [
        ("molten rock from below the ground", "volcano.txt"),
        ("why the ground shakes", "tectonics.txt"),
        ("a strong coffee", "espresso.txt"),
        ("a hot drink made from leaves", "tea.txt"),
        ("time off after a baby is born", "leave.txt"),
        ("how to make a cup of coffee", "espresso.txt"),
    ]
    evidence = Evidence([LabelledQuery(q, ids[d]) for q, d in queries], [])
    first = SearchPlan(index.collection, scrambled.path, label="scrambled")
    tuned = tune_retrievers(searcher, [(scrambled, first), (home.base, base_plan(home.session, home.corpus))], evidence)
    assert [m.name for m, _, _ in tuned] == ["base", "scrambled"]
    assert tuned[0][2].objective is not None and tuned[1][2].objective is not None
    assert tuned[0][2].objective > tuned[1][2].objective
    # too little evidence to tune on: nothing to compare by, the given order stays
    thin = Evidence(evidence.examples[:1], [])
    assert [m.name for m, _, _ in tune_retrievers(searcher, [(scrambled, first), (home.base, first)], thin)] == [
        "scrambled",
        "base",
    ]


def test_the_configuration_guard_keeps_the_model_guards_rules() -> None:
    examples = [LabelledQuery("e", 1)]
    few = Evidence(examples, [LabelledQuery(f"q{i}", i) for i in range(10)])
    many = Evidence(examples, [LabelledQuery(f"q{i}", i) for i in range(60)])
    ones, halves = np.ones(61), np.full(61, 0.5)
    assert "only 10 held-out queries" in judge(ones[:11], halves[:11], few).reason
    assert judge(ones, halves, many).passed
    assert "does not beat" in judge(halves, ones, many).reason
    noisy = np.concatenate([[1.0], np.tile([1.0, 0.0], 30)])
    reference = np.concatenate([[1.0], np.tile([0.0, 0.97], 30)])
    assert "not sure" in judge(noisy, reference, many, min_gain=0.0).reason
    worse_examples = ones.copy()
    worse_examples[0] = 0.0
    assert "examples fell" in judge(worse_examples, halves, many).reason


def _examples(n: int) -> list[LabelledQuery]:
    return [LabelledQuery(f"example {i}", i) for i in range(n)]


def _ranks_by_alpha(preferred: list[tuple[float, float]]) -> list[np.ndarray]:
    """Each query ranks its document first (1.0) only within its preferred range of α, second (0.5) elsewhere."""
    return [np.array([1.0 if low <= alpha <= high else 0.5 for low, high in preferred]) for alpha in ALPHAS]


def test_a_weight_the_examples_agree_on_is_chosen_and_its_example_ranks_are_out_of_sample() -> None:
    evidence = Evidence(_examples(8), [])
    default = np.full(8, 0.5)
    agreed = [np.full(8, 1.0 if alpha <= 0.4 else 0.5) for alpha in ALPHAS]
    choice = fusion_from_ranks(default, agreed, evidence)
    assert choice.fusion == Fusion("convex", 0.1) and choice.example_ranks == (1.0,) * 8  # the grid's lowest
    assert choice.scores["examples out of sample"] == pytest.approx(1.0) and choice.objective == pytest.approx(1.0)


def test_a_weight_fitted_to_its_own_examples_is_refused_out_of_sample() -> None:
    """Half the examples gain at α 0.1–0.3 only, half at 0.8–1.0 only: on all eight α=0.2 scores 0.75 against the
    default's 0.5, and a bootstrap of those same eight ranks calls the gain sure. Left out, each example is ranked
    under the other camp's weight and gains nothing, so the default stays."""
    evidence = Evidence(_examples(8), [])
    preferred = [(0.1, 0.3)] * 4 + [(0.8, 1.0)] * 4
    default = np.full(8, 0.5)
    choice = fusion_from_ranks(default, _ranks_by_alpha(preferred), evidence)
    in_sample = _ranks_by_alpha(preferred)[ALPHAS.index(0.2)]
    assert in_sample.mean() == 0.75 and bootstrap_low(in_sample - default) > 0  # what the in-sample check would pass
    assert choice.fusion == DEFAULT_FUSION
    assert "convex α=0.1 scores 0.750" in choice.reason and "not sure" in choice.reason
    assert choice.scores["examples out of sample"] == pytest.approx(0.5)
    assert choice.objective == pytest.approx(0.5)  # the default's: what a retriever tuned this way is compared by


def test_the_default_weight_stays_when_the_evidence_prefers_it() -> None:
    """Where the evidence's best smoothed weight is the default's own, nothing is re-tuned, and the reason names the
    default (its gain over itself is zero, never 'sure')."""
    evidence = Evidence(_examples(8), [LabelledQuery(f"q{i}", i) for i in range(40)])
    ranks = [np.full(48, 1.0 if abs(alpha - DEFAULT_FUSION.weight) < 0.15 else 0.5) for alpha in ALPHAS]
    choice = fusion_from_ranks(ranks[ALPHAS.index(DEFAULT_FUSION.weight)], ranks, evidence)
    assert choice.fusion == DEFAULT_FUSION and choice.reason.startswith("default kept")
    assert choice.objective == pytest.approx(1.0) and choice.example_ranks == ()


def test_the_objective_is_resampled_within_each_half() -> None:
    examples_gain = np.concatenate([np.full(8, 0.5), np.zeros(200)])
    assert objective_low(examples_gain, 8) == pytest.approx(0.25)  # eight examples keep half the weight
    assert bootstrap_low(examples_gain) < 0.05  # pooled, they are 8 of 208
    synthetic = np.random.default_rng(1).normal(0.01, 0.1, size=100)
    assert objective_low(synthetic, 0) == bootstrap_low(synthetic)


def test_with_enough_examples_the_guard_weighs_them_as_half_of_the_evidence() -> None:
    many = Evidence(_examples(8), [LabelledQuery(f"q{i}", i) for i in range(60)])
    active = np.full(68, 0.5)
    examples_better = active.copy()
    examples_better[:8] = 1.0
    report = judge(examples_better, active, many)
    assert report.passed and report.weighs_examples and report.held_out_gain_low == pytest.approx(0.25)
    # the same ranks with fewer examples than ``min_examples``: the held-out queries alone decide, and they tie
    assert "held-out MRR@10 0.500 does not beat" in judge(examples_better, active, many, min_examples=9).reason
    # the synthetic half may not fall, whatever the examples gain
    held_worse = examples_better.copy()
    held_worse[8:] = np.tile([0.5, 0.45], 30)
    assert "held-out MRR@10 fell from 0.500 to 0.475" in judge(held_worse, active, many).reason
    # ranks the weight was fitted to are replaced by out-of-sample ones: no gain is left
    assert "does not beat" in judge(examples_better, active, many, candidate_examples=[0.5] * 8).reason
    with pytest.raises(ValueError, match="3 out-of-sample example ranks for 8 examples"):
        judge(examples_better, active, many, candidate_examples=[1.0] * 3)
    # a reranker against its own first stage: both sides' example ranks out of sample; a reranker that only
    # matches the first stage does not stay (the pipeline's configure stage drops it)
    first_stage = examples_better
    report = judge(examples_better, first_stage, many, candidate_examples=[1.0] * 8, active_examples=[0.5] * 8)
    assert report.passed and report.active_examples_mrr == 0.5
    assert "does not beat" in judge(examples_better, first_stage, many, active_examples=[1.0] * 8).reason


def test_guard_and_tuning_read_different_held_out_queries() -> None:
    held = [LabelledQuery(f"query number {i}", i) for i in range(200)]
    tuning, guarding = split_evidence([LabelledQuery("e", 0)], held)
    assert {q.text for q in tuning.synthetic}.isdisjoint({q.text for q in guarding.synthetic})
    assert len(tuning.synthetic) + len(guarding.synthetic) == 200
    assert 60 < len(guarding.synthetic) < 140
    assert tuning.examples == guarding.examples


def test_a_reranker_needs_enough_pairs_and_skips_the_top_ranks() -> None:
    with pytest.raises(InvalidInputError, match="Only 150 kept synthetic pairs; a reranker needs at least 200"):
        check_pair_count(150)
    config = RerankerTrainingConfig(negatives=2, pool=3, skip_top=2, mine_depth=8)
    mined = mine_negatives([[1, 2, 3, 4, 5, 6, 7, 8, 9]], [4], config)[0]
    assert len(mined) == 3 and set(mined) <= {3, 5, 6, 7, 8}
    assert mine_negatives([[1, 2, 3, 4, 5, 6, 7, 8, 9]], [4], config) == [mined]  # seeded
    # a pool larger than the ranks keeps them all (training draws ``negatives`` of them each epoch)
    wide = RerankerTrainingConfig(negatives=2, pool=30, skip_top=2, mine_depth=8)
    assert sorted(mine_negatives([[1, 2, 3, 4, 5, 6, 7, 8, 9]], [4], wide)[0]) == [3, 5, 6, 7, 8]


def test_the_fusion_curve_scores_every_weight_as_the_search_does(home: Home) -> None:
    """The benchmarks' reference α curve fuses one fetch of candidates offline; each point must equal what searching
    with that fusion gives (one-word queries included, whose BM25 list is shorter than its depth)."""
    searcher = Searcher.over(home.session, home.settings, home.backend)
    ids = {name: top(home, text)[0] for name, text in FILES.items()}
    queries = {"q1": "magma", "q2": "how is coffee brewed", "q3": "weeks off after a baby", "q4": "bitter leaves"}
    qrels = {
        "q1": {ids["volcano.txt"]: 1, ids["tectonics.txt"]: 1}, "q2": {ids["espresso.txt"]: 1},
        "q3": {ids["leave.txt"]: 1}, "q4": {ids["tea.txt"]: 1},
    }  # fmt: skip
    base = base_plan(home.session, home.corpus)

    curve = fusion_curve(searcher, base, queries, qrels)

    assert list(curve) == ["rrf", *(f"{a:.1f}" for a in REFERENCE_ALPHAS)]
    for key, fusion in (("rrf", Fusion()), ("0.0", Fusion("convex", 0.0)), ("0.5", Fusion("convex", 0.5))):
        plan = SearchPlan(base.collection, base.model_path, fusion)
        found = searcher.search_many("kb", list(queries.values()), k=100, mode="hybrid", plan=plan)
        run = {
            q: {r.external_id: float(100 - n) for n, r in enumerate(hits)}
            for q, hits in zip(queries, found, strict=True)
        }
        assert curve[key] == pytest.approx(evaluate_run(run, qrels)["ndcg@10"]), key
