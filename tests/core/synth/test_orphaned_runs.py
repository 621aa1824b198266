"""A generation run left ``running`` by a killed process is marked interrupted at the next start on the host, like
an orphaned embedded job (issue 11, item 8), and resumes when the task runs again."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from sqlalchemy.orm import Session

from ferret.core.db.corpus import create_corpus
from ferret.core.db.models import GenerationRun, GenerationState, RetrievalTask
from ferret.core.db.synthetic import ORPHANED_RUN_ERROR, create_run, interrupt_orphaned_runs, run_owner
from ferret.core.settings import FerretSettings
from ferret.runtime.context import open_runtime


def test_runs_of_a_process_that_is_gone_are_interrupted(session: Session, settings: FerretSettings) -> None:
    exited = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    corpus = create_corpus(session, "kb")
    task = RetrievalTask(name="t", corpus_id=corpus.id)
    session.add(task)
    session.flush()
    owners = {
        "dead": f"{socket.gethostname()}:{exited.stdout.strip()}",
        "alive": run_owner(),
        "other-host": f"elsewhere.example:{os.getpid()}",
        "unknown": None,
    }
    runs = {}
    for name, owner in owners.items():
        runs[name] = create_run(session, task, {"seed": name})
        runs[name].owner = owner
    assert runs["alive"].owner == run_owner()  # create_run records this process
    session.commit()

    with open_runtime(settings):  # every CLI command, the API and the admin start with it
        pass
    session.expire_all()
    states = {name: session.get_one(GenerationRun, run.id) for name, run in runs.items()}
    assert states["dead"].state is GenerationState.INTERRUPTED and states["dead"].error == ORPHANED_RUN_ERROR
    assert {name: run.state for name, run in states.items() if name != "dead"} == dict.fromkeys(
        ("alive", "other-host", "unknown"), GenerationState.RUNNING
    )
    assert interrupt_orphaned_runs(session) == []
