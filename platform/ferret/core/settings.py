"""Process settings, read from the environment with the ``FERRET_`` prefix.

The embedded default keeps everything under ``FERRET_HOME`` (default ``~/.ferret``): a SQLite database, the
Qdrant Edge shards and the model store, so nothing needs a server. Server mode is chosen per component:
``FERRET_DATABASE_URL`` for PostgreSQL, ``FERRET_QDRANT_URL`` (+ ``FERRET_QDRANT_API_KEY``) for a Qdrant server.

Example:
    >>> settings = FerretSettings(home="/tmp/ferret-demo")
    >>> settings.database_url
    'sqlite:////tmp/ferret-demo/ferret.db'
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ferret.core.corpus.chunking import DEFAULT_PASSAGE_TOKENS
from ferret.core.errors import InvalidInputError

SearchMode = Literal["dense", "sparse", "hybrid"]
QueryEncoderKind = Literal["onnx", "onnx-int8", "torch"]
LLMApi = Literal["completions", "chat"]


class FerretSettings(BaseSettings):
    """Settings shared by the CLI, the API and the workers."""

    model_config = SettingsConfigDict(env_prefix="FERRET_", env_file=None, extra="ignore")

    home: Path = Field(default=Path("~/.ferret"), description="Root folder of the embedded default.")
    database_url_override: str | None = Field(
        default=None,
        validation_alias="FERRET_DATABASE_URL",
        description="SQLAlchemy URL; PostgreSQL in production. Default: SQLite under FERRET_HOME.",
    )
    qdrant_url: str | None = Field(default=None, description="Qdrant server URL; unset = embedded Qdrant Edge.")
    qdrant_api_key: SecretStr | None = Field(default=None, description="API key of the Qdrant server.")
    # Qdrant's distributed mode (server backend only): each new collection (index version) is created with these;
    # unset = the server's own defaults (1 shard per node at creation, replication 1, write consistency 1).
    qdrant_shard_number: int | None = Field(default=None, ge=1, le=1024, description="Shards per collection.")
    qdrant_replication_factor: int | None = Field(default=None, ge=1, le=64, description="Copies of each shard.")
    qdrant_write_consistency_factor: int | None = Field(
        default=None, ge=1, le=64, description="Replicas that must confirm a write before it is acknowledged."
    )

    # Chunking of new corpora: passages of at most this many wordpieces, title included (the base encoder's training
    # length; ferret.core.corpus.chunking says why).
    max_passage_tokens: int = Field(default=DEFAULT_PASSAGE_TOKENS, ge=32, le=510)
    passage_overlap_tokens: int = Field(default=32, ge=0)

    # Encoder.
    base_model: str | None = Field(
        default=None,
        description="Path of the base dual encoder; default: the pinned all-MiniLM-L6-v2 package.",
    )
    device: str | None = Field(default=None, description="torch device; default: cuda when present, else cpu.")
    encode_batch_size: int = Field(default=64, ge=1)
    query_batch_window_ms: float = Field(
        default=2.0,
        ge=0,
        le=1000,
        description="How long the query encoder waits for concurrent searches to batch with (ferret.core.encoder."
        "query_batcher); 0 still batches the queries that arrive while a batch is encoding.",
    )
    query_batch_max: int = Field(default=64, ge=1, le=4096, description="Most queries encoded in one batch.")
    query_encoder: QueryEncoderKind = Field(
        default="onnx",
        description="How searches encode queries: 'onnx' (the model exported to ONNX Runtime at index build, no torch "
        "at search time), 'onnx-int8' (its int8-quantised weights) or 'torch'; a CUDA device always uses torch "
        "(ferret.core.encoder.query_encoder).",
    )
    query_encoder_threads: int = Field(
        default=1,
        ge=0,
        le=256,
        description="ONNX Runtime threads per query batch; 0: one per core. One thread, without spin-waiting, takes "
        "about 20% less CPU per query than two that spin, and a busy server's parallelism comes from its concurrent "
        "requests, not from splitting one small batch (benchmarks/RESULTS.md, issue 16).",
    )
    query_encoder_workers: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Query batches the ONNX tower encodes at once, each in its own thread (as a model server runs "
        "several instances of a model); torch towers encode one batch at a time. On the 2-core AVX-512 VM at 32 "
        "clients one worker gave p99 419-502 ms in five runs of six (635 ms and 88/s in the sixth), two 509-589 ms "
        "in five of five: the second encoder takes the core that the request holding the GIL needs; with searches "
        "taking turns for the shard, two gave 104-112/s and p99 548-549 ms against one's 126-148/s and 342-451 ms. "
        "On the slower AVX2 VM two gave +5% (benchmarks/RESULTS.md, issue 16, eleventh to seventeenth sessions). "
        "Raise it on a machine with cores to spare.",
    )
    reranker_runtime: QueryEncoderKind = Field(
        default="onnx-int8",
        description="How searches score (query, passage) pairs with a configuration's reranker: 'onnx-int8' (ONNX "
        "Runtime, int8 weights), 'onnx' (fp32, the same scores as torch) or 'torch' (ferret.core.rerank."
        "cross_encoder). int8 is the default because its quality cost is nil and it is the only one within issue 12's "
        "300 ms: on SciFact's 300 test queries at depth 10, nDCG@10 71.9 / 66.2 at reranker weight 0.25 / 0.5 "
        "against torch fp32's 71.4 / 66.2, and 246 ms p50 per query against 368 ms (ONNX fp32) and 1,078 ms (torch) "
        "on the shared 2 cores at load 4 (benchmarks/RESULTS.md, issue 12, fourth session). A CUDA device "
        "(FERRET_DEVICE=cuda...) always scores with torch in fp16 on it: 13.6 ms per query at depth 10 on an H100.",
    )
    reranker_threads: int = Field(
        default=2,
        ge=0,
        le=256,
        description="ONNX Runtime threads per reranked query, without spin-waiting; 0: one per core, spinning. "
        "A reranked query is one request's latency: on 2 quiet cores two threads score its 10 pairs in 168 ms p50 "
        "against 282 ms for one (int8), and at load 4 the two were alike (268 and 246 ms); ONNX Runtime's spinning "
        "pool was the slowest (399 ms at load 4) (benchmarks/RESULTS.md, issue 12, fourth session).",
    )
    onnx_cache: Path | None = Field(
        default=None, description="Folder of the ONNX exports of model versions; default: FERRET_HOME/cache/onnx."
    )

    # Index.
    keep_index_versions: int = Field(default=2, ge=1, description="Ready versions kept for rollback.")
    search_mode: SearchMode = "hybrid"
    rrf_k: int = Field(default=60, ge=1, description="Reciprocal rank fusion constant (Cormack et al. 2009).")

    # Ingestion.
    max_file_bytes: int = Field(default=50_000_000, ge=1, description="Larger files are skipped and reported.")

    # Query generator (Promptagator). Nothing leaves the machine unless FERRET_LLM_BASE_URL is set.
    llm_base_url: str | None = Field(
        default=None,
        description="OpenAI-compatible endpoint (vLLM, llama.cpp server, Ollama, TGI, OpenAI), e.g. "
        "http://gpu-box:8000/v1; unset = the embedded generator.",
    )
    llm_model: str | None = Field(default=None, description="Model name on the endpoint; unset = the first it lists.")
    llm_api_key: SecretStr | None = Field(default=None, description="API key of the endpoint; never logged.")
    llm_api: LLMApi = Field(default="completions", description="'completions' (raw prompts, preferred) or 'chat'.")
    llm_concurrency: int = Field(default=4, ge=1, le=256, description="Requests in flight at once.")
    llm_timeout_s: float = Field(default=60.0, gt=0, description="Timeout of one request, in seconds.")
    llm_max_retries: int = Field(default=4, ge=0, le=20, description="Retries on 429, 5xx, timeouts and refusals.")
    llm_logprobs: bool = Field(
        default=True,
        description="Ask the endpoint for token log-probabilities (the filter score of issue 12); off for servers "
        "that refuse the parameter.",
    )
    generator_model: str | None = Field(
        default=None,
        description="Embedded generator: a GGUF file or a transformers model folder; default: the pinned "
        "SmolLM2-135M-Instruct package.",
    )
    generator_batch_size: int | None = Field(
        default=None,
        ge=1,
        description="Prompts per forward pass of the embedded model (and documents per generation call); unset = 8 on "
        "a CPU, 64 on a GPU, where a pass of 8 leaves the device waiting on Python between steps (benchmarks/RESULTS."
        "md, issue 16, fifteenth session).",
    )

    # Workers (Celery). Unset broker = embedded mode: the same task functions run in-process, no broker.
    broker_url: str | None = Field(default=None, description="Celery broker, e.g. redis://redis:6379/0.")
    result_backend_url: str | None = Field(default=None, description="Celery result backend; default: the broker.")
    task_time_limit_s: int = Field(default=6 * 3600, ge=10, description="Hard time limit of one worker task.")
    broker_visibility_timeout_s: int | None = Field(
        default=None,
        ge=1,
        description="Seconds before the Redis broker hands an unacknowledged task (its worker died) to another "
        "worker; default: the task time limit plus 10 minutes, so a running task is never delivered twice.",
    )

    # HTTP API.
    api_max_body_bytes: int = Field(default=16_000_000, ge=1024, description="Larger request bodies get 413.")
    api_max_batch_documents: int = Field(default=1_000, ge=1, description="Documents per push API request.")
    push_sync_max_documents: int = Field(
        default=32,
        ge=0,
        description="Pushes of at most this many documents are embedded inside the request (200, searchable on "
        "return); larger ones are stored in a job and answered 202 (ferret.core.jobs.push_jobs). 0: always a job.",
    )

    @model_validator(mode="after")
    def _distributed_needs_a_server(self) -> FerretSettings:
        """Sharding and replication are a Qdrant server's (cluster's) settings: refused for the embedded store, and
        a write cannot wait for more replicas than there are."""
        distributed = (self.qdrant_shard_number, self.qdrant_replication_factor, self.qdrant_write_consistency_factor)
        if any(value is not None for value in distributed) and not self.qdrant_url:
            raise ValueError(
                "FERRET_QDRANT_SHARD_NUMBER, _REPLICATION_FACTOR and _WRITE_CONSISTENCY_FACTOR need FERRET_QDRANT_URL "
                "(a Qdrant server or cluster); the embedded store has one shard."
            )
        if (self.qdrant_write_consistency_factor or 1) > (self.qdrant_replication_factor or 1):
            raise ValueError("FERRET_QDRANT_WRITE_CONSISTENCY_FACTOR cannot exceed FERRET_QDRANT_REPLICATION_FACTOR.")
        return self

    @field_validator("home")
    @classmethod
    def _expand_home(cls, value: Path) -> Path:
        return value.expanduser()

    @property
    def database_url(self) -> str:
        return self.database_url_override or f"sqlite:///{self.home / 'ferret.db'}"

    @property
    def qdrant_path(self) -> Path:
        return self.home / "qdrant"

    @property
    def models_path(self) -> Path:
        return self.home / "models"

    def ensure_home(self) -> None:
        for path in (self.home, self.qdrant_path, self.models_path):
            try:
                path.mkdir(parents=True, exist_ok=True)
            except OSError as error:  # a file in the way, a read-only or virtual file system, no permission
                reason = error.strerror or type(error).__name__
                raise InvalidInputError(
                    f"FERRET_HOME {self.home} cannot hold Ferret's data ({reason}: {path}); point it at a writable "
                    "folder."
                ) from None


def redacted_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (``redis://:secret@host/0`` → ``redis://:***@host/0``), for a
    server URL that an error message names to a client or a log."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


@lru_cache(maxsize=1)
def get_settings() -> FerretSettings:
    """The process-wide settings, read once from the environment."""
    return FerretSettings()
