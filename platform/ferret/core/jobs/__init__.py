"""Jobs: long work that reports its progress into the job table and stops when a cancel is requested.

The runners here are what the Celery tasks of ``ferret.workers`` call, and what embedded mode calls in-process.
"""
