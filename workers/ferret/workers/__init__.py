"""Celery apps, queues and tasks: thin wrappers over ferret.core (built in the workers issue)."""
