"""Search playground: one query against two index versions (or two modes of one, or two search configurations:
'base' or a version number) side by side, with scores, passages and the query's words highlighted, searched as a
member of the ACL groups the admin gives — the same ``Searcher`` and the same access filter as the API."""

from __future__ import annotations

from typing import Any

import streamlit as st

from ferret.core.db.corpus import get_corpus, list_corpora
from ferret.core.db.index_version import list_index_versions
from ferret.core.db.models import IndexState
from ferret.core.db.search_config import list_search_configs
from ferret.core.index.types import SEARCH_MODES, parse_mode
from ferret.core.search.configuration import plan_by_name
from ferret.core.search.snippets import snippet_window
from ferret.ui.admin.common import attempt, escape_markdown, highlight_markdown, page_context, show_notice

RESULTS = 10
NO_CONFIGURATION = "none (the version above)"


def _side(context: Any, column: Any, side: str, corpus_name: str, query: str, groups: list[str] | None) -> None:
    corpus = get_corpus(context.session, corpus_name)
    versions = [
        v
        for v in reversed(list_index_versions(context.session, corpus))
        if v.state in (IndexState.READY, IndexState.ACTIVE)
    ]
    if not versions:
        column.info(f"Corpus {corpus_name} has no searchable index version yet.")
        return
    labels = {
        f"v{v.version} · {v.model_version.name}{' · live' if v.state == IndexState.ACTIVE else ''}": v for v in versions
    }
    default = 0 if side == "left" else min(1, len(labels) - 1)
    version = labels[column.selectbox("Version", list(labels), index=default, key=f"playground-version-{side}")]
    mode = column.selectbox("Mode", list(SEARCH_MODES), key=f"playground-mode-{side}")
    configs = [str(c.version) for c in list_search_configs(context.session, corpus)]
    configuration = column.selectbox(
        "Search configuration (replaces the version; its fusion weighs the hybrid mode)",
        [NO_CONFIGURATION, "base", *configs],
        key=f"playground-config-{side}",
    )
    if not query.strip():
        return
    with column:
        results = attempt(
            lambda: context.searcher.search(
                corpus_name,
                query,
                k=RESULTS,
                mode=parse_mode(mode),
                acl_groups=groups,
                index_version=version if configuration == NO_CONFIGURATION else None,
                plan=None
                if configuration == NO_CONFIGURATION
                else plan_by_name(context.session, corpus, str(configuration)),
            )
        )
    if results is None:
        return
    if not results:
        column.caption("No results for these groups.")
    for rank, result in enumerate(results, start=1):
        with column.container(border=True):
            st.markdown(f"**{rank}. {escape_markdown(result.title or result.external_id)}** · score {result.score:.4f}")
            st.caption(f"{result.source} · {result.external_id}")
            st.markdown(highlight_markdown(snippet_window(result.text, query, width=400), query))


def render() -> None:
    st.header("Search playground")
    show_notice()
    with page_context() as context:
        corpora = [corpus.name for corpus in list_corpora(context.session)]
        if not corpora:
            st.info("No corpora yet.")
            return
        corpus_name = st.selectbox("Corpus", corpora, key="playground-corpus")
        query = st.text_input("Query", key="playground-query")
        groups_text = st.text_input(
            "Search as a member of these ACL groups (comma-separated; empty: public documents only)",
            key="playground-groups",
        )
        groups = [g.strip() for g in groups_text.split(",") if g.strip()]
        left, right = st.columns(2)
        _side(context, left, "left", corpus_name, query, groups)
        _side(context, right, "right", corpus_name, query, groups)


render()
