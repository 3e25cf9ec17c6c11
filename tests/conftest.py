"""Shared test fixtures: bundled data, settings, and the real local services.

Tests that need Kafka, S3 or the llama.cpp servers use the ``kafka``/``s3``/``llm`` fixtures,
which run ``LocalStack.up`` for the services they need (idempotent: a stack started by
``scripts/test.sh`` is reused; otherwise it is started and left running). Topic and bucket
prefixes are unique per test so tests never see each other's data.

Two Kafka shapes: the configured single broker, and a 3-broker cluster beside it
(:func:`launch.stack.cluster_beside`: home ``<stack.home>/cluster3``, brokers on the configured
Kafka port + 2, + 4, + 6, controllers one above each), started on first use, reused by the
session and stopped by ``scripts/test.sh`` (``python -m launch.stack --cluster3 down``). A test
runs on both shapes with ``@broker_shapes()`` (:mod:`tests.helpers`); its ``settings`` then point
at the broker count in the ``brokers`` fixture. ``kafka_cluster_stack`` kills and restarts brokers.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from launch.stack import LocalStack, cluster_beside
from streams.config import Settings

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


@pytest.fixture(scope="session")
def kafka_cluster_stack(base_settings: Settings) -> LocalStack:
    """The tests' 3-broker Kafka cluster (services ``kafka-1`` .. ``kafka-3``), running and ready.

    A test that kills a broker (``kafka_cluster_stack.kill("kafka-2")``) must start it again
    (``kafka_cluster_stack.up(["kafka-2"])``) before it ends: the cluster is shared by the session.
    """
    stack = LocalStack(cluster_beside(base_settings))
    stack.up(["kafka"])
    return stack


@pytest.fixture(scope="session")
def kafka_cluster(kafka_cluster_stack: LocalStack) -> str:
    """Bootstrap list of the running 3-broker cluster (started if needed)."""
    return kafka_cluster_stack.address("kafka")


@pytest.fixture
def brokers() -> int:
    """Brokers of the Kafka this test's ``settings`` point at: 1, or what ``@broker_shapes()``
    parametrizes (1 and 3)."""
    return 1


@pytest.fixture
def unique() -> str:
    """A short unique token for topic names, groups and S3 prefixes of one test."""
    return uuid.uuid4().hex[:10]


@pytest.fixture
def settings(base_settings: Settings, unique: str, brokers: int, request: pytest.FixtureRequest) -> Settings:
    """Settings whose topics, run id and S3 prefix are unique to this test, on the single broker
    or (``brokers`` 3) on the running 3-broker cluster."""
    if brokers == 3:
        base_settings = request.getfixturevalue("kafka_cluster_stack").settings
    elif brokers != 1:
        raise ValueError(f"the tests have Kafka shapes of 1 and 3 brokers, not {brokers}")
    topics = base_settings.topics.model_copy(
        update={
            "prompts": f"prompts-{unique}",
            "completions": f"completions-{unique}",
            "errors": f"errors-{unique}",
            "control": f"control-{unique}",
            "producer_progress": f"progress-{unique}",
        }
    )
    s3 = base_settings.s3.model_copy(update={"prefix": f"test-{unique}"})
    return base_settings.model_copy(update={"topics": topics, "s3": s3, "run_id": f"run-{unique}"})
