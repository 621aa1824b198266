"""REALM end to end on CPU, small but real: MiniLM, spaCy, embedded Qdrant, a generated corpus, a few steps.

``ferret realm pretrain`` masks the corpus, warms the reader up, trains with the asynchronous refresh through
internal collections, registers the WiSE-FT'd retriever as a model version and runs the guard; a killed trainer
resumes from its checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from ferret.cli.main import app
from ferret.core.db.engine import session_scope
from ferret.core.db.models import Job, JobState, ModelVersion
from ferret.core.encoder.registry import base_model_path
from ferret.core.index.edge_backend import EdgeIndexBackend
from ferret.core.realm.config import RealmConfig
from ferret.core.realm.masking import CorpusPassage, SpanMasker, split_held_out
from ferret.core.realm.refresh import MatrixRefreshStore
from ferret.core.realm.trainer import RealmData, RealmTrainer
from ferret.core.settings import FerretSettings

runner = CliRunner()
pytestmark = pytest.mark.slow


def test_pretrain_registers_a_guarded_model(
    settings: FerretSettings,
    tmp_path: Path,
    make_beir: Callable[..., Path],
    tiny_biographies: Callable[..., list[dict[str, str]]],
) -> None:
    dataset = make_beir(tmp_path / "bio", tiny_biographies(), {"q1": "who won the medal"}, {"q1": {"bio-0": 1}})
    ingested = runner.invoke(app, ["ingest", "--corpus", "bio", "--beir", str(dataset)])
    assert ingested.exit_code == 0, ingested.output
    command = ["realm", "pretrain", "--corpus", "bio", "--steps", "2", "--k", "2", "--batch-size", "2"]
    command += ["--mlm-warmup-steps", "1", "--eval-every", "1", "--refresh-every", "1", "--model-name", "realm-bio"]
    result = runner.invoke(app, command)
    assert result.exit_code == 0, result.output
    assert "retrieval utility on held-out sentences by step: 0:" in result.stdout
    assert "guard" in result.stdout
    with session_scope(settings.database_url) as session:
        model = session.scalar(select(ModelVersion).where(ModelVersion.name == "realm-bio"))
        assert model is not None and Path(model.path, "model.safetensors").exists()
        realm = model.metrics["realm"]
        assert [u["step"] for u in realm["utility"]] == [0, 1, 2]
        assert realm["k"] == 2 and realm["refreshes"] >= 1 and realm["failed_refreshes"] == 0
        assert realm["warmup"]["mlm"]["steps"] == 1
        assert "passed" in model.metrics["guard"] and (model.training_config or {})["realm"]["masking"] == "salient"
        job = session.scalar(select(Job).where(Job.kind == "realm_pretrain"))
        assert job is not None and job.state == JobState.SUCCEEDED and (job.result or {})["model"] == "realm-bio"
        job_id = job.id
    backend = EdgeIndexBackend(settings.qdrant_path)
    assert not [c for c in backend.list_collections() if "__realm" in c]  # internal versions are gone
    assert backend.resolve_alias("bio") is None  # the corpus's served alias was never touched
    backend.close()
    listed = runner.invoke(app, ["realm", "status"])
    assert listed.exit_code == 0 and "realm-bio" in listed.stdout and "succeeded" in listed.stdout
    png = tmp_path / "plots" / "ru.png"
    plotted = runner.invoke(app, ["realm", "status", str(job_id), "--plot", str(png)])
    assert plotted.exit_code == 0, plotted.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5_000


def test_too_few_passages_is_one_sentence(
    settings: FerretSettings, tmp_path: Path, make_beir: Callable[..., Path]
) -> None:
    docs = [{"_id": "a", "title": "A", "text": "Oslo is in Norway."}, {"_id": "b", "title": "B", "text": "Oslo."}]
    runner.invoke(app, ["ingest", "--corpus", "two", "--beir", str(make_beir(tmp_path / "two", docs, {}, {}))])
    result = runner.invoke(app, ["realm", "pretrain", "--corpus", "two", "--k", "4", "--steps", "1"])
    assert result.exit_code != 0 or "failed" in result.stdout
    assert "too few to retrieve k=4" in result.output


class Killed(Exception):
    pass


def test_a_killed_run_resumes_from_its_checkpoint(
    tmp_path: Path, tiny_passages: Callable[..., list[CorpusPassage]]
) -> None:
    passages = tiny_passages()
    train, held = split_held_out(SpanMasker("salient").mask(passages, seed=13), 0.2, 13)
    data = RealmData(passages, train, held[:3])
    config = RealmConfig(
        steps=2, k=2, batch_size=2, mlm_warmup_steps=0, refresh_every=1, eval_every=2, checkpoint_every=1
    )

    def kill_after_one(activity: str, fraction: float, counts: dict[str, object]) -> None:
        if counts.get("step") == 1:
            raise Killed

    with pytest.raises(Killed):
        RealmTrainer(config, base_model_path(), data, MatrixRefreshStore(), tmp_path, progress=kill_after_one).run()
    result = RealmTrainer(config, base_model_path(), data, MatrixRefreshStore(), tmp_path).run()
    assert result.resumed_from == 1
    assert len(result.losses) == 2  # one step from before the kill, one after
    assert [u["step"] for u in result.utility] == [0, 2]


def test_a_time_budget_ends_the_run_early_measured_and_checkpointed(
    tmp_path: Path, tiny_passages: Callable[..., list[CorpusPassage]]
) -> None:
    import torch

    passages = tiny_passages()
    train, held = split_held_out(SpanMasker("salient").mask(passages, seed=13), 0.2, 13)
    config = RealmConfig(
        steps=3, k=2, batch_size=2, mlm_warmup_steps=0, refresh_every=1, eval_every=3, checkpoint_every=3
    )
    trainer = RealmTrainer(
        config,
        base_model_path(),
        RealmData(passages, train, held[:3]),
        MatrixRefreshStore(),
        tmp_path,
        time_budget_s=0.0,
    )
    result = trainer.run()
    assert result.steps == 1 and len(result.losses) == 1  # the budget was spent after the first step
    assert [u["step"] for u in result.utility] == [0, 1]  # measured where it stopped, not at step 3
    assert torch.load(trainer.checkpoint_path, weights_only=False)["step"] == 1
