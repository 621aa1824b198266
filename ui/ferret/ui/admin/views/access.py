"""Access: API keys of the HTTP API — create one (its secret shown once, only its hash is stored), list them with
their scopes and ACL groups, revoke one — through the same functions as ``ferret apikey``.

A new key's secret stays on the page, in this browser session only, until the admin says it has been copied: any
other rerun (a second click of the form's button, the revoked-keys toggle) would otherwise lose it for good."""

from __future__ import annotations

from functools import partial

import streamlit as st

from ferret.core.db.api_key import list_api_keys
from ferret.core.db.models import ApiKeyScope
from ferret.ui.admin.actions import create_key, revoke_key
from ferret.ui.admin.common import attempt, page_context, run_action, show_notice, when

NEW_KEY_STATE = "access-new-key"
"""(message, plaintext) of the key created last in this browser session, until its secret is dismissed."""


def _dismiss_new_key() -> None:
    st.session_state.pop(NEW_KEY_STATE, None)


def show_new_key() -> None:
    """The secret of the key just created, with the button that hides it for good."""
    created: tuple[str, str] | None = st.session_state.get(NEW_KEY_STATE)
    if created is None:
        return
    message, plaintext = created
    st.success(message)
    st.code(plaintext, language=None)
    st.button("I have copied it", key="dismiss-new-key", on_click=_dismiss_new_key)


def render() -> None:
    st.header("Access")
    show_notice()
    with st.form("create-key", clear_on_submit=True):
        st.markdown("**Create an API key**")
        name = st.text_input("Name", key="key-name")
        scopes = st.multiselect(
            "Scopes (admin implies the others)", [s.value for s in ApiKeyScope], default=["search"], key="key-scopes"
        )
        groups = st.text_input(
            "ACL groups its searches may see (comma-separated; public is always included)", key="key-groups"
        )
        submitted = st.form_submit_button("Create key", type="primary")
    if submitted:
        created = attempt(lambda: create_key(name, scopes, groups))
        if created:
            st.session_state[NEW_KEY_STATE] = created
    show_new_key()
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
        right.button("Revoke", key="revoke-key", on_click=run_action, args=(partial(revoke_key, str(chosen)),))


render()
