"""``ferret corpus delete``: remove a corpus from the database and the index (``ferret corpora`` lists them)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

corpus_app = typer.Typer(
    help="Delete a corpus with its documents, index versions and configurations.", no_args_is_help=True
)


@corpus_app.command("delete")
def delete(
    name: Annotated[str, typer.Argument(help="Corpus name (see `ferret corpora`).")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete a corpus: documents, passages, sources, index versions and their collections, configurations and
    tasks. Trained models are kept. Refused while one of its jobs runs."""
    from ferret.cli.render import console
    from ferret.core.corpus.deletion import delete_corpus
    from ferret.core.db.audit import cli_actor
    from ferret.core.db.corpus import corpus_counts, get_corpus
    from ferret.core.errors import InvalidInputError
    from ferret.runtime.context import app_context

    with app_context() as ctx:
        corpus = get_corpus(ctx.session, name)
        if not yes:
            if not sys.stdin.isatty():
                raise InvalidInputError(f"Deleting corpus {name!r} cannot be undone; add --yes to confirm.")
            documents, _ = corpus_counts(ctx.session, corpus)
            typer.confirm(f"Delete corpus {name!r} ({documents} documents) and its index?", abort=True)
        deleted = delete_corpus(ctx.session, ctx.backend, corpus, actor=cli_actor())
        console.print(
            f"deleted corpus {deleted.name}: {deleted.documents} documents, {deleted.passages} passages, "
            f"{len(deleted.collections)} index collections"
        )
