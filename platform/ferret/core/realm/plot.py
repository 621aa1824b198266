"""The retrieval-utility curve as a PNG: RU (nats per masked wordpiece, top passage vs the null document) by step,
one line per run, so a run's progress (Guu et al. 2020, §4.5: RU should grow over pre-training) is seen at a glance.

matplotlib is part of the ``realm`` extra and is imported here only, with the non-interactive Agg backend (no
display on servers and workers).

Example:
    >>> plot_utility({"realm": result.utility}, Path("ru.png"))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ferret.core.errors import FerretError, InvalidInputError


def plot_utility(curves: Mapping[str, Sequence[Mapping[str, Any]]], path: Path, *, title: str = "") -> Path:
    """Write ``curves`` (run name → the ``utility`` records of ``RealmResult``) to ``path`` as a PNG."""
    drawn = {name: list(points) for name, points in curves.items() if points}
    if not drawn:
        raise InvalidInputError("There is no retrieval-utility measurement to plot yet.")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise FerretError("Plotting needs matplotlib; install it with `pip install 'ferret[realm]'`.") from exc
    figure, axes = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    try:
        for name, points in drawn.items():
            steps = [int(p["step"]) for p in points]
            axes.plot(steps, [float(p["retrieval_utility"]) for p in points], marker="o", markersize=3, label=name)
        axes.axhline(0.0, color="grey", linewidth=0.8, linestyle="--")
        axes.set_xlabel("training step")
        axes.set_ylabel("RU (nats / masked wordpiece)")
        axes.set_title(title or "REALM retrieval utility on held-out sentences")
        axes.legend()
        figure.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, format="png")
    finally:
        plt.close(figure)
    return path
