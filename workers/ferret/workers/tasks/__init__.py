"""The Celery tasks: ``table`` defines one per declared stage; ``base`` is what they share."""
