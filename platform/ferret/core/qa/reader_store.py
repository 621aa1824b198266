"""Where trained span readers live: ``FERRET_HOME/readers/<name>/`` (model, tokenizer, ``reader.json``).

A reader is found by name, by folder path, or (no name) as the newest one trained, so ``ferret ask`` needs no
option once ``ferret reader train`` has run. Nothing here imports torch.

Example:
    >>> path = resolve_reader(settings, None)   # the newest trained reader
"""

from __future__ import annotations

import re
from pathlib import Path

from ferret.core.errors import ConflictError, InvalidInputError, NotFoundError
from ferret.core.settings import FerretSettings

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MARKER = "reader.json"


def readers_root(settings: FerretSettings) -> Path:
    return settings.home / "readers"


def new_reader_dir(settings: FerretSettings, name: str) -> Path:
    """The folder a new reader called ``name`` is saved in; refuses a bad or taken name before any training."""
    if not _NAME.match(name):
        raise InvalidInputError(
            f"Reader name {name!r} must be 1-64 letters, digits, dots, dashes or underscores, starting with a letter "
            "or digit."
        )
    folder = readers_root(settings) / name
    if (folder / MARKER).exists():
        raise ConflictError(f"Reader {name!r} already exists; choose another name.")
    return folder


def list_readers(settings: FerretSettings) -> list[Path]:
    """Trained readers, newest first."""
    root = readers_root(settings)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if (p / MARKER).is_file()]
    return sorted(found, key=lambda p: (p / MARKER).stat().st_mtime, reverse=True)


def resolve_reader(settings: FerretSettings, name: str | None, *, allow_path: bool = True) -> Path:
    """A reader by name or folder (``allow_path``; the HTTP API gives names only); without one, the newest."""
    if name is None:
        readers = list_readers(settings)
        if not readers:
            raise NotFoundError(
                "No span reader is trained yet; train one with `ferret reader train --dataset <SQuAD file or folder>`."
            )
        return readers[0]
    if allow_path and (Path(name).expanduser() / MARKER).is_file():
        return Path(name).expanduser()
    if not _NAME.match(name):
        raise NotFoundError(f"No span reader named {name!r}; `ferret reader list` shows the trained ones.")
    folder = readers_root(settings) / name
    if (folder / MARKER).is_file():
        return folder
    raise NotFoundError(f"No span reader named {name!r}; `ferret reader list` shows the trained ones.")
