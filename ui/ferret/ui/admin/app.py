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
# No page icons: Streamlit turns a page's ":material/...:" icon into the browser tab's favicon, fetched from
# fonts.gstatic.com on every page view, and nothing may leave the machine.
PAGES = [
    ("overview.py", "Overview"),
    ("tasks.py", "Tasks"),
    ("jobs.py", "Jobs"),
    ("synthetic.py", "Synthetic data"),
    ("evaluation.py", "Evaluation and versions"),
    ("playground.py", "Search playground"),
    ("sources.py", "Sources"),
    ("access.py", "Access"),
]


def main() -> None:
    st.set_page_config(page_title="Ferret admin", layout="wide")
    pages = [
        st.Page(VIEWS / file, title=title, url_path=file.removesuffix(".py"), default=index == 0)
        for index, (file, title) in enumerate(PAGES)
    ]
    st.sidebar.title("Ferret admin")
    st.navigation(pages).run()


main()
