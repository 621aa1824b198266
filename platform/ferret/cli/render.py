"""Rich rendering shared by commands: result lists, evaluation tables, progress bars."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from ferret.core.eval.evaluate import EvalRow
from ferret.core.search.searcher import SearchResult

console = Console()
err_console = Console(stderr=True)


def progress_bar() -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=False,
    )


def print_results(query: str, results: Sequence[SearchResult]) -> None:
    console.print(f"[bold]{query}[/bold]")
    if not results:
        console.print("  (no results)")
    for rank, result in enumerate(results, start=1):
        title = result.title or result.external_id
        console.print(f"  {rank:>2}. [cyan]{title}[/cyan]  [dim]{result.score:.4f}  {result.external_id}[/dim]")
        console.print(f"      {result.snippet()}", highlight=False)


def eval_table(title: str, rows: Sequence[EvalRow]) -> Table:
    table = Table(title=title)
    for column in ("system", "model", "mode", "nDCG@10", "Recall@100", "MRR@10", "queries", "seconds"):
        table.add_column(column, justify="right" if column[0].isupper() or column in ("queries", "seconds") else "left")
    for row in rows:
        table.add_row(
            row.system,
            row.model or "-",
            row.mode or "-",
            f"{row.metrics['ndcg@10']:.1f}",
            f"{row.metrics['recall@100']:.1f}",
            f"{row.metrics['mrr@10']:.1f}",
            str(row.queries),
            f"{row.seconds:.1f}",
        )
    return table
