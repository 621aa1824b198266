"""``ferret tui``: search as you type from a terminal, against the local store or a remote Ferret API.

Keystrokes restart a short timer; only when typing pauses does a search run, in a worker thread, and a newer
search cancels the older one, so a slow query never overwrites the results of a later one. The layout is one
search line, a status line, the results and the key bar: it fits 80×24, the size of a default SSH terminal.

Example:
    >>> FerretSearchApp(LocalSearchClient(), corpus="handbook").run()
"""

from __future__ import annotations

from typing import ClassVar

from rich.console import Group
from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.timer import Timer
from textual.widgets import Footer, Input, OptionList, Static
from textual.widgets.option_list import Option
from textual.worker import get_current_worker

from ferret.core.errors import FerretError
from ferret.ui.tui.highlight import snippet_text
from ferret.ui.tui.screens import ChoiceScreen, DocumentScreen, HelpScreen
from ferret.ui.tui.search_client import RESULTS, Hit, SearchClient

DEBOUNCE_S = 0.25
"""Pause in typing after which the query runs: below a keystroke gap for most typists, above a fast burst."""
MAX_RESULTS = 100
"""The most results Ctrl+N grows the list to: the HTTP API's limit on ``k``."""


def result_prompt(number: int, hit: Hit, query: str, width: int) -> Group:
    """Two to three lines per result: number, title, score and source, then the highlighted snippet."""
    head = Text.assemble((f"{number:>2}. ", "dim"), (hit.title or hit.external_id, "bold"))
    tail = Text.assemble((f"  {hit.score:.3f}", "cyan"), (f"  {hit.source}", "dim"))
    head.truncate(max(10, width - tail.cell_len - 2), overflow="ellipsis")
    return Group(head + tail, snippet_text(hit.text, query, width=2 * width - 12))


