"""Evaluation and versions: what is live, every model version with the guard's figures and decision, each corpus's
index versions (promote, roll back, collect), and a labelled set the admin uploads (BEIR layout) scored for BM25,
the base model and trained ones, with per-query wins and losses."""

from __future__ import annotations

from functools import partial
from typing import Any

import streamlit as st

from ferret.core.db.activation import INDEX, activation_history
from ferret.core.db.corpus import get_corpus, list_corpora
from ferret.core.db.model_version import list_model_versions
from ferret.core.eval.per_query import BM25, wins_and_losses
from ferret.ui.admin.actions import collect_versions, evaluate_upload
from ferret.ui.admin.common import (
    EVALUATION_RESULTS_KEY,
    activation_rows,
    attempt,
    page_context,
    run_action,
    show_notice,
    when,
)
from ferret.ui.admin.config_section import search_configurations_section
from ferret.ui.admin.index_actions import promote_index_version, roll_back_corpus
from ferret.ui.admin.overview import load_overview


def guard_rows(models: list[Any]) -> list[dict[str, Any]]:
    """One row per model version: the guard's decision and figures as stored beside it by the pipeline."""
    rows = []
    for model in models:
        guard = (model.metrics or {}).get("guard") or {}
        candidate, reference = guard.get("candidate") or {}, guard.get("reference") or {}
        rows.append(
            {
                "model": model.name,
                "created": when(model.created_at),
                "guard": "" if not guard else ("passed" if guard.get("passed") else "refused"),
                "held-out MRR@10": candidate.get("held_out_mrr"),
                "active's held-out MRR@10": reference.get("held_out_mrr"),
                "gain (5th pct)": guard.get("held_out_gain_low"),
                "examples MRR@10": candidate.get("examples_mrr"),
                "BM25 agreement": candidate.get("bm25_agreement_mrr"),
                "held-out queries": guard.get("held_out"),
                "reason": guard.get("reason", ""),
            }
        )
    return rows


def _versions_section(context: Any) -> None:
    overview = load_overview(context.session)
    st.subheader("What is live")
    for corpus in overview.corpora:
        active = corpus.active
        st.markdown(
            f"**{corpus.name}**: "
            + (f"v{active.version}, model `{active.model}`, since {when(active.activated_at)}" if active else "none")
        )
    st.subheader("Model versions and the guard")
    st.dataframe(guard_rows(list_model_versions(context.session)), hide_index=True)
    st.subheader("Index versions")
    for corpus in overview.corpora:
        st.markdown(f"**{corpus.name}**")
        st.dataframe(
            [
                {
                    "version": v.version,
                    "state": v.state.value,
                    "model": v.model,
                    "points": v.points,
                    "created": when(v.created_at),
                    "activated": when(v.activated_at),
                }
                for v in corpus.versions
            ],
            hide_index=True,
        )
        history = activation_history(context.session, get_corpus(context.session, corpus.name), INDEX)
        if history:
            st.caption("Activations, oldest first: Roll back walks back through those not withdrawn.")
            st.dataframe(activation_rows(history, "index version"), hide_index=True)
        promotable = [v for v in corpus.versions if v.can_promote]
        buttons = st.columns(len(promotable) + 2)
        for column, row in zip(buttons, promotable, strict=False):
            column.button(
                f"Promote v{row.version}",
                key=f"promote-{corpus.name}-{row.version}",
                on_click=run_action,
                args=(partial(promote_index_version, corpus.name, row.version),),
            )
        buttons[-2].button(
            "Roll back",
            key=f"rollback-{corpus.name}",
            disabled=not corpus.can_roll_back,
            on_click=run_action,
            args=(partial(roll_back_corpus, corpus.name),),
        )
        buttons[-1].button(
            "Collect old versions",
            key=f"collect-{corpus.name}",
            on_click=run_action,
            args=(partial(collect_versions, corpus.name),),
        )


UPLOADED = "the uploaded corpus.jsonl"


def _upload_section(context: Any) -> None:
    st.subheader("Evaluate on a labelled set (BEIR layout)")
    models = [model.name for model in list_model_versions(context.session)]
    corpora = [corpus.name for corpus in list_corpora(context.session)]
    with st.form("evaluate"):
        judged = st.selectbox(
            "Documents judged",
            [UPLOADED, *corpora],
            key="eval-judged",
            help="A corpus Ferret holds needs no corpus.jsonl: the qrels name its documents by id (a file's path).",
        )
        name = st.text_input("Set name (a corpus eval-<name> is created)", value="labelled", key="eval-name")
        corpus_file = st.file_uploader("corpus.jsonl", type=["jsonl"], key="eval-corpus")
        queries_file = st.file_uploader("queries.jsonl", type=["jsonl"], key="eval-queries")
        qrels_file = st.file_uploader("qrels (query-id, corpus-id, score; TSV)", type=["tsv"], key="eval-qrels")
        split = st.text_input("Split", value="test", key="eval-split")
        chosen = st.multiselect("Model versions", models, default=models[:2], key="eval-models")
        if st.form_submit_button("Evaluate"):
            held = None if judged == UPLOADED else judged
            if not (queries_file and qrels_file and (corpus_file or held)):
                st.error(
                    "Upload queries.jsonl and the qrels TSV, and corpus.jsonl unless a corpus Ferret holds is judged."
                )
            else:
                files = {"queries": queries_file.getvalue(), "qrels": qrels_file.getvalue()}
                if corpus_file and held is None:
                    files["corpus"] = corpus_file.getvalue()
                with st.spinner("Indexing and evaluating…"):
                    result = attempt(
                        lambda: evaluate_upload(name.strip().lower(), files, split.strip(), chosen, corpus=held)
                    )
                if result is not None:
                    st.session_state[EVALUATION_RESULTS_KEY] = result
    result = st.session_state.get(EVALUATION_RESULTS_KEY)
    if result is not None:
        _results(result)


def _results(result: dict[str, Any]) -> None:

    table: list[dict[str, Any]] = result["table"]
    st.dataframe(table, hide_index=True)
    metric = next((c for c in table[0] if c.lower().startswith("ndcg")), list(table[0])[1])
    chart = {"system": [row["system"] for row in table], metric: [row[metric] for row in table]}
    st.bar_chart(chart, x="system", y=metric, horizontal=True)
    systems = list(result["per_query"])
    left, right = st.columns(2)
    candidate = left.selectbox("Candidate", systems, index=len(systems) - 1, key="eval-candidate")
    reference = right.selectbox("Against", systems, index=systems.index(BM25), key="eval-reference")
    deltas = wins_and_losses(result["queries"], result["per_query"][candidate], result["per_query"][reference])
    wins = sum(d.delta > 0 for d in deltas)
    ties = sum(qid in result["per_query"][reference] for qid in result["per_query"][candidate]) - len(deltas)
    st.markdown(
        f"**{candidate}** wins {wins} queries and loses {len(deltas) - wins} against **{reference}** (nDCG@10); "
        f"{ties} {'query ties' if ties == 1 else 'queries tie'}."
    )
    st.dataframe(
        [
            {
                "query": d.query,
                candidate: round(d.candidate, 3),
                reference: round(d.reference, 3),
                "Δ": round(d.delta, 3),
            }
            for d in deltas
        ],
        hide_index=True,
    )


def render() -> None:
    st.header("Evaluation and versions")
    show_notice()
    with page_context() as context:
        if not list_corpora(context.session):
            st.info("No corpora yet.")
        _versions_section(context)
        search_configurations_section(context, [corpus.name for corpus in list_corpora(context.session)])
        _upload_section(context)


render()
