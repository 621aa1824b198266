"""The REALM pre-training pipeline: its state (``state``), its declaration (``declaration``: ``REALM``, what starting
a job reads) and its stage functions (``stages``); the model code is in ``ferret.core.realm``."""
