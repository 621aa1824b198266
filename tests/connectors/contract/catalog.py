"""The drivers of the connector contract suite: every module in ``drivers/`` (see ``driver.py``)."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

DRIVERS_DIR = Path(__file__).parent / "drivers"


def driver_modules() -> dict[str, ModuleType]:
    modules = {}
    for path in sorted(DRIVERS_DIR.glob("*.py")):
        if not path.stem.startswith("_"):
            module = importlib.import_module(f"connectors.contract.drivers.{path.stem}")
            modules[module.KIND] = module
    return modules
