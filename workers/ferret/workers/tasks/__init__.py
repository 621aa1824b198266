"""Thin Celery tasks, one module per stage: each hands its JSON payload to a runner of ``ferret.core.jobs``."""
