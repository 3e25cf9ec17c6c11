"""Shared test fixtures: bundled data, settings, and the real local services.

Tests that need Kafka, S3 or the llama.cpp servers use the ``stack`` fixture, which runs
``LocalStack.up`` for the services they need (idempotent: a stack started by
``scripts/test.sh`` is reused; otherwise it is started and left running). Topic and bucket
prefixes are unique per test so tests never see each other's data.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from streams.config import Settings
from streams.stack import LocalStack

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA = REPO_ROOT / "data"
"""Public prompt sets shipped with the repository (GSM8K, MT-Bench, BFCL; see data/README.md)."""


@pytest.fixture(scope="session")
def sample_data() -> Path:
    """The bundled sample-data directory (``data/``)."""
    assert DATA.is_dir(), f"bundled data missing at {DATA}"
    return DATA


@pytest.fixture(scope="session")
def base_settings() -> Settings:
    """Settings from the environment (defaults: the local stack's addresses), with the stack's
    home and cache pinned to the repository so tests find the stack wherever pytest runs."""
    s = Settings()
    home = Path(s.stack.home)
    cache = Path(s.stack.cache)
    stack = s.stack.model_copy(
        update={
            "home": str(home if home.is_absolute() else REPO_ROOT / home),
            "cache": str(cache if cache.is_absolute() else REPO_ROOT / cache),
        }
    )
    return s.model_copy(update={"stack": stack})


@pytest.fixture(scope="session")
def local_stack(base_settings: Settings) -> LocalStack:
    return LocalStack(base_settings)


@pytest.fixture(scope="session")
def kafka(local_stack: LocalStack) -> str:
    """Bootstrap address of the running local Kafka broker (started if needed)."""
    local_stack.up(["kafka"])
    return local_stack.address("kafka")


@pytest.fixture(scope="session")
def s3(local_stack: LocalStack) -> str:
    """Endpoint URL of the running local S3 (SeaweedFS), started if needed."""
    local_stack.up(["s3"])
    return local_stack.address("s3")


@pytest.fixture(scope="session")
def llm(local_stack: LocalStack) -> list[str]:
    """Base URLs of the running local llama-server instances, started if needed."""
    local_stack.up(["llm"])
    return [local_stack.address(n) for n in local_stack.names(["llm"])]


@pytest.fixture
def unique() -> str:
    """A short unique token for topic names, groups and S3 prefixes of one test."""
    return uuid.uuid4().hex[:10]


@pytest.fixture
def settings(base_settings: Settings, unique: str) -> Settings:
    """Settings whose topics, run id and S3 prefix are unique to this test."""
    topics = base_settings.topics.model_copy(
        update={
            "prompts": f"prompts-{unique}",
            "completions": f"completions-{unique}",
            "errors": f"errors-{unique}",
            "producer_progress": f"progress-{unique}",
        }
    )
    s3 = base_settings.s3.model_copy(update={"prefix": f"test-{unique}"})
    return base_settings.model_copy(update={"topics": topics, "s3": s3, "run_id": f"run-{unique}"})
