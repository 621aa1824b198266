"""``ferret quickstart``: the main job end to end on the embedded default, with nothing to configure.

Ingests the bundled demo corpus, indexes it with the base model in a versioned embedded Qdrant collection,
shows a few searches, and evaluates BM25 against the base model's three search modes on the demo questions.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ferret.connectors.beir.connector import BeirConnector
from ferret.connectors.beir.loader import load_queries
from ferret.core.cli.context import app_context
from ferret.core.cli.render import console, err_console, eval_table, print_results, progress_bar
from ferret.core.corpus.ingest import Ingestor, IngestReport
from ferret.core.db.corpus import get_or_create_corpus
from ferret.core.demo import DEMO_CORPUS, DEMO_DATASET
from ferret.core.encoder.registry import ModelRegistry
from ferret.core.eval.evaluate import ensure_index, evaluate_dataset
from ferret.core.search.searcher import Searcher
from ferret.core.settings import get_settings

EXAMPLE_QUERIES = (
    "Which team won Super Bowl 50?",
    "What did the Yuan dynasty do about paper money?",
    "how does the immune system recognise pathogens",
)


def run_quickstart(home: Path | None = None) -> None:
    if home is not None:
        os.environ["FERRET_HOME"] = str(home)
        get_settings.cache_clear()
    started = time.perf_counter()
    with app_context() as ctx:
        console.print(f"[bold]Ferret quickstart[/bold]  home: {ctx.settings.home}")
        corpus = get_or_create_corpus(
            ctx.session,
            DEMO_CORPUS,
            description="SQuAD v1.1 dev paragraphs (CC BY-SA 4.0)",
            max_passage_tokens=ctx.settings.max_passage_tokens,
            passage_overlap_tokens=ctx.settings.passage_overlap_tokens,
        )
        with progress_bar() as bar:
            task = bar.add_task("ingesting the demo corpus", total=None)
            report = Ingestor(
                ctx.session,
                ctx.settings,
                ctx.backend,
                corpus,
                progress=lambda r: bar.update(task, completed=r.seen),
            ).run(BeirConnector(path=str(DEMO_DATASET), name="demo"))
        _print_report(report)

        base = ModelRegistry(ctx.session, ctx.settings).ensure_base()
        index_version = ensure_index(
            ctx.session,
            ctx.settings,
            ctx.backend,
            corpus,
            base,
            lambda m: err_console.print(f"[dim]{m}[/dim]"),
        )
        console.print(
            f"index: {index_version.collection} ({index_version.point_count} passages, {index_version.state.value})\n"
        )

        searcher = Searcher(ctx.session, ctx.settings, ctx.backend)
        for query in EXAMPLE_QUERIES:
            print_results(query, searcher.search(DEMO_CORPUS, query, k=3))
            console.print()

        rows = evaluate_dataset(
            ctx.session, ctx.settings, ctx.backend, DEMO_DATASET, split="test", corpus_name=DEMO_CORPUS
        )
        console.print(eval_table(f"demo corpus: {len(load_queries(DEMO_DATASET))} questions", rows))
    console.print(
        f'done in {time.perf_counter() - started:.0f} s. Try: ferret search --corpus {DEMO_CORPUS} "your question"'
    )


def _print_report(report: IngestReport) -> None:
    console.print(
        f"documents: {report.added} added, {report.updated} updated, {report.unchanged} unchanged, "
        f"{report.deleted} deleted; {report.passages_added} passages added"
    )
