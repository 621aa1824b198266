"""The admin's pages run by Streamlit's test harness (``AppTest``) against a real FERRET_HOME: embedded SQLite and
Qdrant Edge holding corpus ``kb`` (six documents, versions 1 active and 2 ready, embedded by the real MiniLM), task
``kb-qa`` and a running job. Overview, evaluation and versions, the playground and access; tasks, jobs and
synthetic data are in test_admin_workflows.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("streamlit", reason="the admin needs the ui extra: pip install -e '.[ui]'")

from streamlit.testing.v1 import AppTest

from ferret.core.db.api_key import find_api_key_by_plaintext, list_api_keys
from ferret.core.db.corpus import get_corpus
from ferret.core.db.index_version import list_index_versions
from ferret.core.db.models import IndexState, Job, JobState, ModelVersion
from ferret.core.errors import InvalidInputError
from ferret.ui.runtime import open_context

ADMIN = Path(__file__).resolve().parents[2] / "ui" / "ferret" / "ui" / "admin"
TIMEOUT_S = 120  # the first run loads the encoder stack; the machine is shared


def page(name: str) -> AppTest:
    return AppTest.from_file(str(ADMIN / "views" / f"{name}.py"), default_timeout=TIMEOUT_S)


def run(app: AppTest) -> AppTest:
    app.run()
    assert not app.exception, [element.value for element in app.exception]
    return app


def active_versions() -> tuple[dict[int, IndexState], str | None]:
    """(version -> state) of corpus kb, and the collection its alias points at."""
    with open_context() as context:
        corpus = get_corpus(context.session, "kb")
        states = {v.version: v.state for v in list_index_versions(context.session, corpus)}
        return states, context.backend.resolve_alias("kb")


def test_app_navigates_to_the_overview_by_default(populated_home: Path) -> None:
    app = run(AppTest.from_file(str(ADMIN / "app.py"), default_timeout=TIMEOUT_S))
    assert app.header[0].value == "Overview"


def test_overview_counts_live_versions_jobs_and_warnings(populated_home: Path) -> None:
    with open_context() as context:
        context.session.add(Job(kind="pipeline", state=JobState.FAILED, stage="train", error="Out of memory."))
        # A failure that a later job of the same kind on the same corpus has since done is not a warning any more.
        kb = get_corpus(context.session, "kb").id
        context.session.add(Job(kind="eval", corpus_id=kb, state=JobState.FAILED, stage="evaluate", error="Bad set."))
        context.session.add(Job(kind="eval", corpus_id=kb, state=JobState.SUCCEEDED, stage="evaluate"))
    app = run(page("overview"))

    assert {metric.label: metric.value for metric in app.metric} == {"Corpora": "1", "Running jobs": "1", "Tasks": "1"}
    corpora, sources = (frame.value for frame in app.dataframe)
    assert corpora.iloc[0].to_dict() | {} == {
        "corpus": "kb",
        "documents": 6,
        "passages": 6,
        "live version": "v1",
        "live model": "base",
        "configuration": "hybrid",
        "versions": 2,
    }
    assert list(sources["source"]) == ["docs"]
    assert [w.value for w in app.warning] == ["Job 2 (pipeline) failed: Out of memory."]
    assert any(caption.value.startswith("Database: sqlite") for caption in app.caption)


def test_overview_of_an_empty_home(ferret_home: Path) -> None:
    app = run(page("overview"))
    assert app.info[0].value.startswith("No corpora yet")


def test_promote_roll_back_and_collect_switch_the_live_version(populated_home: Path) -> None:
    app = run(page("evaluation"))
    assert app.button(key="rollback-kb").disabled  # v2 was never active

    app.button(key="promote-kb-2").click()
    run(app)
    assert app.success[0].value == "kb: version 2 is active (collection kb__v2)."
    assert active_versions() == ({1: IndexState.READY, 2: IndexState.ACTIVE}, "kb__v2")

    app.button(key="rollback-kb").click()
    run(app)
    assert app.success[0].value == "kb: rolled back to version 1 (collection kb__v1)."
    assert active_versions() == ({1: IndexState.ACTIVE, 2: IndexState.READY}, "kb__v1")
    history = next(frame.value for frame in app.dataframe if "index version" in frame.value.columns)
    steps = list(zip(history["index version"], history["how"], history["withdrawn"], strict=True))[-2:]
    assert steps == [(2, "promote", True), (1, "rollback", False)]  # who, when, how; what the rollback went past
    assert all(actor.startswith("admin:") for actor in history["by"][-2:]) and all(history["activated"])

    app.button(key="collect-kb").click()
    run(app)
    assert app.success[0].value.startswith("kb: collected nothing")  # v2 is within the newest K kept


def test_versions_page_shows_the_guards_figures(populated_home: Path) -> None:
    guard = {
        "passed": False,
        "reason": "only 12 held-out queries; at least 50 are needed",
        "candidate": {"held_out_mrr": 0.61, "examples_mrr": 1.0, "bm25_agreement_mrr": 0.5},
        "reference": {"held_out_mrr": 0.55},
        "held_out": 12,
        "held_out_gain_low": -0.02,
    }
    with open_context() as context:
        context.session.add(ModelVersion(name="kb-job7", path="/nowhere", dimension=384, metrics={"guard": guard}))
    app = run(page("evaluation"))

    models = app.dataframe[0].value
    trained = models[models["model"] == "kb-job7"].iloc[0]
    assert trained["guard"] == "refused"
    assert trained["held-out MRR@10"] == 0.61
    assert trained["active's held-out MRR@10"] == 0.55
    assert trained["reason"] == guard["reason"]
    assert any("**kb**: v1, model `base`" in m.value for m in app.markdown)


def test_labelled_set_is_scored_against_bm25_with_per_query_wins(populated_home: Path, tmp_path: Path) -> None:
    from ferret.ui.admin.actions import evaluate_upload
    from ferret.ui.admin.common import EVALUATION_RESULTS_KEY

    corpus = [
        {"_id": "c1", "title": "Volcano", "text": "A volcano erupts when magma reaches the surface."},
        {"_id": "c2", "title": "Chess", "text": "The king is checkmated when it cannot escape."},
        {"_id": "c3", "title": "Penguins", "text": "Penguins are flightless birds of the southern seas."},
    ]
    queries = {"q1": "molten rock eruption", "q2": "checkmate king", "q3": "birds that cannot fly"}
    files = {
        "corpus": "".join(json.dumps(row) + "\n" for row in corpus).encode(),
        "queries": "".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in queries.items()).encode(),
        "qrels": b"query-id\tcorpus-id\tscore\nq1\tc1\t1\nq2\tc2\t1\nq3\tc3\t1\n",
    }
    result = evaluate_upload("tiny", files, "test", ["base"])

    systems = [row["system"] for row in result["table"]]
    assert systems == ["bm25s", "base (dense)", "base (hybrid)"]
    assert set(result["per_query"]) == {"bm25s", "base"}
    assert result["per_query"]["base"]["q3"] == 1.0  # "birds that cannot fly" → Penguins, no shared word

    app = page("evaluation")
    app.session_state[EVALUATION_RESULTS_KEY] = result
    run(app)
    verdicts = [m.value for m in app.markdown if " wins " in m.value]
    assert verdicts and verdicts[0].startswith("**base** wins")
    counts = re.search(r"wins (\d+) queries and loses (\d+) .*; (\d+) quer", verdicts[0])
    assert counts and sum(map(int, counts.groups())) == len(queries)  # every query is a win, a loss or a tie
    with pytest.raises(InvalidInputError, match="Choose at least one model version"):
        evaluate_upload("tiny", files, "test", [])


def test_queries_and_qrels_alone_judge_a_corpus_ferret_holds(populated_home: Path) -> None:
    """An admin's labelled queries for the corpus ``kb`` (a folder): no corpus.jsonl, qrels name the files' paths."""
    from ferret.core.db.corpus import list_corpora
    from ferret.ui.admin.actions import evaluate_upload
    from ferret.ui.runtime import open_context

    files = {
        "queries": b'{"_id": "q1", "text": "largest planet gas giant"}\n{"_id": "q2", "text": "why tides rise"}\n',
        "qrels": b"query-id\tcorpus-id\tscore\nq1\tjupiter.md\t1\nq2\ttides.md\t1\n",
    }

    result = evaluate_upload("mine", files, "test", ["base"], corpus="kb")

    assert [row["system"] for row in result["table"]] == ["bm25s", "base (dense)", "base (hybrid)"]
    assert result["per_query"]["base"] == {"q1": 1.0, "q2": 1.0}
    with open_context() as context:
        assert [corpus.name for corpus in list_corpora(context.session)] == ["kb"]  # no eval-mine corpus made
    with pytest.raises(InvalidInputError, match=r"None of the 1 documents judged in qrels/test\.tsv"):
        evaluate_upload(
            "mine", {**files, "qrels": b"query-id\tcorpus-id\tscore\nq1\tc9\t1\n"}, "test", ["base"], corpus="kb"
        )


def test_upload_with_a_bad_split_is_one_sentence(populated_home: Path) -> None:
    from ferret.ui.admin.actions import evaluate_upload

    with pytest.raises(InvalidInputError, match="plain name"):
        evaluate_upload("tiny", {"corpus": b"", "queries": b"", "qrels": b""}, "../etc", ["base"])


def test_playground_compares_two_versions_as_a_group(populated_home: Path) -> None:
    app = run(page("playground"))
    app.text_input(key="playground-query").input("largest planet gas giant")
    app.text_input(key="playground-groups").input("engineering")
    app.selectbox(key="playground-mode-right").select("sparse")
    run(app)

    headings = [m.value for m in app.markdown if m.value.startswith("**1. ")]
    assert len(headings) == 2 and all("Jupiter" in h for h in headings)
    assert str(app.selectbox(key="playground-version-left").value).startswith("v2")
    assert str(app.selectbox(key="playground-version-right").value).startswith("v1 · base · live")
    assert any("**largest** **planet**" in m.value for m in app.markdown)  # highlighted words


def test_access_creates_a_key_shown_once_lists_and_revokes_it(populated_home: Path) -> None:
    app = run(page("access"))
    app.text_input(key="key-name").input("ci-bot")
    app.multiselect(key="key-scopes").select("ingest")
    app.text_input(key="key-groups").input("hr, eng")
    app.button[0].click()  # the form's submit button
    run(app)

    assert app.success[0].value == "Created API key ci-bot; copy it now: only its hash is kept."
    plaintext = app.code[0].value
    with open_context() as context:
        key = find_api_key_by_plaintext(context.session, plaintext)
        assert key is not None and key.name == "ci-bot"
        assert sorted(key.scopes) == ["ingest", "search"] and sorted(key.acl_groups) == ["eng", "hr"]
    rows = app.dataframe[0].value
    assert list(rows["name"]) == ["ci-bot"]
    assert plaintext not in rows.to_string()

    # Another rerun before the admin has copied it (the form's button clicked again with nothing in it, the
    # revoked-keys toggle) keeps the secret on the page; only the admin's own "copied" hides it, for good.
    app.button[0].click()
    run(app)
    app.toggle(key="show-revoked").set_value(True)
    run(app)
    assert [c.value for c in app.code] == [plaintext]
    app.button(key="dismiss-new-key").click()
    run(app)
    assert not app.code
    run(app)
    assert not app.code

    app.button(key="revoke-key").click()
    run(app)
    assert app.success[0].value == "Revoked API key ci-bot: every request with it now gets 401."
    with open_context() as context:
        assert list_api_keys(context.session) == []


def test_access_refuses_a_bad_name_in_one_sentence(populated_home: Path) -> None:
    app = run(page("access"))
    app.text_input(key="key-name").input("Bad Name!")
    app.button[0].click()
    run(app)
    assert app.error[0].value.startswith("API key name 'Bad Name!' is not valid")
