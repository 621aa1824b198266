"""The REALM pre-training pipeline: its state (``state``) and its declared stages (``stages``); the model code is in
``ferret.core.realm``."""
