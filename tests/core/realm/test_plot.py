"""The RU-by-step PNG: one line per run; nothing measured yet is one sentence, not an empty picture."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferret.core.errors import InvalidInputError
from ferret.core.realm.plot import plot_utility


def test_curves_become_a_png(tmp_path: Path) -> None:
    curve = [{"step": s, "retrieval_utility": -0.2 + 0.01 * s} for s in range(0, 30, 5)]
    path = plot_utility({"salient": curve, "random_span": curve[:3]}, tmp_path / "out" / "ru.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5_000
    with pytest.raises(InvalidInputError, match="no retrieval-utility measurement"):
        plot_utility({"salient": []}, tmp_path / "empty.png")
    assert not (tmp_path / "empty.png").exists()


def test_status_plot_needs_a_job_id(ferret_home: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from ferret.cli.main import app

    result = CliRunner().invoke(app, ["realm", "status", "--plot", str(tmp_path / "ru.png")])
    assert result.exit_code == 1 and "--plot draws one job's curve; give the job id too." in result.output
    assert not (tmp_path / "ru.png").exists()
