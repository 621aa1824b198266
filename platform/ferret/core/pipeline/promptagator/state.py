"""What a Promptagator pipeline is asked to do (``PipelineConfig``) and what it has done so far (``PipelineState``).

Both serialise to JSON: the state is the Celery payload that travels from stage to stage (llm → cpu → gpu queues)
and is saved in the job row, so a stage redelivered after its worker died finds ids, never live objects.

Example:
    >>> state = PipelineState.start(task, PipelineConfig(max_steps=20), model_name="faq-job7", job_id=7)
    >>> PipelineState.from_json(state.to_json()) == state
    True
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

from ferret.core.db.models import RetrievalTask
from ferret.core.errors import InvalidInputError

PromoteMode = Literal["auto", "force", "never"]
PROMOTE_MODES: tuple[PromoteMode, ...] = ("auto", "force", "never")


@dataclass(frozen=True)
class PipelineConfig:
    """JSON-serialisable; stored with the model version it produced."""

    queries_per_doc: int | None = None
    max_documents: int | None = None
    round_trip: str = "base"
    """Retriever of the round-trip filter: none, bm25, base, hybrid (what search runs now: the corpus's active
    configuration, else the default fusion over its active index), or the name of a model version (Promptagator's
    own recipe filters with a retriever trained on the unfiltered pairs). ``base`` reads the base model's live index
    of the corpus when there is one instead of embedding the corpus again."""
    logprob_quantile: float | None = None
    """Drop the queries whose generator log-probability is below this quantile of the run's own queries (issue 12
    item 5); None: off."""
    basic_filters: bool = True
    """Length, copy and duplicate filters; off for the 'unfiltered' baseline."""
    round_trip_k: int | None = None
    """Keep (q, d) when d is in q's top K. None: K follows the task's examples, the smallest depth at which three in
    four of them find their own document, 10 to 100 (``ferret.core.synth.filters.round_trip_depth``). Promptagator
    keeps top 1 with its own retriever; with the small embedded generator K=10 beat K=1 on SciFact, and on NFCorpus's
    topics K=100 kept three times K=10's pairs for the same test figures (benchmarks/RESULTS.md)."""
    best_of_n: bool = False
    held_out_fraction: float = 0.1
    learning_rate: float = 1e-5
    max_steps: int | None = None
    batch_size: int | None = None
    base_weight: float = 0.5
    """WiSE-FT: the saved weights are this share of the base model's plus the rest of the fine-tuned ones; 0.5 keeps
    most of the gain of small synthetic training sets without forgetting the base model's broad retrieval."""
    hard_negatives: Literal["none", "bm25", "residual"] = "none"
    """BM25 hard negatives: each pair also gets a high BM25 passage that is not its own document; ``residual`` adds
    CLEAR's margin that grows where BM25 fails (``ferret.core.training.residual``), since search fuses with BM25."""
    cropping_warmup_steps: int = 0
    """Label-free warm-up steps on independent-cropping pairs of the corpus (Contriever) before training."""
    init: str | None = None
    """``realm:<model>``: fine-tune a REALM-pre-trained model version (``ferret realm pretrain``) instead of the base
    model; it is also the model WiSE-FT averages with."""
    promote: PromoteMode = "auto"
    model_name: str | None = None
    seed: int = 13
    configure: bool = True
    """Issue 12: after the index stage, tune a search configuration (fusion weight from the task's evidence) around
    the retriever and let the configuration guard decide whether it replaces the active one."""
    reranker: bool = False
    """Also train a cross-encoder reranker on the kept pairs (at least 200) for the configuration; off by default:
    its ≥ 600 steps of 128 pairs took 49 s on an H100 and would take hours on 2 CPU cores (scoring alone runs at
    ~11 pairs/s there), and the trained one has not beaten the first stage yet (benchmarks/RESULTS.md, issue 12)."""
    distill: bool = False
    """GPL (issue 12 item 4): when the configuration keeps its reranker, distil it into the retriever (margin-MSE
    over negatives mined from the first stage), index the student and keep it if the guard prefers it
    (``ferret.core.pipeline.promptagator.distill``). Needs ``reranker``: it is the teacher."""

    expand: bool = False
    """doc2query-- (issue 12 item 6): append each training document's kept queries to its BM25 vectors in a new
    index version of the retriever, and keep that version in the configuration if the guard prefers it
    (``ferret.core.pipeline.promptagator.expand``). Off by default: it costs a second index build, and on SciFact it
    bought +0.2 nDCG@10 for BM25 and nothing once fused (benchmarks/RESULTS.md, issue 12)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PipelineConfig:
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise InvalidInputError(f"Unknown pipeline settings: {', '.join(sorted(unknown))}.")
        return cls(**data).validated()

    def validated(self) -> PipelineConfig:
        """Itself, after the checks a queued job needs before it is accepted (a worker fails late and far away)."""
        if self.promote not in PROMOTE_MODES:
            raise InvalidInputError(f"Promote must be one of {', '.join(PROMOTE_MODES)}, not {self.promote!r}.")
        if self.hard_negatives not in ("none", "bm25", "residual"):
            raise InvalidInputError(
                f"Hard negatives must be 'none', 'bm25' or 'residual', not {self.hard_negatives!r}."
            )
        if not 0.0 <= self.held_out_fraction < 1.0:
            raise InvalidInputError("The held-out fraction must be at least 0 and below 1.")
        if not 0.0 <= self.base_weight <= 1.0:
            raise InvalidInputError("The base weight must be between 0 and 1.")
        if self.logprob_quantile is not None and not 0.0 < self.logprob_quantile < 1.0:
            raise InvalidInputError("The log-probability quantile must be above 0 and below 1.")
        if self.round_trip_k is not None and self.round_trip_k < 1:
            raise InvalidInputError("The round-trip K must be at least 1.")
        if self.distill and not self.reranker:
            raise InvalidInputError("Distillation needs the reranker (--reranker): it is the teacher.")
        if self.distill and not self.configure:
            raise InvalidInputError(
                "Distillation is part of the configuration stage; it cannot run with configure off."
            )
        if self.expand and not self.configure:
            raise InvalidInputError("Expansion is part of the configuration stage; it cannot run with configure off.")
        if self.cropping_warmup_steps < 0:
            raise InvalidInputError("The cropping warm-up steps must be at least 0.")
        if self.init is not None and (not self.init.startswith("realm:") or not self.init[len("realm:") :]):
            raise InvalidInputError(f"--init must be realm:<model version>, not {self.init!r}.")
        for name in ("max_steps", "batch_size", "max_documents"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise InvalidInputError(f"{name.replace('_', ' ').capitalize()} must be at least 1.")
        return self

    @property
    def init_model(self) -> str | None:
        """The model version named by ``init`` (``realm:<model>``), or None for the base model."""
        return self.init[len("realm:") :] if self.init else None


@dataclass(frozen=True)
class PipelineState:
    """Ids and small reports handed from one stage to the next; every field is plain JSON.

    ``key`` identifies this pipeline run: a stage that finds a model version carrying the same key knows that it
    is a redelivery of its own work and reuses it instead of training a second one.
    """

    task_id: int
    task: str
    config: PipelineConfig
    model_name: str
    key: str
    job_id: int | None = None
    reference_model: str | None = None
    """The model the guard compares against: the corpus's active one when the pipeline started."""
    run_id: int | None = None
    filters: dict[str, Any] | None = None
    guard: dict[str, Any] | None = None
    promoted: bool = False
    index_version_id: int | None = None
    search_config: dict[str, Any] | None = None
    """The configuration stage's outcome: the configuration's version, its parts, the guard's decision."""
    seconds: dict[str, float] = field(default_factory=dict)

    @classmethod
    def start(
        cls,
        task: RetrievalTask,
        config: PipelineConfig,
        *,
        model_name: str,
        job_id: int | None = None,
        reference_model: str | None = None,
    ) -> PipelineState:
        return cls(
            task_id=task.id,
            task=task.name,
            config=config,
            model_name=model_name,
            key=uuid.uuid4().hex,
            job_id=job_id,
            reference_model=reference_model,
        )

    def advance(self, stage: str, seconds: float, **changes: Any) -> PipelineState:
        """A copy with ``changes`` and the stage's wall seconds recorded."""
        return replace(self, seconds={**self.seconds, stage: round(seconds, 3)}, **changes)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["config"] = self.config.to_json()
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PipelineState:
        values = dict(data)
        values["config"] = PipelineConfig.from_json(dict(values["config"]))
        values["seconds"] = dict(values.get("seconds") or {})
        known = {f.name for f in fields(cls)}
        return cls(**{name: value for name, value in values.items() if name in known})
