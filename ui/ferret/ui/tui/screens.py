"""The terminal client's secondary screens: help, a chooser (corpus or configuration) and the document view."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, OptionList, Static
from textual.widgets.option_list import Option

from ferret.ui.tui.highlight import highlighted
from ferret.ui.tui.search_client import DocumentView

HELP = """\
[b]Ferret search[/b]: results appear as you type.

  [b]↓[/b] / [b]↑[/b]       move between the search box and the results
  [b]Enter[/b]       open the selected result (passage in context + metadata)
  [b]Esc[/b]         back to the search box / close this screen
  [b]Ctrl+O[/b]      choose the corpus
  [b]Ctrl+G[/b]      choose the configuration (a mode or a stored one: config 2)
  [b]Ctrl+Y[/b]      copy the selected result's id
  [b]Ctrl+L[/b]      copy the selected result's link
  [b]Ctrl+N[/b]      more results (ten more, up to 100)
  [b]F1[/b]          this help ([b]?[/b] too, outside the search box)
  [b]Ctrl+Q[/b]      quit

Copying uses the terminal's clipboard (OSC 52), so it works over SSH in
terminals that allow it.
"""


class HelpScreen(ModalScreen[None]):
    """Every shortcut on one screen that fits 80×24."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,f1,question_mark,q", "dismiss", "Close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > Vertical { width: 76; max-width: 100%; height: auto; max-height: 22; border: round $accent;
                            padding: 0 1; background: $surface; }
    """

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(HELP, id="help-text")

    def action_dismiss(self) -> None:  # type: ignore[override]
        self.dismiss(None)


class ChoiceScreen(ModalScreen[str | None]):
    """Pick one of a few values (corpora, configurations); Enter picks, Esc keeps the current one. ``notes`` adds a
    word after a value (the configuration that search runs now: ``config 3 (active)``)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]
    DEFAULT_CSS = """
    ChoiceScreen { align: center middle; }
    ChoiceScreen > Vertical { width: 50; height: auto; max-height: 20; border: round $accent; background: $surface; }
    ChoiceScreen OptionList { height: auto; max-height: 16; border: none; }
    """

    def __init__(
        self, title: str, choices: list[str], current: str | None, notes: dict[str, str] | None = None
    ) -> None:
        super().__init__()
        self.title_text = title
        self.choices = choices
        self.current = current
        self.notes = notes or {}

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text(self.title_text, style="bold"), id="choice-title")
            options = [
                Option(
                    ("● " if c == self.current else "  ") + c + (f" ({self.notes[c]})" if c in self.notes else ""), id=c
                )
                for c in self.choices
            ]
            yield OptionList(*options, id="choices")

    def on_mount(self) -> None:
        choices = self.query_one(OptionList)
        if self.current in self.choices:
            choices.highlighted = self.choices.index(self.current)
        choices.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)


class DocumentScreen(Screen[None]):
    """A result's passage among its neighbours, the query's words marked, then the document's metadata."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,backspace", "app.pop_screen", "Back"),
        Binding("ctrl+y", "app.copy_id", "Copy id"),
        Binding("ctrl+l", "app.copy_link", "Copy link"),
    ]
    DEFAULT_CSS = """
    DocumentScreen #document-title { padding: 0 1; background: $primary; color: $text; text-style: bold; }
    DocumentScreen VerticalScroll { padding: 0 1; }
    DocumentScreen .passage { margin: 1 0 0 0; color: $text-muted; }
    DocumentScreen .passage.hit { color: $text; border-left: thick $accent; padding-left: 1; }
    DocumentScreen #details { margin: 1 0; }
    """

    def __init__(self, view: DocumentView, query: str) -> None:
        super().__init__()
        self.view = view
        self.query_text = query

    def compose(self) -> ComposeResult:
        # Text, not a markup string: a title such as "[draft] Q3 plan" is the document's, shown as written
        yield Static(Text(self.view.title or "(untitled)"), id="document-title")
        with VerticalScroll(id="document-body"):
            for position, passage in enumerate(self.view.passages):
                hit = position == self.view.hit_position
                yield Static(
                    highlighted(passage, self.query_text) if hit else Text(passage),
                    classes="passage hit" if hit else "passage",
                )
            details = Text()
            for label, value in self.view.details:
                details.append(f"{label:>12}  ", style="bold")
                details.append(f"{value}\n")
            yield Static(details, id="details")
        yield Footer()
