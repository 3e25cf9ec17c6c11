"""Shared test fixtures: bundled data, settings, and the real local services.

Tests that need Kafka, S3 or the llama.cpp servers use the ``kafka``/``s3``/``llm`` fixtures,
which run ``LocalStack.up`` for the services they need (idempotent: a stack started by
``scripts/test.sh`` is reused; otherwise it is started and left running). Topic and bucket
prefixes are unique per test so tests never see each other's data.

Two Kafka shapes: the configured single broker, and a 3-broker cluster beside it
(:func:`launch.stack.cluster_beside`: home ``<home>/cluster3``, brokers on the configured
Kafka port + 2, + 4, + 6, controllers one above each), started on first use, reused by the
session and stopped by ``scripts/test.sh`` (``python -m launch.stack --cluster3 down``). A test
runs on both shapes with ``@broker_shapes()`` (:mod:`tests.helpers`); its ``settings`` then point
at the broker count in the ``brokers`` fixture. ``kafka_cluster_stack`` kills and restarts brokers.
"""

from __future__ import annotations

import fcntl
import os
import sys
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from launch.stack import LocalStack, cluster_beside
from launch.stack.kafka import kafka_broker_ids
from streams.config import Settings
from tests.helpers import port_free

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA = REPO_ROOT / "data"
"""Public prompt sets shipped with the repository (GSM8K, MT-Bench, BFCL; see data/README.md)."""
# The stack's jars, shared by every home a test gives its own stack, wherever pytest runs.
os.environ.setdefault("KAFKAGEN_STACK__CACHE", str(REPO_ROOT / ".local" / "cache"))


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
    home = Path(s.home)
    return s.model_copy(update={"home": str(home if home.is_absolute() else REPO_ROOT / home)})


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
def _cluster3(base_settings: Settings) -> LocalStack:
    """The session's handle on the 3-broker cluster (started by ``kafka_cluster_stack``)."""
    return LocalStack(cluster_beside(base_settings))


