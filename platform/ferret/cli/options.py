"""Option help shared by several command modules, in a module that imports nothing, so that ``ferret.cli.main`` can
use it at start-up without importing the job machinery (issue 11, item 9)."""

ASYNC_HELP = (
    "Return at once and run it as a background job: on the workers with FERRET_BROKER_URL, else in a detached "
    "local runner; `ferret jobs follow ID` shows its progress."
)
