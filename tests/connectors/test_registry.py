from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ferret.connectors.registry import CONNECTORS, build_connector, get_connector_class, known_kinds
from ferret.core.errors import InvalidInputError
from ferret.core.sources.capabilities import BaseConnector


@pytest.mark.parametrize("kind", sorted(CONNECTORS))
def test_every_kind_resolves_to_its_class(kind: str) -> None:
    connector_class = get_connector_class(kind)

    assert issubclass(connector_class, BaseConnector)
    assert connector_class.kind == kind
    assert connector_class.__name__ == CONNECTORS[kind][1]


@pytest.mark.parametrize("kind", sorted(CONNECTORS))
def test_every_kind_has_its_own_access_check(kind: str) -> None:
    """``source add`` trusts ``check_access``: the base class's default (nothing to check) would pass anything."""
    assert get_connector_class(kind).check_access is not BaseConnector.check_access


def test_build_connector_passes_config(tmp_path: Path) -> None:
    connector = build_connector("filesystem", root=str(tmp_path), name="shared-drive")

    assert connector.kind == "filesystem"
    assert connector.source_name == "shared-drive"
    assert connector.config == {"root": str(tmp_path), "name": "shared-drive"}


def test_unknown_kind_lists_known_kinds() -> None:
    assert {"beir", "filesystem", "git", "s3", "sql", "web"} <= set(known_kinds())
    expected = r"^Unknown source kind 'nosuch'; known kinds are beir, .*filesystem, .*\.$"
    with pytest.raises(InvalidInputError, match=expected):
        build_connector("nosuch")


def test_connectors_and_office_parsers_are_imported_on_demand() -> None:
    # A fresh interpreter: this test process has long imported everything.
    script = (
        "import sys\n"
        "from ferret.connectors import registry\n"
        "kinds = ('ferret.connectors.beir', 'ferret.connectors.filesystem')\n"
        "loaded = [name for name in sys.modules if name.startswith(kinds)]\n"
        "assert not loaded, loaded\n"
        "registry.get_connector_class('filesystem')\n"
        "assert 'ferret.connectors.filesystem.connector' in sys.modules\n"
        "assert 'ferret.connectors.beir' not in sys.modules\n"
        "assert 'pypdf' not in sys.modules and 'docx' not in sys.modules\n"
        "assert 'boto3' not in sys.modules and 'trafilatura' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)
