"""Third-party output goes to the log file, not between results (issue 11, item 11): transformers' "Loading weights"
bar before a first search and pypdf's "EOF marker not found" no longer reach the terminal; Ferret's own lines do."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pypdf import PdfWriter


def ferret(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The console script in a fresh process, output captured (so no terminal: the case of logs and CI)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("FERRET_", "HF_HUB_DISABLE"))}
    env["FERRET_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-c", "from ferret.cli.main import main; main()", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )


@pytest.mark.slow
def test_library_bars_and_warnings_go_to_the_log(tmp_path: Path) -> None:
    home, docs = tmp_path / "home", tmp_path / "docs"
    docs.mkdir()
    (docs / "glaciers.txt").write_text("Glaciers carve fjords over millennia.")
    writer, pdf = PdfWriter(), io.BytesIO()
    writer.add_blank_page(100, 100)
    writer.write(pdf)
    (docs / "truncated.pdf").write_bytes(pdf.getvalue()[:-30])  # pypdf warns "EOF marker not found"

    runs = [
        ferret(home, "ingest", "--corpus", "c", "--path", str(docs)),
        ferret(home, "index", "build", "--corpus", "c", "--promote"),
        ferret(home, "search", "glaciers", "--corpus", "c", "--mode", "hybrid"),  # loads the model: the bar
    ]

    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
        shown = run.stdout + run.stderr
        assert "Loading weights" not in shown and "EOF marker" not in shown and "it/s]" not in shown, shown
    assert "skipped truncated.pdf" in runs[0].stdout  # Ferret's own report stays
    assert "Glaciers carve fjords" in runs[2].stdout
    assert "EOF marker not found" in (home / "logs" / "ferret.log").read_text()


def test_plain_tqdm_bars_are_off_too() -> None:
    """sentence-transformers draws a plain tqdm bar ("Computing widget examples") when it writes a trained model's
    card: the quickstart's training job showed it between Ferret's progress lines."""
    code = (
        "from ferret.cli.logs import route_third_party_output\n"
        "route_third_party_output()\n"
        "from tqdm import tqdm\n"
        "for _ in tqdm(range(3), desc='Computing widget examples'): pass\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TQDM_")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Computing widget examples" not in done.stdout + done.stderr
