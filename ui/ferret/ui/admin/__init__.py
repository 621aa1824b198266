"""The Streamlit admin (``ferret admin``): overview, tasks, jobs, synthetic data, evaluation and versions, search
playground, access. ``app.py`` is the entry; each page is a script in ``views/`` over the domain's functions."""
