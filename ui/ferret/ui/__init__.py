"""Streamlit admin and Textual terminal client (built in a later issue)."""
