"""Search configurations in the admin under ``AppTest`` (Evaluation page: list with the guard's figures, promote,
roll back; Search playground: a configuration on each side), against the real populated store of conftest.py with
two real configurations of corpus ``kb`` over the base model's index: BM25 only and dense only (convex fusion with
weight 0 and 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("streamlit", reason="the admin needs the ui extra: pip install -e '.[ui]'")

from streamlit.testing.v1 import AppTest

from ferret.core.db.corpus import get_corpus
from ferret.core.db.search_config import active_search_config, create_search_config, list_search_configs
from ferret.core.encoder.registry import ModelRegistry
from ferret.core.search.fusion import Fusion
from ferret.ui.runtime import open_context

VIEWS = Path(__file__).resolve().parents[2] / "ui" / "ferret" / "ui" / "admin" / "views"
TIMEOUT_S = 120
GUARD = {"passed": True, "reason": "held-out gain above zero", "held_out_gain_low": 0.02}
TUNING = {  # as the configure stage stores a FusionChoice (ferret.core.search.tuning)
    "reason": "convex α=0.0: 0.450 against the default's (convex α=0.80 (tmm)) 0.410 on 40 queries",
    "scores": {"rrf": 0.40, "0.0": 0.45, "0.5": 0.42, "0.8": 0.41, "1.0": 0.30, "examples out of sample": 0.7},
}
COMPARED = {"base": {"objective": 0.45, "reason": TUNING["reason"]}}


def run(app: AppTest) -> AppTest:
    app.run()
    assert not app.exception, [element.value for element in app.exception]
    return app


@pytest.fixture
def configured_home(populated_home: Path) -> Path:
    with open_context() as context:
        corpus = get_corpus(context.session, "kb")
        base = ModelRegistry(context.session, context.settings).ensure_base()
        create_search_config(
            context.session,
            corpus,
            base,
            Fusion("convex", 0.0).to_json(),
            evidence={
                "guard": {**GUARD, "candidate": {"held_out_mrr": 0.61}},
                "fusion": TUNING,
                "retrievers": COMPARED,
            },
            note="bm25 only",
        )
        create_search_config(context.session, corpus, base, Fusion("convex", 1.0).to_json(), note="dense only")
    return populated_home


def active_version() -> int | None:
    with open_context() as context:
        config = active_search_config(context.session, get_corpus(context.session, "kb"))
        return config.version if config else None


def test_list_promote_and_roll_back_search_configurations(configured_home: Path) -> None:
    app = run(AppTest.from_file(str(VIEWS / "evaluation.py"), default_timeout=TIMEOUT_S))
    table = next(frame.value for frame in app.dataframe if "retriever" in frame.value.columns)
    assert list(table["version"]) == [1, 2] and list(table["state"]) == ["ready", "ready"]
    assert list(table["guard"]) == ["passed", "-"] and table["held-out MRR@10"][0] == 0.61
    assert table["gain (5th pct)"][0] == 0.02 and list(table["note"]) == ["bm25 only", "dense only"]

    app.button(key="rollback-config-kb").click()  # nothing was ever active
    run(app)
    assert [e.value for e in app.error] == [
        "Corpus 'kb' has no earlier search configuration to roll back to (no configuration is active); "
        "promote one by number with `ferret config promote`."
    ]

    app.button(key="promote-config-kb").click()
    run(app)
    assert [s.value for s in app.success] == ["Search configuration 1 of kb is active."] and active_version() == 1
    app.selectbox(key="search-config-kb").select(2)
    run(app)
    app.button(key="promote-config-kb").click()
    run(app)
    assert [s.value for s in app.success] == ["Search configuration 2 of kb is active."] and active_version() == 2
    table = next(frame.value for frame in app.dataframe if "retriever" in frame.value.columns)
    assert list(table["state"]) == ["ready", "active"]

    app.button(key="rollback-config-kb").click()
    run(app)
    assert [s.value for s in app.success] == ["Rolled back: search configuration 1 of kb is active."]
    assert active_version() == 1

    # The activation history (issue 11, item 12): who, when, how; the rollback withdrew what it went past.
    history = next(frame.value for frame in app.dataframe if "configuration" in frame.value.columns)
    assert list(history["configuration"]) == [1, 2, 1]
    assert list(history["how"]) == ["promote", "promote", "rollback"]
    assert list(history["withdrawn"]) == [True, True, False]
    assert all(actor.startswith("admin:") for actor in history["by"]) and all(history["activated"])
    app.button(key="rollback-config-kb").click()  # configuration 1 is the oldest activation left
    run(app)
    assert [e.value for e in app.error] == [
        "Corpus 'kb' has no earlier search configuration to roll back to (configuration 1 is the oldest activation "
        "left); promote one by number with `ferret config promote`."
    ]


def test_an_admin_makes_a_configuration_by_hand(configured_home: Path) -> None:
    """The form stores an inactive configuration with the fusion chosen; a model that is not registered is refused
    in one sentence and stores nothing."""
    app = run(AppTest.from_file(str(VIEWS / "evaluation.py"), default_timeout=TIMEOUT_S))
    app.selectbox(key="make-fusion-kb").select("rrf")
    app.text_input(key="make-note-kb").input("compare with RRF")
    run(app)
    app.button(key="make-config-kb").click()
    run(app)
    assert not app.error, [e.value for e in app.error]
    assert [s.value for s in app.success] == [
        "Search configuration 3 of kb made (base, rrf); it is not active until promoted."
    ]
    table = next(frame.value for frame in app.dataframe if "retriever" in frame.value.columns)
    assert list(table["version"]) == [1, 2, 3] and list(table["fusion"])[2] == "rrf"
    assert list(table["note"])[2] == "compare with RRF" and list(table["state"])[2] == "ready"

    app.text_input(key="make-retriever-kb").input("nope")
    run(app)
    app.button(key="make-config-kb").click()
    run(app)
    assert [e.value for e in app.error][:1] and app.error[0].value.startswith("Model 'nope' is not registered;")
    with open_context() as context:
        assert len(list_search_configs(context.session, get_corpus(context.session, "kb"))) == 3
    assert active_version() is None


def test_a_configuration_shows_how_its_fusion_was_chosen(configured_home: Path) -> None:
    """The tuning's sentence and the evidence's objective at every setting it tried; nothing for a configuration
    made by hand."""
    app = run(AppTest.from_file(str(VIEWS / "evaluation.py"), default_timeout=TIMEOUT_S))
    curve = next(frame.value for frame in app.dataframe if "objective" in frame.value.columns)
    assert list(curve["fusion"]) == [
        "RRF (reference)", "convex α=0.0", "convex α=0.5", "convex α=0.8 (default)", "convex α=1.0",
    ]  # fmt: skip
    assert list(curve["objective"]) == [0.40, 0.45, 0.42, 0.41, 0.30]
    captions = [c.value for c in app.caption]
    assert TUNING["reason"] in captions and f"retriever base: {TUNING['reason']}" in captions

    app.selectbox(key="search-config-kb").select(2)
    run(app)
    assert not any("objective" in frame.value.columns for frame in app.dataframe)


def test_the_playground_compares_two_configurations(configured_home: Path) -> None:
    app = run(AppTest.from_file(str(VIEWS / "playground.py"), default_timeout=TIMEOUT_S))
    assert app.selectbox(key="playground-config-left").options == [
        "none (the version above)",
        "base",
        "1",
        "2",
    ]
    app.selectbox(key="playground-config-left").select("2")  # dense only
    app.selectbox(key="playground-config-right").select("base")
    for side in ("left", "right"):
        app.selectbox(key=f"playground-mode-{side}").select("hybrid")
    app.text_input(key="playground-query").input("capital city of France")
    run(app)
    assert not app.error
    ranked = [m.value for m in app.markdown if m.value.startswith("**") and "· score " in m.value]
    second = next(i for i, line in enumerate(ranked) if i and line.startswith("**1. "))
    left, right = ranked[:second], ranked[second:]
    assert left[0].startswith("**1. Paris**") and right[0].startswith("**1. Paris**"), ranked
    scores = [[line.split("score ")[1] for line in side] for side in (left, right)]
    assert scores[0] != scores[1], ranked  # dense-only scores are not the base's fused scores
