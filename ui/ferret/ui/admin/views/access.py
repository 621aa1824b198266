"""Access: API keys of the HTTP API — create one (its secret shown once, only its hash is stored), list them with
their scopes and ACL groups, revoke one — through the same functions as ``ferret apikey``."""

from __future__ import annotations

from functools import partial

import streamlit as st

from ferret.core.db.api_key import create_api_key, list_api_keys, revoke_api_key
from ferret.core.db.models import ApiKeyScope
from ferret.ui.admin.common import attempt, page_context, run_action, show_notice, when
from ferret.ui.runtime import open_context

NEW_KEY = "access_new_key"


def revoke(name: str) -> str:
    with open_context() as context:
        key = revoke_api_key(context.session, name)
        context.session.commit()
        return f"Revoked API key {key.name}: every request with it now gets 401."


def create(name: str, scopes: list[str], groups_text: str) -> str:
    groups = [g.strip() for g in groups_text.split(",") if g.strip()]
    with open_context() as context:
        key, plaintext = create_api_key(context.session, name, scopes, groups)
        context.session.commit()
        st.session_state[NEW_KEY] = (key.name, plaintext)
        return f"Created API key {key.name}; copy it now, it is shown only once."


def render() -> None:
    st.header("Access")
    show_notice()
    new_key = st.session_state.pop(NEW_KEY, None)
    if new_key is not None:
        st.warning(f"API key {new_key[0]}, shown only now:")
        st.code(new_key[1], language=None)
    with st.form("create-key", clear_on_submit=True):
        st.markdown("**Create an API key**")
        name = st.text_input("Name", key="key-name")
        scopes = st.multiselect(
            "Scopes (admin implies the others)", [s.value for s in ApiKeyScope], default=["search"], key="key-scopes"
        )
        groups = st.text_input("ACL groups its searches may see (comma-separated; public is always included)", key="key-groups")
        if st.form_submit_button("Create key", type="primary"):
            message = attempt(lambda: create(name, scopes, groups))
            if message:
                st.session_state["ferret_admin_notice"] = ("success", message)
                st.rerun()
    show_revoked = st.toggle("Show revoked keys", key="show-revoked")
    with page_context() as context:
        keys = list_api_keys(context.session, include_revoked=show_revoked)
        rows = [
            {
                "name": key.name,
                "prefix": f"fk_{key.prefix}_…",
                "scopes": ", ".join(key.scopes),
                "groups": ", ".join(key.acl_groups) or "public only",
                "created": when(key.created_at),
                "last used": when(key.last_used_at) or "never",
                "revoked": when(key.revoked_at),
            }
            for key in keys
        ]
        active = [key.name for key in keys if key.revoked_at is None]
    if not rows:
        st.info("No API keys yet.")
        return
    st.dataframe(rows, hide_index=True)
    if active:
        left, right = st.columns([3, 1])
        chosen = left.selectbox("Key to revoke", active, key="revoke-choice")
        right.button("Revoke", key="revoke-key", on_click=run_action, args=(partial(revoke, str(chosen)),))


render()
