"""Generate a task's synthetic queries on another machine, then write them into Ferret exactly as `generate` would.

    record:   python benchmarks/llm_replay.py record --home H --task T --calls calls.jsonl [--max-documents N ...]
    complete: python benchmarks/llm_replay.py complete --calls calls.jsonl --out completions.jsonl [--model F.gguf]
    replay:   python benchmarks/llm_replay.py replay --home H --task T --completions completions.jsonl [...]

``record`` runs Ferret's own ``generate`` against a throwaway copy of the home's database with a backend that
writes down every call (prompts, n, temperature, max tokens, stop, seed) instead of answering it. ``complete``
answers those calls with Ferret's embedded generator (``LocalTransformersBackend``, the same SmolLM2 GGUF) on the
machine it runs on, a GPU one when the shared 2 CPU cores are too busy. ``replay`` runs ``generate`` again on the
real database with a backend that returns the recorded answers, so the rows, statuses and counters are those of a
local run. Sampling is seeded per call as in a local run, but a GPU samples other tokens than a CPU would.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

BACKEND_NAME = "local:SmolLM2-135M-Instruct.Q4_1.gguf"


def _key(prompts: Sequence[str], seed: int | None) -> str:
    return hashlib.sha256(json.dumps([list(prompts), seed]).encode()).hexdigest()


def _backends() -> tuple[type, type]:
    from ferret.core.llm.base import Completion, LLMBackend, LLMError, UsageCounters

    class RecordingBackend(LLMBackend):
        def __init__(self, path: Path) -> None:
            self.name, self.usage, self.handle = BACKEND_NAME, UsageCounters(), path.open("w")

        def complete(self, prompts: Sequence[str], **kwargs: Any) -> list[list[Completion]]:
            self.handle.write(json.dumps({"prompts": list(prompts), **kwargs}) + "\n")
            return [[Completion("", "length", 0)] * int(kwargs.get("n", 1)) for _ in prompts]

        def close(self) -> None:
            self.handle.close()

    class ReplayBackend(LLMBackend):
        def __init__(self, path: Path) -> None:
            self.name, self.usage, self.answers = BACKEND_NAME, UsageCounters(), {}
            for line in path.read_text().splitlines():
                row = json.loads(line)
                self.answers[row["key"]] = [[Completion(**c) for c in cs] for cs in row["completions"]]

        def complete(self, prompts: Sequence[str], **kwargs: Any) -> list[list[Completion]]:
            found = self.answers.get(_key(prompts, kwargs.get("seed")))
            if found is None:
                raise LLMError("No recorded completion for this batch; record and complete it first.")
            return found

    return RecordingBackend, ReplayBackend


def _generate(home: Path, task_name: str, backend: Any, args: argparse.Namespace) -> None:
    os.environ["FERRET_HOME"] = str(home)
    from ferret.core.db.task import get_task
    from ferret.core.synth.generation import generate
    from ferret.runtime.context import app_context

    with app_context() as ctx:
        run = generate(
            ctx.session, get_task(ctx.session, task_name), backend,
            queries_per_doc=args.queries_per_doc, max_documents=args.max_documents,
        )  # fmt: skip
        print(f"run {run.id}: {run.state.value}, {run.counters}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=("record", "complete", "replay"))
    parser.add_argument("--home", type=Path)
    parser.add_argument("--task", default="few-shot-ex250")
    parser.add_argument("--calls", type=Path)
    parser.add_argument("--completions", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--max-documents", type=int, default=None)
    parser.add_argument("--queries-per-doc", type=int, default=None)
    args = parser.parse_args()
    if args.step == "complete":
        from ferret.core.llm.local_backend import LocalTransformersBackend

        llm = LocalTransformersBackend(args.model, batch_size=64)
        with args.out.open("w") as out:
            for line in args.calls.read_text().splitlines():
                call = json.loads(line)
                prompts = call.pop("prompts")
                answers = llm.complete(prompts, **call)
                row = {
                    "key": _key(prompts, call.get("seed")),
                    "completions": [[c.__dict__ for c in cs] for cs in answers],
                }
                out.write(json.dumps(row) + "\n")
        print(f"completed {args.calls}: {llm.usage}")
        return
    recording, replay = _backends()
    if args.step == "record":
        scratch = Path(tempfile.mkdtemp(prefix="ferret-record-"))
        for name in ("ferret.db", "ferret.db-wal", "ferret.db-shm"):
            if (args.home / name).exists():
                shutil.copy(args.home / name, scratch / name)
        (scratch / "qdrant").mkdir()
        backend = recording(args.calls)
        try:
            _generate(scratch, args.task, backend, args)
        finally:
            backend.close()
            shutil.rmtree(scratch, ignore_errors=True)
        return
    _generate(args.home, args.task, replay(args.completions), args)


if __name__ == "__main__":
    main()
