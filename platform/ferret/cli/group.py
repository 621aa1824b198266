"""The top-level ``ferret`` command group: lazy command modules, a fixed help order, one-sentence user errors.

Why lazy: a command module imports what its commands need (SQLAlchemy, the index backend, torch through the
encoder), and typer builds every command before it parses anything, so importing them all made ``ferret --help``
take as long as loading the ML stack (issue 11, item 9). Here each command module is a :class:`LazyCommand`: a
name, a ``module:attribute`` target and the one line ``--help`` lists. Only the command being run is imported;
``ferret --help`` imports none. ``tests/cli/test_startup.py`` checks that the listed line is the loaded command's
own help, and that ``import ferret.cli.main`` imports no ML library.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, ClassVar

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from ferret.core.errors import FerretError

SQLITE_BUSY = (
    "The embedded database stayed locked by another Ferret process (a long `ferret ingest`, `index build` or "
    "`pipeline run`) past the busy timeout; run this again once it has finished, or use PostgreSQL "
    "(FERRET_DATABASE_URL) for concurrent writers."
)


@dataclass(frozen=True)
class LazyCommand:
    """A command (a Typer app or a command function) imported only when it runs or its own help is asked for.

    Example:
        >>> LazyCommand("jobs", "ferret.cli.job_commands:jobs_app", "Long work and its progress.", "Operations")
    """

    name: str
    target: str
    """``module:attribute``; the attribute is a ``typer.Typer`` (a group) or a function (one command)."""
    help: str
    """What ``ferret --help`` lists: the first paragraph of the loaded command's own help."""
    panel: str

    def load(self) -> Any:
        """Import the module and build the click command typer would have built eagerly."""
        module_name, attribute = self.target.split(":")
        target = getattr(importlib.import_module(module_name), attribute)
        command: Any
        if isinstance(target, typer.Typer):
            command = typer.main.get_group(target)
        else:  # a function: a one-command Typer becomes that command itself
            single = typer.Typer(add_completion=False)
            single.command(self.name)(target)
            command = typer.main.get_command(single)
        command.name = self.name
        command.rich_help_panel = self.panel
        return name_placeholders(command)


class _NamedArgument(TyperArgument):
    """An argument shown by its name alone (``QUERY``), without typer's Python type beside it."""

    def display_type_rich(self, ctx: Any) -> str | None:
        return None


def _is_choice(param: Any) -> bool:
    descriptor = getattr(param, "type_descriptor", None)  # Typer 0.29 and later
    if descriptor is not None:
        return bool(descriptor.is_choice)
    return type(param.type).__name__ == "Choice"  # earlier Typers: a Click Choice (their own copy from 0.26)


def name_placeholders(command: Any) -> Any:
    """Option values shown by name (``--corpus CORPUS``, ``--group GROUP``), not by Python type (``<str>``,
    ``<list[str]>``), and flags without a placeholder (issue 11, item 12); choices keep their list."""
    help_option = command.get_help_option(typer.Context(command))
    for param in [*command.params, *([help_option] if help_option is not None else [])]:
        if param.metavar is not None:
            continue
        if isinstance(param, TyperOption) and param.is_flag:
            param.metavar = ""
        elif isinstance(param, TyperOption | TyperArgument) and not _is_choice(param):
            param.metavar = (param.name or "value").upper()
        if type(param) is TyperArgument:
            param.__class__ = _NamedArgument  # the same parameter; only its help line changes
    for sub in getattr(command, "commands", {}).values():
        if not isinstance(sub, _Unloaded):
            name_placeholders(sub)
    return command


class _Unloaded(TyperCommand):
    """Stands in for a lazy command in the help listing; never invoked."""

    def __init__(self, spec: LazyCommand) -> None:
        super().__init__(spec.name, help=spec.help, short_help=spec.help, rich_help_panel=spec.panel)
        self.spec = spec


def installation_problem(error: Exception) -> str | None:
    """One sentence for what an installation gets wrong (a setting, the database's address or its lock), or None:
    any other exception is a bug and keeps its traceback."""
    from pydantic import ValidationError  # imported once an error needs them
    from sqlalchemy.exc import ArgumentError, OperationalError

    if isinstance(error, ValidationError) and error.title == "FerretSettings":
        problems = [
            f"FERRET_{'_'.join(str(part) for part in problem['loc']).upper()}={problem.get('input')!r}: "
            f"{problem['msg']}"
            for problem in error.errors()
        ]
        return f"Invalid setting {'; '.join(problems)}."
    if isinstance(error, ArgumentError) and "URL" in str(error):
        return f"FERRET_DATABASE_URL is not a database URL ({error}); e.g. postgresql+psycopg://user:pass@host/db."
    if isinstance(error, OperationalError):
        if "database is locked" in str(error.orig):
            return SQLITE_BUSY
        if error.statement is None or "unable to open database file" in str(error.orig):  # no connection was made
            reason = str(error.orig).strip().splitlines()[0] if str(error.orig).strip() else type(error.orig).__name__
            return f"Cannot connect to the database of FERRET_DATABASE_URL ({reason}); is it running and reachable?"
    return None


class FerretGroup(TyperGroup):
    """Turns a user error anywhere below into one sentence and exit status 1; bugs keep their traceback.

    A SQLite database still locked after the busy timeout is no bug but a collision of two processes sharing the
    embedded store, so it gets its sentence too (the index's own collision is ``UnavailableError``).

    Subclasses name their ``lazy_commands`` and the ``order`` of the listing (commands not named come last)."""

    lazy_commands: ClassVar[tuple[LazyCommand, ...]] = ()
    order: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        name_placeholders(self)
        for spec in self.lazy_commands:
            self.commands[spec.name] = _Unloaded(spec)
        self._describing = False

    def list_commands(self, ctx: Any) -> list[str]:
        rank = {name: position for position, name in enumerate(self.order)}
        return sorted(self.commands, key=lambda name: rank.get(name, len(rank)))

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = self.commands.get(cmd_name)
        if isinstance(command, _Unloaded) and not self._describing:
            command = self.commands[cmd_name] = command.spec.load()
        return command

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._describing = True  # list the lazy commands by their line, without importing them
        try:
            name_placeholders(self)  # typer adds the completion options after __init__
            super().format_help(ctx, formatter)
        finally:
            self._describing = False

    def invoke(self, ctx: Any) -> Any:  # typer >= 0.20 vendors click: its Context type varies
        from ferret.cli.render import err_console

        try:
            return super().invoke(ctx)
        except FerretError as exc:
            err_console.print(f"[red]Error:[/red] {exc}", highlight=False)
            raise typer.Exit(1) from None
        except Exception as exc:
            sentence = installation_problem(exc)
            if sentence is None:
                raise
            err_console.print(f"[red]Error:[/red] {sentence}", highlight=False)
            raise typer.Exit(1) from None