@pytest.fixture
def kafka_cluster_stack(_cluster3: LocalStack) -> Iterator[LocalStack]:
    """The tests' 3-broker Kafka cluster (services ``kafka-1`` .. ``kafka-3``), every broker
    running and back in the cluster metadata when the test starts.

    A test that kills a broker (``kafka_cluster_stack.kill("kafka-2")``) starts it again
    (``kafka_cluster_stack.up(["kafka-2"])``) before it ends. A broker found dead or fenced here
    anyway (it died under a test before this one) is started again, or waited for until it is
    back, and the test is warned with the end of its log, so that no test inherits a cluster of
    two. The test holds a lock on the cluster (``<its home>/tests.lock``) from start to end: the
    ``cluster3`` xdist group already runs these tests one at a time, the lock makes sure of it.
    """
    _cluster3.home.mkdir(parents=True, exist_ok=True)
    with (_cluster3.home / "tests.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield _whole(_cluster3)


def _whole(cluster: LocalStack) -> LocalStack:
    """``cluster`` with every broker running and live (see ``kafka_cluster_stack``)."""
    live = kafka_broker_ids(cluster.address("kafka"))  # None: no answer in time (up() waits then)
    procs = cluster.processes
    running = {n.name for n in cluster.kafka_nodes if procs.process(n.name) is not None}
    gone = [  # the end of its log, read before a restart appends to it
        f"{n.name} was {'not live' if n.name in running else 'not running'} in the cluster before this "
        f"test (now back); end of {procs.log_path(n.name)}:\n{procs.tail(n.name, lines=10)}"
        for n in cluster.kafka_nodes
        if n.name not in running or (live is not None and n.node_id not in live)
    ]
    cluster.up(["kafka"])
    for message in gone:
        warnings.warn(message, stacklevel=1)
    return cluster


@pytest.fixture
def kafka_cluster(kafka_cluster_stack: LocalStack) -> str:
    """Bootstrap list of the running 3-broker cluster (started if needed)."""
    return kafka_cluster_stack.address("kafka")


OWN_KAFKA_PORTS = range(29100, 29900, 2)
"""Where ``own_kafka`` puts a broker (its controller one above): below Linux's ephemeral range
(32768-60999) and apart from the shared stack, the 3-broker cluster and the fault audit's ports."""


@pytest.fixture
def own_kafka(settings: Settings, tmp_path: Path) -> Iterator[LocalStack]:
    """A single Kafka broker of this test's own (own home, own ports), running, so that a test can
    stop and restart Kafka without disturbing the tests beside it. Its ``settings`` are the test's
    ``settings`` pointing at it; it is stopped after the test."""
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    mine = OWN_KAFKA_PORTS[worker % 16 :: 16]  # each xdist worker its own ports: no race between them
    ports = [p for p in mine if port_free(p) and port_free(p + 1)]
    if not ports:
        pytest.fail(f"no free port pair for an own Kafka broker in {OWN_KAFKA_PORTS}")
    port = ports[0]
    own = settings.model_copy(
        update={
            "kafka": settings.kafka.model_copy(update={"bootstrap_servers": f"127.0.0.1:{port}"}),
            "home": str(tmp_path / "own-kafka"),
        }
    )
    stack = LocalStack(own)
    stack.up(["kafka"])
    try:
        yield stack
    finally:
        stack.down(["kafka"])


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


# --- tiers and worker groups ----------------------------------------------------------------------
# Each test is marked with one tier, from the fixtures (and markers) it uses, so that
# ``scripts/test.sh`` can run the pure tier first and ``--fast`` only that (docs/testing.md):
#   pure       no service, no child process;
#   services   real Kafka, S3 or llama-server, talked to from the test's own process;
#   processes  kafkagen processes (or simulators) started as children of the test;
#   e2e        the main job end to end (tests/e2e).
# Tests on the shared 3-broker cluster form one xdist group (one worker, one at a time): some kill
# and restart its brokers, which no other test may see. A test that stops a single broker or S3
# does it to a service of its own (``own_kafka``, ``own_s3``), never to the shared stack.

SERVICE_FIXTURES = frozenset(
    {"kafka", "s3", "llm", "local_stack", "kafka_cluster", "kafka_cluster_stack", "own_kafka", "settings"}
)
SERVICE_MARKERS = frozenset({"kafka", "s3", "llm"})
PROCESS_FIXTURES = frozenset(
    {"fleet", "procs", "user_servers", "four_servers", "own_s3", "own_kafka", "own_stack", "pipeline"}
)
PROCESS_HELPERS = (
    "spawn",
    "subprocess",
    "SinkProcess",
    "start_simulator",
    "Fleet",
    "Popen",
    "Supervisor",
    "ProcessManager",
)
"""Names a test module imports when its tests start child processes."""
CLUSTER_FIXTURES = frozenset({"kafka_cluster", "kafka_cluster_stack"})


def tier_of(item: pytest.Item) -> str:
    """The tier of ``item`` (``pure``, ``services``, ``processes`` or ``e2e``), from its path,
    fixtures, markers and module."""
    if "e2e" in Path(str(item.fspath)).relative_to(REPO_ROOT).parts:
        return "e2e"
    fixtures = set(getattr(item, "fixturenames", ()))
    module = getattr(item, "module", None)
    if fixtures & PROCESS_FIXTURES or (module and any(n in vars(module) for n in PROCESS_HELPERS)):
        return "processes"
    if fixtures & SERVICE_FIXTURES or {m.name for m in item.iter_markers()} & SERVICE_MARKERS:
        return "services"
    return "pure"


def on_cluster(item: pytest.Item) -> bool:
    """Whether ``item`` uses the shared 3-broker cluster (a fixture, or ``brokers`` 3)."""
    callspec = getattr(item, "callspec", None)
    three = callspec is not None and callspec.params.get("brokers") == 3
    return three or bool(set(getattr(item, "fixturenames", ())) & CLUSTER_FIXTURES)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's worker reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(getattr(pytest.mark, tier_of(item)))
        if "llm" in getattr(item, "fixturenames", ()):  # the llama.cpp phase of scripts/test.sh
            item.add_marker(pytest.mark.llm)
        if on_cluster(item):
            item.add_marker(pytest.mark.xdist_group("cluster3"))


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """On a ``--dist loadgroup`` worker, refuse to run when the groups are not in effect: pytest-xdist
    groups by a ``@<group>`` suffix it writes into each grouped test's node id
    (``xdist/remote.py``, pytest-xdist 3.8), which pytest 9.2 no longer takes (pytest-xdist issue
    1386). The 3-broker tests would then run beside each other and kill each other's brokers."""
    if not session.config.getoption("loadgroup", default=False):
        return
    lost = [i.nodeid for i in session.items if i.get_closest_marker("xdist_group") and "@" not in i.nodeid]
    if lost:
        message = (
            f"--dist loadgroup is not grouping tests (e.g. {lost[0]} has no @group suffix): "
            f"pytest {pytest.__version__} with this pytest-xdist; install the versions pyproject.toml pins"
        )
        # xdist's controller reports a worker's UsageError as an unrelated INTERNALERROR
        print(f"error: {message}", file=sys.__stderr__, flush=True)
        raise pytest.UsageError(message)
