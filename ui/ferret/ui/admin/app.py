"""Ferret's admin: every daily workflow without the command line, one Streamlit page per workflow.

Start it with ``ferret admin`` (telemetry off, headless) with the same ``FERRET_*`` environment as the CLI; compose
runs it as the ``admin`` service against PostgreSQL, the Qdrant server and the Celery workers. It has no login
of its own: publish it on 127.0.0.1 or behind an authenticating proxy. Each page lives in ``views/`` and reads and
acts through the same domain functions as the CLI and the API (``ferret.runtime``'s application context).
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

VIEWS = Path(__file__).resolve().parent / "views"
PAGES = [
    ("overview.py", "Overview", ":material/dashboard:"),
    ("tasks.py", "Tasks", ":material/edit_note:"),
    ("jobs.py", "Jobs", ":material/play_circle:"),
    ("synthetic.py", "Synthetic data", ":material/science:"),
    ("evaluation.py", "Evaluation and versions", ":material/leaderboard:"),
    ("playground.py", "Search playground", ":material/search:"),
    ("sources.py", "Sources", ":material/sync:"),
    ("access.py", "Access", ":material/key:"),
]


def main() -> None:
    st.set_page_config(page_title="Ferret admin", layout="wide")
    pages = [
        st.Page(VIEWS / file, title=title, icon=icon, url_path=file.removesuffix(".py"), default=index == 0)
        for index, (file, title, icon) in enumerate(PAGES)
    ]
    st.sidebar.title("Ferret admin")
    st.navigation(pages).run()


main()
