"""Ferret's user interfaces: the Streamlit admin (``ferret.ui.admin``); the Textual terminal client comes later."""
