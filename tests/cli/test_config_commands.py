"""`ferret config create`: a search configuration made by hand (a fusion weight, RRF, a reranker at another depth),
stored and not active until promoted; bad input is refused in one sentence and stores nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from typer.testing import CliRunner

from ferret.cli.main import app
from ferret.core.db.audit import list_events
from ferret.core.db.corpus import get_corpus
from ferret.core.db.engine import session_scope
from ferret.core.db.search_config import active_search_config, list_search_configs
from ferret.core.search.fusion import DEFAULT_FUSION, Fusion
from ferret.core.settings import get_settings
from ferret_testing import cli_error as error_of

runner = CliRunner()
MakeFiles = Callable[[Path, dict[str, str | bytes]], Path]


def test_a_configuration_made_by_hand_is_stored_inactive_and_bad_input_stores_nothing(
    ferret_home: Path, make_files: MakeFiles, tmp_path: Path
) -> None:
    folder = make_files(tmp_path / "docs", {"a.txt": "Glaciers carve fjords.", "b.txt": "Volcanoes erupt lava."})
    assert runner.invoke(app, ["ingest", "--corpus", "kb", "--path", str(folder)]).exit_code == 0
    assert runner.invoke(app, ["index", "build", "--corpus", "kb"]).exit_code == 0

    made = runner.invoke(app, ["config", "create", "--corpus", "kb", "--fusion", "rrf", "--note", "compare with RRF"])
    assert made.exit_code == 0, made.output
    assert "configuration 1 of kb: retriever base, rrf; not active" in " ".join(made.output.split())

    assert error_of(["config", "create", "--corpus", "kb", "--alpha", "1.5"]) == (
        "Error: The fusion weight must be between 0 and 1, not 1.5."
    )
    assert error_of(["config", "create", "--corpus", "kb", "--fusion", "rrf", "--alpha", "0.3"]) == (
        "Error: --alpha belongs to a convex fusion; RRF fuses ranks (leave it out, or --fusion convex)."
    )  # it was stored as plain RRF, the weight silently dropped
    assert error_of(["config", "create", "--corpus", "kb", "--fusion", "mean"]) == (
        "Error: Fusion method 'mean' is not one of rrf, convex."
    )
    assert error_of(["config", "create", "--corpus", "kb", "--retriever", "nope"]).startswith(
        "Error: Model 'nope' is not registered;"
    )
    assert error_of(["config", "create", "--corpus", "kb", "--reranker", "base"]) == (
        "Error: Model 'base' is a retriever, not a reranker (a cross-encoder)."
    )

    with session_scope(get_settings().database_url) as session:
        corpus = get_corpus(session, "kb")
        configs = list_search_configs(session, corpus)
        assert [(c.version, Fusion.from_json(c.fusion), c.note) for c in configs] == [
            (1, Fusion("rrf", DEFAULT_FUSION.weight, "tmm"), "compare with RRF")
        ]  # the refused ones left no row
        assert active_search_config(session, corpus) is None
        created = [e for e in list_events(session) if e.action == "config.create"]
        assert len(created) == 1 and created[0].actor.startswith("cli:") and created[0].detail["fusion"] == "rrf"

    assert runner.invoke(app, ["config", "promote", "--corpus", "kb", "1"]).exit_code == 0
    default_order = runner.invoke(app, ["search", "lava", "--corpus", "kb", "--config", "base"]).output
    promoted = " ".join(runner.invoke(app, ["search", "lava", "--corpus", "kb"]).output.split())
    assert "b.txt" in promoted and promoted != " ".join(default_order.split())  # RRF scores, not the convex ones
    assert "scores: Σ 1/(60 + rank from 0) over the dense and the BM25 ranking (reciprocal rank fusion)" in promoted
    assert "α=0.80, each scaled so the query's best is 1" in " ".join(default_order.split())  # the legend follows


def test_an_expanded_index_version_is_listed_as_such_and_a_configuration_can_name_it(
    ferret_home: Path, make_files: MakeFiles, tmp_path: Path
) -> None:
    from ferret.core.db.model_version import find_model_version
    from ferret.core.index.points import Expansion
    from ferret.core.index.versioned_collection import VersionedCollection
    from ferret.runtime.context import app_context

    folder = make_files(tmp_path / "docs", {"a.txt": "Glaciers carve fjords.", "b.txt": "Volcanoes erupt lava."})
    assert runner.invoke(app, ["ingest", "--corpus", "kb", "--path", str(folder)]).exit_code == 0
    assert runner.invoke(app, ["index", "build", "--corpus", "kb"]).exit_code == 0
    with app_context() as ctx:
        corpus = get_corpus(ctx.session, "kb")
        base = find_model_version(ctx.session, "base")
        assert base is not None
        document = next(d for d in corpus.documents if d.external_id == "a.txt")
        expansion = Expansion({document.id: ["norwegian inlets"]}, {"run": 1, "key": "by-hand"})
        VersionedCollection(ctx.session, ctx.settings, ctx.backend, corpus).build(base, expansion=expansion)

    listed = json.loads(runner.invoke(app, ["index", "list", "--corpus", "kb", "--json"]).output)["versions"]
    assert [(v["version"], v["expansion"]) for v in listed] == [
        (1, None), (2, {"run": 1, "key": "by-hand", "documents": 1, "queries": 1})
    ]  # fmt: skip
    made = runner.invoke(app, ["config", "create", "--corpus", "kb", "--index-version", "2"])
    assert made.exit_code == 0, made.output
    assert "retriever base + expansion (1 queries, index v2)" in " ".join(made.output.split())
    assert error_of(["config", "create", "--corpus", "kb", "--index-version", "7"]) == (
        "Error: Corpus 'kb' has no index version 7."
    )
    assert runner.invoke(app, ["config", "promote", "--corpus", "kb", "1"]).exit_code == 0
    found = " ".join(
        runner.invoke(app, ["search", "norwegian inlets", "--corpus", "kb", "--mode", "sparse"]).output.split()
    )
    assert "a.txt" in found  # the active configuration reads the expanded BM25 vectors
    plain = runner.invoke(app, ["search", "norwegian inlets", "--corpus", "kb", "--mode", "sparse", "--config", "base"])
    assert plain.exit_code == 0 and "a.txt" not in plain.output
    # the corpus goes with its expanded version and the configuration that names it
    deleted = runner.invoke(app, ["corpus", "delete", "kb", "--yes"])
    assert deleted.exit_code == 0, deleted.output
    assert "2 index collections" in " ".join(deleted.output.split())