class FerretSearchApp(App[None]):
    """The terminal search client. ``client`` is where searches go; it is closed when the app exits."""

    TITLE = "Ferret search"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f1", "help", "Help"),
        Binding("question_mark", "help", "Help", show=False),
        Binding("ctrl+o", "switch_corpus", "Corpus", priority=True),
        Binding("ctrl+g", "switch_configuration", "Config", priority=True),
        Binding("ctrl+y", "copy_id", "Copy id", priority=True),
        Binding("ctrl+l", "copy_link", "Copy link", show=False),  # in the help (the bar is full) and the document view
        Binding("ctrl+n", "more_results", "More", priority=True),
        Binding("escape", "focus_search", "Search", show=False),
        Binding("ctrl+q", "quit", "Quit", priority=True),
    ]
    CSS = """
    #query { border: tall $accent; }
    /* an error sentence wraps (up to 4 rows) instead of losing the command it names past the 80th column */
    #status { height: auto; max-height: 4; padding: 0 1; color: $text-muted; }
    #status.error { color: $error; text-style: bold; }
    #results { height: 1fr; border: none; }
    #results > .option-list--option { padding: 0 1; }
    """

    def __init__(
        self,
        client: SearchClient,
        *,
        corpus: str | None = None,
        configuration: str = "hybrid",
        page_size: int = RESULTS,
    ) -> None:
        super().__init__()
        self.client = client
        self.corpus = corpus
        self.configuration = configuration
        self.page_size = page_size
        self.limit = page_size
        """How many results the current query asks for: a page, and a page more at each Ctrl+N."""
        self.hits: list[Hit] = []
        self.query_text = ""
        self.message = ""
        self._debounce: Timer | None = None

    def compose(self) -> ComposeResult:
        yield Input(placeholder="Search… (F1: help)", id="query")
        yield Static(id="status")
        yield OptionList(id="results")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(Input).focus()
        if self.corpus is not None:
            self.show_status("Type a few words to search.")
        self.load_corpora()

    # -- status ---------------------------------------------------------------------------------------------------
    def show_status(self, message: str, *, error: bool = False) -> None:
        self.message = message
        where = f"{self.corpus or 'no corpus'} · {self.configuration} · {self.client.target}"
        status = self.query_one("#status", Static)
        status.set_class(error, "error")
        status.update(Text.assemble((where, "bold"), "  ", message))

    def _corpus_names(self) -> list[str]:
        """The corpora the client can see, or none after telling the user why (runs in a worker thread)."""
        try:
            names = self.client.corpora()
        except FerretError as error:
            self.call_from_thread(self.show_status, str(error), error=True)
            return []
        if not names:
            self.call_from_thread(self.show_status, "There are no corpora yet; ingest documents first.", error=True)
        return names

    @work(thread=True, exclusive=True, group="corpora")
    def load_corpora(self, *, then_search: bool = False) -> None:
        """Pick the first corpus when none was given, or say at once that the one given does not exist (not at the
        first search); ``then_search`` runs the typed query once a corpus is found."""
        names = self._corpus_names()
        if not names:
            return
        if self.corpus is not None:
            if self.corpus not in names:
                known = ", ".join(names[:5]) + (", …" if len(names) > 5 else "")
                message = f"Corpus {self.corpus!r} does not exist; choose one with Ctrl+O ({known})."
                self.call_from_thread(self.show_status, message, error=True)
            return
        self.corpus = names[0]
        if then_search and self.query_text.strip():
            self.call_from_thread(self.run_search)
        else:
            self.call_from_thread(self.show_status, "Type a few words to search.")

    # -- searching ------------------------------------------------------------------------------------------------
    def on_input_changed(self, event: Input.Changed) -> None:
        self.query_text = event.value
        self.limit = self.page_size
        if self._debounce is not None:
            self._debounce.stop()
        self._debounce = self.set_timer(DEBOUNCE_S, self.run_search)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if self._debounce is not None:
            self._debounce.stop()
        self.run_search()

    def run_search(self) -> None:
        query = self.query_text
        if not query.strip():
            self.workers.cancel_group(self, "search")
            self.show_results([], "")
            self.show_status("The query is empty; type a few words to search for.")
            return
        if self.corpus is None:
            # none was found at start (no corpus yet, the API down): look again, one may have been ingested since
            self.show_status("looking for corpora…")
            self.load_corpora(then_search=True)
            return
        self.show_status("searching…")
        self.search(self.corpus, query, self.configuration, self.limit)

    @work(thread=True, exclusive=True, group="search")
    def search(self, corpus: str, query: str, configuration: str, limit: int, highlight: int = 0) -> None:
        try:
            hits = self.client.search(corpus, query, configuration=configuration, k=limit)
        except FerretError as error:
            if not get_current_worker().is_cancelled:
                self.call_from_thread(self.show_results, [], query)
                self.call_from_thread(self.show_status, str(error), error=True)
            return
        if not get_current_worker().is_cancelled:
            self.call_from_thread(self.show_results, hits, query, highlight)
            found = f"{len(hits)} result{'s' if len(hits) != 1 else ''}" if hits else "No results."
            if len(hits) == limit < MAX_RESULTS:
                found += " (Ctrl+N: more)"
            elif hits and self.page_size < limit > len(hits):
                found += ": there are no more."  # Ctrl+N asked for more than there are
            self.call_from_thread(self.show_status, found)

    def show_results(self, hits: list[Hit], query: str, highlight: int = 0) -> None:
        self.hits = hits
        results = self.query_one(OptionList)
        width = max(40, self.size.width - 4)
        results.clear_options()
        results.add_options([Option(result_prompt(i + 1, hit, query, width), id=str(i)) for i, hit in enumerate(hits)])
        if hits:
            results.highlighted = min(highlight, len(hits) - 1)

    def action_more_results(self) -> None:
        """A page more of the same query, the highlight on the first new result; the search runs again for them
        (a fused ranking is recomputed, not paged), so the list stays one ranking."""
        if self.corpus is None or not self.query_text.strip() or not self.hits:
            return
        if len(self.hits) < self.limit or self.limit >= MAX_RESULTS:
            self.show_status(f"{len(self.hits)} results: there are no more.")
            return
        shown = len(self.hits)
        self.limit = min(self.limit + self.page_size, MAX_RESULTS)
        self.show_status("searching…")
        self.search(self.corpus, self.query_text, self.configuration, self.limit, shown)

    # -- results --------------------------------------------------------------------------------------------------
    def on_key(self, event: object) -> None:
        key = getattr(event, "key", "")
        if key == "down" and self.focused is self.query_one(Input) and self.hits:
            self.query_one(OptionList).focus()
        elif key == "up" and self.focused is self.query_one(OptionList) and self.query_one(OptionList).highlighted == 0:
            # back to the query, the highlight left on the first result: the list's own binding for the same key
            # wraps it to the last one, and Down then Enter opened the wrong document
            results = self.query_one(OptionList)
            self.query_one(Input).focus()
            self.call_after_refresh(setattr, results, "highlighted", 0)

    def selected_hit(self) -> Hit | None:
        index = self.query_one(OptionList).highlighted
        return self.hits[index] if index is not None and index < len(self.hits) else None

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option_list.id == "results" and event.option.id is not None:
            self.open_document(self.hits[int(event.option.id)], self.query_text)

    @work(thread=True, exclusive=True, group="document")
    def open_document(self, hit: Hit, query: str) -> None:
        try:
            view = self.client.document(hit)
        except FerretError as error:
            self.call_from_thread(self.show_status, str(error), error=True)
            return
        self.call_from_thread(self.push_screen, DocumentScreen(view, query))

    # -- actions --------------------------------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Another corpus or configuration would change the results under an open document or dialog: they are
        switched from the results only."""
        if action in ("switch_corpus", "switch_configuration", "more_results"):
            return self.screen is self.screen_stack[0]
        return True

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_focus_search(self) -> None:
        self.query_one(Input).focus()

    def _copy(self, what: str, value: str | None) -> None:
        if value is None:
            self.notify("Select a result first.", severity="warning")
            return
        self.copy_to_clipboard(value)
        self.notify(f"Copied {what}: {value}", markup=False)  # an id like "notes [draft].md" is not markup

    def action_copy_id(self) -> None:
        hit = self.selected_hit()
        self._copy("id", hit.external_id if hit else None)

    def action_copy_link(self) -> None:
        hit = self.selected_hit()
        self._copy("link", hit.link if hit else None)

    def action_switch_corpus(self) -> None:
        self.choose_corpus()

    @work(thread=True, exclusive=True, group="corpora")
    def choose_corpus(self) -> None:
        names = self._corpus_names()
        if not names:
            return
        self.call_from_thread(self.push_screen, ChoiceScreen("Corpus", names, self.corpus), self._corpus_chosen)

    def _corpus_chosen(self, corpus: str | None) -> None:
        if corpus is not None and corpus != self.corpus:
            self.corpus = corpus
            self.run_search()
        self.query_one(Input).focus()

    def action_switch_configuration(self) -> None:
        self.choose_configuration()

    @work(thread=True, exclusive=True, group="configurations")
    def choose_configuration(self) -> None:
        """The modes and the corpus's stored configurations (``config base``, ``config 2``): on the local store, and
        through the API with an admin key."""
        try:
            names = self.client.configurations(self.corpus)
        except FerretError as error:
            self.call_from_thread(self.show_status, str(error), error=True)
            return
        if self.client.notice:
            self.call_from_thread(self.show_status, self.client.notice)
        active = self.client.active
        screen = ChoiceScreen("Configuration", names, self.configuration, {active: "active"} if active else None)
        self.call_from_thread(self.push_screen, screen, self._configuration_chosen)

    def _configuration_chosen(self, configuration: str | None) -> None:
        if configuration is not None and configuration != self.configuration:
            self.configuration = configuration
            self.run_search()
        self.query_one(Input).focus()

    def on_unmount(self) -> None:
        self.client.close()
