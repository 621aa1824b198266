"""nDCG, Recall and MRR on examples computed by hand (BEIR / trec_eval semantics), and the bm25s baseline."""

from __future__ import annotations

import math

import pytest

from ferret.core.eval.metrics import evaluate_run, mrr_at_k, ndcg_at_k, recall_at_k
from ferret.core.search.bm25_ranker import BM25Ranker

LOG2_3 = math.log2(3)  # discount of rank 2
LOG2_4 = 2.0  # discount of rank 3


def test_ndcg_with_binary_relevance() -> None:
    # One relevant document at rank 2: DCG = 1/log2(3), ideal DCG = 1.
    assert ndcg_at_k(["a", "b", "c"], {"b": 1}, 10) == pytest.approx(1 / LOG2_3)
    assert ndcg_at_k(["b", "a"], {"b": 1}, 10) == pytest.approx(1.0)
    assert ndcg_at_k(["a", "c"], {"b": 1}, 10) == 0.0
    assert ndcg_at_k(["a", "b"], {"b": 1}, 1) == 0.0  # beyond the cutoff


def test_ndcg_with_graded_relevance() -> None:
    # Ranking a(1), b(2): DCG = 1 + 2/log2(3); ideal b(2), a(1): 2 + 1/log2(3).
    expected = (1 + 2 / LOG2_3) / (2 + 1 / LOG2_3)
    assert ndcg_at_k(["a", "b"], {"a": 1, "b": 2}, 10) == pytest.approx(expected)
    assert ndcg_at_k(["a", "b"], {"a": 1, "b": 2}, 10) == pytest.approx(0.859719, abs=1e-6)
    # A relevant document never retrieved still counts in the ideal ranking.
    expected_missing = (2 / LOG2_4) / (2 + 1 / LOG2_3)
    assert ndcg_at_k(["x", "y", "b"], {"a": 1, "b": 2}, 10) == pytest.approx(expected_missing)


def test_ndcg_ideal_ranking_is_cut_at_k() -> None:
    # Three relevant documents, k=2: ideal DCG uses only the best two (both grade 1): 1 + 1/log2(3).
    assert ndcg_at_k(["a", "x"], {"a": 1, "b": 1, "c": 1}, 2) == pytest.approx(1 / (1 + 1 / LOG2_3))


def test_recall() -> None:
    relevant = {"a": 1, "d": 2, "z": 0}  # grade 0 is not a positive
    assert recall_at_k(["a", "b", "c"], relevant, 100) == pytest.approx(0.5)
    assert recall_at_k(["b", "a", "d"], relevant, 2) == pytest.approx(0.5)
    assert recall_at_k(["b", "a", "d"], relevant, 3) == pytest.approx(1.0)
    assert recall_at_k(["z"], {"z": 0}, 10) == 0.0


def test_mrr() -> None:
    assert mrr_at_k(["x", "y", "a"], {"a": 1}, 10) == pytest.approx(1 / 3)
    assert mrr_at_k(["x", "y", "a"], {"a": 1}, 2) == 0.0
    assert mrr_at_k(["a", "b"], {"a": 1, "b": 1}, 10) == 1.0
    assert mrr_at_k(["z", "a"], {"z": 0, "a": 1}, 10) == pytest.approx(0.5)


def test_evaluate_run_averages_in_percent() -> None:
    run = {"q1": {"d1": 3.0, "d2": 2.0}, "q2": {"d9": 5.0, "d3": 1.0}}
    qrels = {"q1": {"d1": 1}, "q2": {"d3": 1}}

    metrics = evaluate_run(run, qrels)

    assert metrics["ndcg@10"] == pytest.approx(100 * (1 + 1 / LOG2_3) / 2)
    assert metrics["mrr@10"] == pytest.approx(100 * (1 + 0.5) / 2)
    assert metrics["recall@100"] == pytest.approx(100.0)


def test_a_querys_own_id_is_removed_from_its_ranking() -> None:
    # ArguAna / Quora: the query is itself a corpus document and would otherwise rank first.
    run = {"q1": {"q1": 10.0, "d1": 5.0}}
    qrels = {"q1": {"d1": 1}}

    metrics = evaluate_run(run, qrels)

    assert metrics["ndcg@10"] == pytest.approx(100.0)
    assert metrics["mrr@10"] == pytest.approx(100.0)


def test_queries_without_positives_are_not_counted_and_missing_runs_score_zero() -> None:
    run = {"q1": {"d1": 1.0}, "q2": {"d2": 1.0}, "q9": {"d1": 1.0}}
    qrels = {"q1": {"d1": 1}, "q2": {"d2": 0}, "q3": {"d3": 1}}  # q2: no positive; q3: no run; q9: not judged

    metrics = evaluate_run(run, qrels)

    assert metrics == pytest.approx({"ndcg@10": 50.0, "recall@100": 50.0, "mrr@10": 50.0})


def test_ties_are_broken_by_document_id_descending_like_trec_eval() -> None:
    run = {"q": {"a": 1.0, "b": 1.0}}

    assert evaluate_run(run, {"q": {"a": 1}})["mrr@10"] == pytest.approx(50.0)
    assert evaluate_run(run, {"q": {"b": 1}})["mrr@10"] == pytest.approx(100.0)


def test_no_judged_queries_scores_zero() -> None:
    assert evaluate_run({}, {}) == {"ndcg@10": 0.0, "recall@100": 0.0, "mrr@10": 0.0}
    assert evaluate_run({"q": {"a": 1.0}}, {"q": {"a": 0}}) == {"ndcg@10": 0.0, "recall@100": 0.0, "mrr@10": 0.0}


def test_bm25_baseline_ranks_the_obvious_document_first() -> None:
    documents = {
        "paris": ("Paris", "Paris is the capital and largest city of France."),
        "jupiter": ("Jupiter", "Jupiter is the largest planet in the solar system."),
        "espresso": ("Espresso", "Espresso coffee is brewed by forcing hot water through ground beans."),
        "volcano": ("", "A volcano erupts when magma reaches the surface."),
    }
    baseline = BM25Ranker(documents)

    results = baseline.search(["capital of France", "planets of the solar system", "brewing espresso", "zzz"], k=10)

    assert [next(iter(ranking), None) for ranking in results] == ["paris", "jupiter", "espresso", None]
    assert results[0]["paris"] == max(results[0].values())
    assert all(score > 0 for ranking in results for score in ranking.values())  # no zero-score padding
    assert len(baseline.search(["largest"], k=100)[0]) == 2  # k beyond the corpus size is fine
