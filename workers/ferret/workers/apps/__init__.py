"""One Celery app module per worker kind: ``celery -A ferret.workers.apps.gpu worker`` (or ``ferret worker``)."""
