"""Search configurations in the admin (``ferret config list|promote|rollback``): each corpus's configurations
(retriever + fusion + reranker as one unit) with the guard's figures and decision, promote one, roll back — the
same domain functions as the CLI (``ferret.core.search.configuration``)."""

from __future__ import annotations

from functools import partial
from typing import Any

import streamlit as st

from ferret.core.db.activation import CONFIG, activation_history
from ferret.core.db.audit import local_actor
from ferret.core.db.corpus import get_corpus
from ferret.core.db.search_config import get_search_config, list_search_configs
from ferret.core.search.configuration import (
    create_config,
    describe,
    promote_config,
    retriever_label,
    rollback_config,
)
from ferret.core.search.fusion import DEFAULT_FUSION, FUSION_METHODS, Fusion
from ferret.ui.admin.common import activation_rows, run_action
from ferret.ui.runtime import open_context


def promote_search_config(corpus_name: str, version: int) -> str:
    with open_context() as context:
        corpus = get_corpus(context.session, corpus_name)
        config = get_search_config(context.session, corpus, version)
        promote_config(context.session, context.settings, context.backend, corpus, config, actor=local_actor("admin"))
        context.searcher.active_plans.forget(corpus_name)  # this process's searches see it now, not in 2 s
        return f"Search configuration {version} of {corpus_name} is active."


def make_search_config(corpus_name: str, retriever: str, method: str, alpha: float, note: str) -> str:
    with open_context() as context:
        corpus = get_corpus(context.session, corpus_name)
        fusion = Fusion(method, alpha)  # type: ignore[arg-type]
        config = create_config(
            context.session, corpus, retriever=retriever.strip(), fusion=fusion, note=note, actor=local_actor("admin")
        )
        return (
            f"Search configuration {config.version} of {corpus_name} made ({config.retriever_name}, "
            f"{fusion.describe()}); it is not active until promoted."
        )


def make_form(corpus_name: str) -> None:
    """A configuration by hand: the retriever and the fusion an admin wants to compare or roll out."""
    with st.expander(f"Make a configuration of {corpus_name} by hand", expanded=False):
        left, middle, right = st.columns([2, 1, 2])
        retriever = left.text_input("Retriever model", value="base", key=f"make-retriever-{corpus_name}")
        method = middle.selectbox(
            "Fusion",
            FUSION_METHODS,
            index=FUSION_METHODS.index(DEFAULT_FUSION.method),
            key=f"make-fusion-{corpus_name}",
        )
        alpha = right.slider(
            "Dense share α (convex)", 0.0, 1.0, DEFAULT_FUSION.weight, 0.1, key=f"make-alpha-{corpus_name}"
        )
        note = st.text_input("Note", key=f"make-note-{corpus_name}")
        st.button(
            "Make configuration",
            key=f"make-config-{corpus_name}",
            on_click=run_action,
            args=(partial(make_search_config, corpus_name, retriever, str(method), float(alpha), note),),
        )


def roll_back_search_config(corpus_name: str) -> str:
    with open_context() as context:
        config = rollback_config(
            context.session,
            context.settings,
            context.backend,
            get_corpus(context.session, corpus_name),
            actor=local_actor("admin"),
        )
        context.searcher.active_plans.forget(corpus_name)
        return f"Rolled back: search configuration {config.version} of {corpus_name} is active."


def config_rows(configs: list[Any]) -> list[dict[str, Any]]:
    """One row per configuration, as ``ferret config list`` prints it, with the guard's figures."""
    rows = []
    for config in configs:
        shown = describe(config)
        guard = shown["guard"] if isinstance(shown["guard"], dict) else {}
        candidate = guard.get("candidate") if isinstance(guard.get("candidate"), dict) else {}
        rows.append(
            {
                "version": config.version,
                "state": "active" if config.active else "ready",
                "retriever": retriever_label(shown),
                "fusion": shown["fusion"],
                "reranker": f"{shown['reranker']} @{config.rerank_depth} w={config.rerank_weight:.2f}"
                if shown["reranker"]
                else "-",
                "guard": ("passed" if guard.get("passed") else "refused") if guard else "-",
                "held-out MRR@10": (candidate or {}).get("held_out_mrr"),
                "gain (5th pct)": guard.get("held_out_gain_low"),
                "reason": guard.get("reason", ""),
                "note": config.note,
            }
        )
    return rows


def tuning_rows(evidence: dict[str, Any] | None) -> tuple[str, list[dict[str, Any]]]:
    """How a configuration's fusion was chosen: the tuning's sentence and the evidence's objective (the examples'
    and the held-out queries' MRR@10, half each) at every convex weight it tried, the default's marked, and under RRF
    (scored for reference). Empty for a configuration made by hand."""
    fusion = (evidence or {}).get("fusion")
    if not isinstance(fusion, dict):
        return "", []
    rows = []
    for key, value in (fusion.get("scores") or {}).items():
        if key == "rrf":
            rows.append({"fusion": "RRF (reference)", "objective": value})
        elif key.replace(".", "", 1).isdigit():
            default = DEFAULT_FUSION.method == "convex" and key == f"{DEFAULT_FUSION.weight:.1f}"
            rows.append({"fusion": f"convex α={key}" + (" (default)" if default else ""), "objective": value})
    return str(fusion.get("reason", "")), rows


def show_tuning(evidence: dict[str, Any] | None, version: int) -> None:
    reason, rows = tuning_rows(evidence)
    if not rows:
        return
    with st.expander(f"How configuration {version}'s fusion was chosen", expanded=False):
        st.caption(reason)
        st.dataframe(rows, hide_index=True)
        for name, compared in ((evidence or {}).get("retrievers") or {}).items():
            st.caption(f"retriever {name}: {compared.get('reason', '')}")


def search_configurations_section(context: Any, corpus_names: list[str]) -> None:
    st.subheader("Search configurations")
    for corpus_name in corpus_names:
        corpus = get_corpus(context.session, corpus_name)
        configs = list_search_configs(context.session, corpus)
        st.markdown(f"**{corpus_name}**")
        make_form(corpus_name)
        if not configs:
            st.caption(
                f"No search configuration yet: search runs {DEFAULT_FUSION.describe()} over the active index version."
            )
            continue
        st.dataframe(config_rows(configs), hide_index=True)
        history = activation_history(context.session, corpus, CONFIG)
        if history:
            st.caption("Activations, oldest first: Roll back walks back through those not withdrawn.")
            st.dataframe(activation_rows(history, "configuration"), hide_index=True)
        left, middle, right = st.columns([2, 1, 1])
        version = left.selectbox("Configuration", [c.version for c in configs], key=f"search-config-{corpus_name}")
        chosen = next((c for c in configs if c.version == version), None)
        middle.button(
            "Promote configuration",
            key=f"promote-config-{corpus_name}",
            on_click=run_action,
            args=(partial(promote_search_config, corpus_name, int(version or 0)),),
        )
        right.button(
            "Roll back configuration",
            key=f"rollback-config-{corpus_name}",
            on_click=run_action,
            args=(partial(roll_back_search_config, corpus_name),),
        )
        if chosen is not None:
            show_tuning(chosen.evidence, chosen.version)
