# ctxsim: the Prefect server, workers and flows all run from this one image, so the Prefect
# version and the flow code are the same everywhere.  Build: docker build -t ctxsim:latest .
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    DO_NOT_TRACK=1 \
    PREFECT_SERVER_ANALYTICS_ENABLED=false \
    TOKENIZERS_PARALLELISM=false

# Extras: gpu (faiss-gpu), scale (prefect-dask, prefect-ray). The default PyPI torch wheel
# carries CUDA, so the same image serves CPU and GPU workers.
ARG EXTRAS=gpu,scale

RUN useradd --create-home --uid 1000 ctxsim
WORKDIR /opt/ctxsim
COPY pyproject.toml README.md ./
COPY flows ./flows
COPY tasks ./tasks
COPY models ./models
COPY store ./store
COPY readers ./readers
COPY scores ./scores
RUN pip install ".[${EXTRAS}]"
COPY configs ./configs
COPY data/sample ./data/sample
COPY prefect.yaml ./
RUN mkdir -p /opt/ctxsim/data/artefacts && chown -R ctxsim:ctxsim /opt/ctxsim

USER ctxsim
CMD ["ctxsim", "--help"]
