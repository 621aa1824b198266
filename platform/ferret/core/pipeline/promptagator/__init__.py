"""The Promptagator pipeline: its configuration and state (``state``), its declared stages (``stages``) and the
in-process driver (``in_process``)."""
