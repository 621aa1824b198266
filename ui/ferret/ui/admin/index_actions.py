"""The admin's two actions on a corpus's index versions, through the same ``VersionedCollection`` as the CLI.

Each opens its own application context (settings, migrated session, index backend), so an action commits on
its own and the page reloads the new state afterwards. User mistakes raise ``FerretError`` with one sentence.

Example:
    >>> promote_index_version("handbook", 3)
    'handbook: version 3 is active (collection handbook__v3).'
"""

from __future__ import annotations

from ferret.core.db.audit import local_actor
from ferret.core.db.corpus import get_corpus
from ferret.core.db.index_version import get_index_version
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.search.configuration import index_activation_note
from ferret.runtime.context import app_context


def promote_index_version(corpus_name: str, version: int) -> str:
    """Make a ready version the one search reads (one atomic alias swap); returns what happened."""
    with app_context() as context:
        corpus = get_corpus(context.session, corpus_name)
        versions = VersionedCollection(context.session, context.settings, context.backend, corpus)
        promoted = versions.promote(get_index_version(context.session, corpus, version), actor=local_actor("admin"))
        note = index_activation_note(context.session, corpus, promoted)
        done = f"{corpus_name}: version {promoted.version} is active (collection {promoted.collection})."
        return f"{done} {note}" if note else done


def roll_back_corpus(corpus_name: str) -> str:
    """Re-activate the version that was active before the current one; returns what happened."""
    with app_context() as context:
        corpus = get_corpus(context.session, corpus_name)
        restored = VersionedCollection(context.session, context.settings, context.backend, corpus).rollback(
            actor=local_actor("admin")
        )
        note = index_activation_note(context.session, corpus, restored)
        done = f"{corpus_name}: rolled back to version {restored.version} (collection {restored.collection})."
        return f"{done} {note}" if note else done
