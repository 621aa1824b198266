"""The Streamlit admin: corpora and their index versions (promote, roll back), tasks and jobs.

Run it with ``streamlit run ui/ferret/ui/admin/app.py`` (compose: the ``admin`` service). The page reads through
``overview`` and acts through ``index_actions``, both over the same ``ferret.core`` services the CLI and the API use.
"""
