"""The Promptagator pipeline: its configuration and state (``state``), its declaration (``declaration``:
``PROMPTAGATOR``, what starting a job reads), its stage functions (``stages``, ``configure``) and the in-process
driver (``in_process``)."""
