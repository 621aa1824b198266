"""``evaluate_dataset`` on a real home (SQLite, embedded Qdrant, MiniLM): the queries it scores."""

from __future__ import annotations

from pathlib import Path

from ferret.connectors.registry import build_connector
from ferret.core.eval.evaluate import evaluate_dataset
from ferret.runtime.context import app_context


def test_queries_left_out_are_not_scored(ferret_home: Path, tiny_beir: Path) -> None:
    """A benchmark whose few-shot examples come from the evaluated split leaves their queries out: each row then
    counts the other queries, and a relevant document found for a left-out query no longer lifts the mean."""
    with app_context() as ctx:
        every = evaluate_dataset(
            ctx.session, ctx.settings, ctx.backend, tiny_beir, connectors=build_connector, modes=("sparse",)
        )
        fewer = evaluate_dataset(
            ctx.session, ctx.settings, ctx.backend, tiny_beir, connectors=build_connector, modes=("sparse",),
            exclude_queries={"q1", "q3"},
        )  # fmt: skip
    assert [(row.system, row.mode, row.queries) for row in every] == [("bm25s", None, 4), ("ferret", "sparse", 4)]
    assert [(row.system, row.mode, row.queries) for row in fewer] == [("bm25s", None, 2), ("ferret", "sparse", 2)]
