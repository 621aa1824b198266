"""Third-party output goes to Ferret's log file, not between a command's results (issue 11, item 11).

Libraries print progress bars and warnings of their own: transformers' "Loading weights" bar before every first
search, its GGUF dequantisation bar, pypdf's "EOF marker not found", torch's and transformers' Python warnings.
A command's output is its results and Ferret's own progress, so:

- the Hugging Face progress bars (huggingface_hub, transformers, datasets) and plain tqdm bars are switched off
  through their documented environment variables, set before those libraries are imported (they read them at import);
- every library's log records and Python warnings go to ``$FERRET_HOME/logs/ferret.log`` (opened on the first
  record, so a command that logs nothing creates no file);
- Ferret's own warnings still reach stderr as well, since they are meant for the user.
"""

from __future__ import annotations

import logging
import os
import sys
from logging.handlers import RotatingFileHandler
from pathlib import Path

# TQDM_DISABLE: tqdm reads its arguments' defaults from TQDM_* variables, which also silences the plain tqdm bars
# that sentence-transformers draws itself ("Computing widget examples" when a trained model's card is written).
PROGRESS_BAR_SWITCHES = ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS", "TQDM_DISABLE")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _HomeLogFile(logging.Handler):
    """Writes to ``<FERRET_HOME>/logs/ferret.log`` (rotated at 5 MB), resolving the home at the first record so
    that configuring it costs nothing at start-up."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self._file: logging.Handler | None = None

    def log_path(self) -> Path:
        from ferret.core.settings import get_settings  # settings import pydantic: only once something is logged

        return get_settings().home / "logs" / "ferret.log"

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if self._file is None:
                path = self.log_path()
                path.parent.mkdir(parents=True, exist_ok=True)
                self._file = RotatingFileHandler(path, maxBytes=5_000_000, backupCount=3, encoding="utf-8")
                self._file.setFormatter(logging.Formatter(LOG_FORMAT))
            self._file.emit(record)
        except Exception:  # a log that cannot be written must not fail the command
            self.handleError(record)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        super().close()


def route_third_party_output() -> None:
    """Switch off third-party progress bars and send log records and warnings to the log file; idempotent."""
    for variable in PROGRESS_BAR_SWITCHES:
        os.environ.setdefault(variable, "1")
    root = logging.getLogger()
    if any(isinstance(handler, _HomeLogFile) for handler in root.handlers):
        return
    root.addHandler(_HomeLogFile())
    root.setLevel(min(root.level or logging.WARNING, logging.WARNING))
    ferret = logging.getLogger("ferret")
    ferret.setLevel(logging.INFO)
    to_user = logging.StreamHandler(sys.stderr)
    to_user.setLevel(logging.WARNING)
    to_user.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    ferret.addHandler(to_user)
    logging.captureWarnings(True)  # Python warnings become records of the "py.warnings" logger: the file only
