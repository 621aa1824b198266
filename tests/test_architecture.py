"""The import rules of ARCHITECTURE.md, checked over the source tree: which part of Ferret may import which.

Every ``import``/``from ... import`` of a ``ferret`` module is read from the AST of every source file, at module
level and inside functions alike, so an import hidden in a function cannot get around a rule. Function-level imports
of Ferret's own modules are allowed only where they keep a heavy or optional dependency off the import path (listed
below, each with its reason); anywhere else they would only hide a cycle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCE_ROOTS = ("platform", "connectors", "workers", "ui")

ALLOWED: dict[str, set[str]] = {
    # The domain imports nothing but itself.
    "ferret.core": {"ferret.core"},
    # Adapters implement the domain's ports.
    "ferret.connectors": {"ferret.core", "ferret.connectors"},
    "ferret.workers": {"ferret.core", "ferret.connectors", "ferret.workers"},
    # The composition root wires adapters into the domain.
    "ferret.runtime": {"ferret.core", "ferret.connectors", "ferret.workers", "ferret.runtime"},
    # Faces sit on the runtime and the domain; the CLI also starts workers (`ferret worker`).
    "ferret.api": {"ferret.core", "ferret.runtime", "ferret.api"},
    # ... and starts the admin and the terminal client (`ferret admin`, `ferret tui`).
    "ferret.cli": {"ferret.core", "ferret.runtime", "ferret.cli", "ferret.workers", "ferret.ui"},
    "ferret.ui": {"ferret.core", "ferret.runtime", "ferret.ui"},
}

FUNCTION_LEVEL_IMPORTS = {
    # The index backend chosen by the settings: qdrant-client or Qdrant Edge's native module, not both.
    ("ferret.core.index.factory", "ferret.core.index.server_backend"),
    ("ferret.core.index.factory", "ferret.core.index.edge_backend"),
    # The generator chosen by the settings: the openai client or transformers, not both.
    ("ferret.core.llm.factory", "ferret.core.llm.openai_backend"),
    ("ferret.core.llm.factory", "ferret.core.llm.local_backend"),
    # Celery is the optional `workers` extra, needed only when a broker is configured.
    ("ferret.workers.dispatch", "ferret.workers.apps.base"),
    # Textual and Streamlit are the optional `ui` extra; every other command starts without them.
    ("ferret.cli.ui_commands", "ferret.ui.tui"),
    ("ferret.cli.ui_commands", "ferret.ui.admin.launcher"),
    # torch and transformers load only when a question is asked or a span reader trained (issue 13).
    ("ferret.cli.ask_commands", "ferret.core.qa.answering"),
    ("ferret.cli.ask_commands", "ferret.core.qa.span_reader"),
    ("ferret.cli.ask_commands", "ferret.core.qa.squad"),
    ("ferret.cli.ask_commands", "ferret.core.encoder.registry"),
    ("ferret.api.routers.ask", "ferret.core.qa.answering"),
    ("ferret.api.routers.ask", "ferret.core.qa.span_reader"),
    # matplotlib loads only when a curve is drawn.
    ("ferret.cli.realm_commands", "ferret.core.realm.plot"),
    # Start-up (issue 11, item 9): torch at the first model load; the job catalogue and Celery's names with the first
    # job (a search or a listing needs neither). The catalogue's heavy stage functions are not imported here but
    # named by `StageBody` and imported when a stage runs (tests/core/jobs/test_catalog.py resolves each).
    ("ferret.core.encoder.registry", "ferret.core.encoder.dual_encoder"),
    ("ferret.runtime.context", "ferret.workers.dispatch"),
    # The queue names come from the job catalogue (its one-step jobs import the ingest and the evaluation): only
    # `ferret worker` needs them, not `ferret jobs list`.
    ("ferret.cli.job_commands", "ferret.workers.names"),
    # The round-trip retrievers import torch: `ferret task list` and `task --help` need none of it.
    ("ferret.cli.task_commands", "ferret.core.synth.retrievers"),
}
"""(importing module, imported module) pairs allowed inside a function."""

LAZY_CLI_MODULES = {"ferret.cli.main", "ferret.cli.group", "ferret.cli.logs", "ferret.cli.corpus_commands"}
"""CLI modules whose commands import what they use when they run, so that `ferret --help` imports none of it
(issue 11, item 9; tests/cli/test_startup.py): any function-level import of Ferret's is theirs to make."""


def _module_name(path: Path) -> str:
    for root in SOURCE_ROOTS:
        base = ROOT / root
        if path.is_relative_to(base):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            return ".".join(parts)
    raise ValueError(path)


def _sources() -> Iterator[tuple[str, ast.Module]]:
    for root in SOURCE_ROOTS:
        for path in sorted((ROOT / root / "ferret").rglob("*.py")):
            yield _module_name(path), ast.parse(path.read_text(), filename=str(path))


def _ferret_imports(tree: ast.Module) -> Iterator[tuple[str, bool]]:
    """(imported ferret module, whether the import is inside a function) for every import in ``tree``."""

    def visit(node: ast.AST, in_function: bool) -> Iterator[tuple[str, bool]]:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            if isinstance(child, ast.Import):
                yield from ((alias.name, inside) for alias in child.names if alias.name.startswith("ferret."))
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and (child.module or "").startswith("ferret"):
                yield str(child.module), inside
            yield from visit(child, inside)

    yield from visit(tree, False)


def _part(module: str) -> str:
    """The top part a module belongs to: ferret.core, ferret.api, ..."""
    return ".".join(module.split(".")[:2])


SOURCES = dict(_sources())


def test_the_tree_is_found() -> None:
    assert {"ferret.core.settings", "ferret.runtime.context", "ferret.workers.dispatch"} <= set(SOURCES)
    assert {_part(module) for module in SOURCES} == set(ALLOWED)


@pytest.mark.parametrize("part", sorted(ALLOWED))
def test_each_part_imports_only_what_its_rule_allows(part: str) -> None:
    broken = sorted(
        f"{module} imports {imported}"
        for module, tree in SOURCES.items()
        if _part(module) == part
        for imported, _ in _ferret_imports(tree)
        if _part(imported) not in ALLOWED[part]
    )
    assert broken == [], f"{part} may import only {sorted(ALLOWED[part])}"


def test_function_level_imports_of_ferret_modules_are_the_listed_ones() -> None:
    found = {
        (module, imported)
        for module, tree in SOURCES.items()
        for imported, in_function in _ferret_imports(tree)
        if in_function and module not in LAZY_CLI_MODULES
    }
    assert found == FUNCTION_LEVEL_IMPORTS
