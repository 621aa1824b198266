"""The HTTP API (FastAPI): search, the connector push API, corpora, tasks, jobs and index versions.

``create_app(settings)`` builds the application; ``ferret serve`` runs it under uvicorn. Every route but
``/health`` needs an API key with the right scope, and search filters by the key's ACL groups inside Qdrant.
"""
