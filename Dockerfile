# syntax=docker/dockerfile:1
# Image of the kafkagen processes in docker-compose.yml: generation consumers, the S3 sink and the
# prompt producer. Runtime dependencies only: no `serve` extra (SGLang runs in its own image) and
# no `local` extra (the compose file's Kafka and MinIO replace the local stack).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    AWS_EC2_METADATA_DISABLED=true

WORKDIR /app
# Only what the package needs is copied (the build context also holds .venv and .local).
# README.m[d]: copied when present (it is the package's long description), skipped otherwise.
COPY pyproject.toml README.m[d] ./
COPY streams ./streams
COPY producers ./producers
COPY consumers ./consumers
COPY sinks ./sinks
COPY launch ./launch
RUN pip install . \
    && useradd --system --uid 10001 --no-create-home kafkagen

USER kafkagen
CMD ["python", "-m", "consumers.generate", "--help"]
