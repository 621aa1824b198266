"""The REALM pre-training pipeline's stage functions: pretrain → guard, both on the gpu queue. The pipeline is
declared in ``declaration`` (``REALM``), which names these by ``StageBody`` so that starting a job imports none of
this module's ML stack.

- ``pretrain`` masks the corpus, warms the reader up, trains with the asynchronous index refresh through internal
  collections (``ferret.core.realm.refresh``) and registers the WiSE-FT'd retriever as a model version. It is safe
  to deliver twice: the trainer resumes from the run's last checkpoint, and a model version carrying the run's key
  is found again instead of registered twice.
- ``guard`` judges the new model version against the corpus's active model, like a Promptagator candidate; its
  figures are stored beside the model version, so a redelivery reuses them. Nothing is promoted: REALM's retriever
  is a starting point (``ferret index build --promote``, or ``ferret pipeline run --init realm:<model>``).

Example:
    >>> state = RealmState.start(corpus, RealmConfig(steps=200), job_id=7)
    >>> run_in_process(REALM, state, context)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ferret.core.db.corpus import get_corpus
from ferret.core.db.model_version import find_model_version, get_model_version
from ferret.core.encoder.registry import ModelRegistry
from ferret.core.pipeline.declaration import StageContext
from ferret.core.pipeline.realm.state import RealmState
from ferret.core.realm.config import RealmConfig
from ferret.core.realm.masking import MaskedSentence
from ferret.core.realm.pretrain import corpus_passages, guard_realm_model, masked_data, register_realm_model
from ferret.core.realm.refresh import QdrantRefreshStore
from ferret.core.realm.trainer import RealmTrainer


def run_dir(context: StageContext, state: RealmState) -> Path:
    return context.settings.home / "realm" / state.run_key


def pretrain_stage(context: StageContext, state: RealmState) -> RealmState:
    """Mask, train (or resume), WiSE-FT and register; see the module docstring."""
    import torch

    session, settings = context.session, context.settings
    corpus = get_corpus(session, state.corpus)
    base = ModelRegistry(session, settings).ensure_base()
    session.commit()
    folder = run_dir(context, state)
    existing = find_model_version(session, state.model_name)
    if existing is not None and (existing.training_config or {}).get("realm_key") == state.run_key:
        return state.advance(**dict(existing.metrics.get("realm", {})))  # a redelivery after registration
    device = state.config.device or settings.device or ("cuda" if torch.cuda.is_available() else "cpu")
    config = RealmConfig.from_json({**state.config.to_json(), "device": device})
    context.progress("masking salient spans", 0.0)
    data = masked_data(corpus_passages(session, corpus), config, config.resolved_k(device))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "held_out.json").write_text(json.dumps([s.to_json() for s in data.held_out]))
    session.commit()  # nothing stays locked while training runs
    context.add_counts(sentences=len(data.train), held_out=len(data.held_out))

    def report(activity: str, fraction: float, counts: dict[str, Any]) -> None:
        context.add_counts(**counts)
        context.progress(activity, fraction)  # a cancel raises here: the trainer stops at this step

    store = QdrantRefreshStore(context.backend, corpus.name, run=state.run_key, corpus_id=corpus.id)
    result = RealmTrainer(config, base.path, data, store, folder, progress=report).run()
    model = register_realm_model(
        session, settings, result, config, model_name=state.model_name, run_key=state.run_key, corpus=corpus
    )
    return state.advance(**dict(model.metrics.get("realm", {})))


def guard_stage(context: StageContext, state: RealmState) -> RealmState:
    """The promotion guard against the active model; figures stored beside the model version."""
    session = context.session
    model = get_model_version(session, state.model_name)
    stored = model.metrics.get("guard")
    if stored is None:
        context.progress("guard: comparing with the active model", 0.0)
        path = run_dir(context, state) / "held_out.json"
        held_out = [MaskedSentence.from_json(item) for item in json.loads(path.read_text())]
        corpus = get_corpus(session, state.corpus)
        stored = guard_realm_model(session, context.settings, model, corpus, held_out, task=state.task).as_dict()
    return state.advance(guard={"passed": stored["passed"], "reason": stored["reason"]})
