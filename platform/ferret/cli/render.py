"""Rich rendering shared by commands: result lists, evaluation tables, progress bars."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from ferret.core.search.fusion import DEFAULT_FUSION, Fusion
from ferret.core.search.snippets import SNIPPET_CHARS, snippet_window, terms_pattern

if TYPE_CHECKING:  # types only: importing the searcher would load the ML stack with every command
    from ferret.core.db.models import Activation
    from ferret.core.eval.evaluate import EvalRow
    from ferret.core.search.searcher import SearchResult

console = Console()
err_console = Console(stderr=True)


def moment(at: datetime | None) -> str:
    """A timestamp as the listing commands print it (seconds: two activations can fall in one minute)."""
    return f"{at:%Y-%m-%d %H:%M:%S}" if at is not None else ""


def activation_fields(activation: Activation | None, activated_at: datetime | None) -> dict[str, str | None]:
    """When a version was last made active, by whom and how (``--json`` rows of ``index list``, ``config list``);
    ``activated_at`` is the version's own time, for a version activated before the history was kept."""
    return {
        "activated_at": moment(activation.activated_at if activation is not None else activated_at),
        "activated_by": activation.actor if activation is not None else None,
        "via": activation.via if activation is not None else None,
    }


PROGRESS_INTERVAL_ENV = "FERRET_PROGRESS_INTERVAL_S"


class PlainLineProgress(Progress):
    """rich's ``Progress`` printed as plain lines at a steady interval, for output that is no terminal (a log file,
    a container, CI), where the live bar draws nothing until the end: a task's start, then every ``interval``
    seconds each unfinished task's state, whether or not it moved (so a long training step still shows life), then
    each task's end. Same API as the bar, so commands need not know which they got."""

    def __init__(self, console: Console, interval: float) -> None:
        super().__init__(console=console, disable=True)
        self.interval = interval
        self._line_console = console
        self._stopping = threading.Event()
        self._beat: threading.Thread | None = None
        self._started = time.monotonic()
        self._reported_done: set[Any] = set()

    def start(self) -> None:
        super().start()
        self._beat = threading.Thread(target=self._heartbeat, name="ferret-progress-lines", daemon=True)
        self._beat.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._beat is not None:
            self._beat.join()
        self._print_lines()
        super().stop()

    def add_task(self, description: str, *args: Any, **kwargs: Any) -> Any:
        task_id = super().add_task(description, *args, **kwargs)
        self._line(f"{description}: started")
        return task_id

    def _heartbeat(self) -> None:
        while not self._stopping.wait(self.interval):
            self._print_lines()

    def _line(self, text: str) -> None:
        elapsed = time.monotonic() - self._started
        self._line_console.print(f"[{elapsed:7.1f}s] {text}", markup=False, highlight=False, soft_wrap=True)

    def _print_lines(self) -> None:
        for task in list(self.tasks):
            if task.id in self._reported_done:
                continue
            if task.total:
                state = f"{task.completed:g}/{task.total:g} ({100 * task.completed / task.total:.0f}%)"
                if task.total == 1.0:
                    state = f"{100 * task.completed:.0f}%"
                    if task.fields.get("of"):  # a job's bar beside a label that names its stage's own share
                        state += f" of the {task.fields['of']}"
            else:
                state = f"{task.completed:g} done"
            self._line(f"{task.description}: {state}")
            if task.finished:
                self._reported_done.add(task.id)


def progress_bar() -> Progress:
    """A live bar on a terminal; elsewhere plain lines every ``FERRET_PROGRESS_INTERVAL_S`` seconds (default 15)."""
    if not err_console.is_terminal:
        return PlainLineProgress(err_console, float(os.environ.get(PROGRESS_INTERVAL_ENV, "15")))
    return Progress(
        SpinnerColumn(),
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=False,
    )


def score_legend(mode: str, fusion: Fusion = DEFAULT_FUSION) -> str:
    """What a result's score means under the search that made it, printed under the results (issue 11, item 12: raw
    RRF values puzzled users); a hybrid search's is its own configuration's fusion, not the default's."""
    if mode == "dense":
        return "scores: cosine similarity of query and passage (1 is identical)"
    if mode == "sparse":
        return "scores: BM25 of the best passage (unbounded; compare within one query only)"
    if fusion.method == "rrf":
        return "scores: Σ 1/(60 + rank from 0) over the dense and the BM25 ranking (reciprocal rank fusion)"
    scale = (
        "scaled to 0-1 within the query"
        if fusion.normalisation == "minmax"
        else "scaled so the query's best is 1 (from cosine -1, BM25 0)"
    )
    return f"scores: α·dense + (1-α)·BM25 with α={fusion.weight:.2f}, each {scale}, so 1 is first in both"


SNIPPET_INDENT = 6


def result_snippet(text: str, query: str) -> Text:
    """The passage around the query's first word, the query's words in bold (as the terminal client marks them)."""
    snippet = Text(snippet_window(text, query, width=SNIPPET_CHARS))
    pattern = terms_pattern(query)
    if pattern is not None:
        snippet.highlight_regex(pattern, "bold")
    return snippet


def print_indented(text: Text, indent: int) -> None:
    """``text`` wrapped to the console's width, every line indented (a plain print indents only the first)."""
    for line in text.wrap(console, max(20, console.width - indent)):
        line.rstrip()
        console.print(Text(" " * indent) + line, highlight=False)


def print_results(
    query: str, results: Sequence[SearchResult], mode: str | None = None, fusion: Fusion = DEFAULT_FUSION
) -> None:
    console.print(f"[bold]{query}[/bold]")
    if not results:
        console.print("  (no results)")
    for rank, result in enumerate(results, start=1):
        title = result.title or result.external_id
        where = f"{result.source}: {result.external_id}" if result.source else result.external_id
        console.print(f"  {rank:>2}. [cyan]{escape(title)}[/cyan]  [dim]{result.score:.4f}  {escape(where)}[/dim]")
        print_indented(result_snippet(result.text, query), SNIPPET_INDENT)
    if results and mode is not None:
        print_indented(Text(score_legend(mode, fusion), style="dim"), 2)


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
