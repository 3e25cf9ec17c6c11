"""``kafkagen runs`` on the real local Kafka and S3: runs made of topics, consumer-group offsets,
producer resume points, control records and S3 folders, listed by ``launch.cli.main`` as a
document (every field) and as a table; a run with only a prompts topic and an S3 folder, one
with an S3 folder only, a replay without a run record; the filter; exit 3 when Kafka or S3
cannot be reached. The rules themselves: ``tests/launch/test_runs_shape.py``."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from dataclasses import dataclass

import msgspec
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from launch.cli import main as cli_main
from launch.status.runs import _list_offsets, _topics
from streams.config import Settings
from streams.control import (
    ControlLog,
    ControlRecord,
    ExportReport,
    GateRecord,
    MemberReport,
    RegenerateRecord,
    RunRecord,
)
from streams.kafka import client_kwargs, consumer_kwargs, end_offsets, producer_kwargs, topic_partitions
from streams.records import ProgressRecord, encode
from streams.runs import naming
from streams.storage import s3_client
from streams.topics import ensure_topics, topic_specs
from tests.helpers import make_prompt, publish, unused_port, wait_for

pytestmark = pytest.mark.timeout(240)


@dataclass(frozen=True)
class World:
    """This test's names: the run ids (``<letter>-<unique>``), the S3 prefix and progress topic
    of its own, and the flags that point ``kafkagen runs`` at them."""

    unique: str
    base: Settings

    def run(self, letter: str) -> Settings:
        return naming.for_run(self.base, f"r{letter}-{self.unique}")

    @property
    def flags(self) -> list[str]:
        return [
            "--s3.prefix",
            self.base.s3.prefix,
            "--topics.producer-progress",
            self.base.topics.producer_progress,
            "--kafka.bootstrap-servers",
            self.base.kafka.bootstrap_servers,
        ]


@pytest.fixture
def world(
    base_settings: Settings, kafka: str, s3: str, unique: str, brokers: int, request: pytest.FixtureRequest
) -> World:
    """This test's world on the single broker, or (``brokers`` 3, :func:`tests.helpers.broker_shapes`)
    on the 3-broker cluster, where partitions have different leaders."""
    if brokers == 3:
        base_settings = request.getfixturevalue("kafka_cluster_stack").settings
    topics = base_settings.topics.model_copy(update={"producer_progress": f"progress-runs-{unique}"})
    s3_settings = base_settings.s3.model_copy(update={"prefix": f"test-runs-{unique}"})
    return World(unique, base_settings.model_copy(update={"topics": topics, "s3": s3_settings}))


async def _control(settings: Settings, *records: ControlRecord) -> None:
    await ensure_topics(settings, [topic_specs(settings)["control"]])
    log = ControlLog(settings)
    await log.start()
    try:
        for record in records:
            await log.publish(record)
    finally:
        await log.stop()


async def _produce(settings: Settings, topic: str, n: int) -> None:
    producer = AIOKafkaProducer(**producer_kwargs(settings.kafka))
    await producer.start()
    try:
        for i in range(n):
            await producer.send(topic, b"{}", key=f"k-{i}".encode(), partition=i % 2)
        await producer.flush()
    finally:
        await producer.stop()


async def _commit(settings: Settings, group: str, offsets: dict[TopicPartition, int]) -> None:
    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka, group_id=group))
    await consumer.start()
    try:
        consumer.assign(list(offsets))
        await consumer.commit(offsets)
    finally:
        await consumer.stop()


async def _ends(settings: Settings, topic: str) -> dict[TopicPartition, int]:
    return {TopicPartition(topic, p): o for p, o in (await end_offsets(settings.kafka, topic)).items()}


async def _progress(settings: Settings, published: int) -> None:
    """One producer resume point of ``settings``'s run on its prompts topic: ``published`` records."""
    t = settings.topics
    await ensure_topics(settings, [topic_specs(settings)["producer_progress"]])
    record = ProgressRecord(
        input="/data/in.jsonl", source="in.jsonl", topic=t.prompts, run_id=settings.run_id, line=published,
        offset=100, digest="0" * 64, published=published, done=True,
    )  # fmt: skip
    producer = AIOKafkaProducer(**producer_kwargs(settings.kafka))
    await producer.start()
    try:
        key = naming.progress_key(t.prompts, settings.run_id, record.input)
        await producer.send_and_wait(t.producer_progress, encode(record), key=key)
    finally:
        await producer.stop()


def _member(settings: Settings, **kw: object) -> MemberReport:
    base: dict[str, object] = {
        "run_id": settings.run_id,
        "instance": "gen-0",
        "incarnation": "i1",
        "host": socket.gethostname(),
        "pid": 1,
        "server": "http://127.0.0.1:30000",
        "model": "reported-model",
        "max_tokens": 1024,
        "at": time.time(),
    }
    return MemberReport(**{**base, **kw})  # type: ignore[arg-type]


def _s3_folder(world: World, run_id: str) -> str:
    """Put one object in ``run_id``'s S3 folder under this test's prefix; the folder."""
    folder = naming.run_folder(world.base.s3.prefix, run_id)
    key = f"{folder}{run_id}.completions/partition=0/{run_id}.completions+0+0000000000.jsonl.zst"
    s3_client(world.base.s3).put_object(Bucket=world.base.s3.bucket, Key=key, Body=b"x")
    return folder


def _runs(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli_main(["runs", *args])
    out, err = capsys.readouterr()
    return code, out, err


@dataclass(frozen=True)
class Made:
    """What :func:`_make_runs` made: a's prompts topic's end offsets, the partition b lags on, the
    S3 folders of d and e."""

    a_prompts: dict[TopicPartition, int]
    behind: TopicPartition
    d_folder: str
    e_folder: str


async def _make_runs(world: World, now: float) -> Made:
    """Runs a (done), b (a replay of a, running), c (halted), d (a prompts topic and an S3 folder),
    e (an S3 folder only), f (a replay of a without a run record)."""
    a, b, c, d, f = (world.run(x) for x in "abcdf")
    # a: 6 prompts, all generated (5 completions, 1 error), all in S3, exported: done
    await publish(a, [make_prompt(i) for i in range(6)])
    await _progress(a, 6)
    await _produce(a, a.topics.completions, 5)
    await _produce(a, a.topics.errors, 1)
    a_prompts = await _ends(a, a.topics.prompts)
    await _commit(a, naming.generate_group(a), a_prompts)
    a_results = {**await _ends(a, a.topics.completions), **await _ends(a, a.topics.errors)}
    await _commit(a, naming.sink_group(a), a_results)
    params = {"model": "qwen3-8b", "max_tokens": 4096, "temperature": 0.6}
    await _control(
        a,
        RunRecord(
            run_id=a.run_id, created_at=now - 300, updated_at=now - 290, by=f"run@{socket.gethostname()}",
            prompts_topic=a.topics.prompts, partitions=len(a_prompts), generation=params,
            servers=["http://127.0.0.1:30000"],
        ),
        _member(a, state="stopped", at=now - 120),
        ExportReport(
            run_id=a.run_id, at=now - 60, ids=6, completions=5, errors=1, missing=0, duplicates_dropped=0,
            destination="/data/a", host="h",
        ),
    )  # fmt: skip

    # b: a replay of a, its run record names the parent; a live consumer, one regeneration
    await ensure_topics(b, [topic_specs(b)[r] for r in ("completions", "errors")])
    await _produce(b, b.topics.completions, 2)
    behind = next(tp for tp, o in a_prompts.items() if o > 0)
    await _commit(b, naming.generate_group(b), {**a_prompts, behind: 0})
    await _control(
        b,
        RunRecord(
            run_id=b.run_id, parent=a.run_id, created_at=now - 200, updated_at=now - 200, by="replay@h",
            prompts_topic=a.topics.prompts, partitions=len(a_prompts),
            generation={"model": "qwen3-32b", "max_tokens": 8192},
        ),
        # its host's clock 20 s ahead (a report carries the reporter's clock): live for the
        # whole test however loaded the machine is
        _member(b, at=time.time() + 20),
        RegenerateRecord(
            run_id=b.run_id, digest="d1", where={"flag": "truncated"}, overrides={"max_tokens": 16384},
            ids=2, attempts={"1": 2}, at=now - 30, by="regenerate@h",
        ),
    )  # fmt: skip

    # c: halted by its gate, though a consumer still reports
    await publish(c, [make_prompt(i) for i in range(2)])
    await _control(
        c,
        _member(c, state="halted"),
        GateRecord(
            run_id=c.run_id, state="halted", epoch=0, at=now - 5, by="gen-0",
            reason="all 1024 tokens went to reasoning", fix="raise --max-tokens",
        ),
    )  # fmt: skip

    # d: a prompts topic and an S3 folder, nothing else (made of hand-started pieces)
    await ensure_topics(d, [topic_specs(d)["prompts"]])
    await _produce(d, d.topics.prompts, 3)
    d_folder = _s3_folder(world, d.run_id)
    # e: an S3 folder only (its topics deleted)
    e_folder = _s3_folder(world, f"re-{world.unique}")
    # f: a replay of a without a run record: its group committed on a's prompts topic
    await ensure_topics(f, [topic_specs(f)["completions"]])
    await _commit(f, naming.generate_group(f), {behind: 1})
    return Made(a_prompts, behind, d_folder, e_folder)


def test_runs_are_listed_with_every_field_as_json_and_as_a_table(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    now = time.time()
    made = asyncio.run(_make_runs(world, now))
    a_prompts, behind = made.a_prompts, made.behind
    a, b, c, d, f = (world.run(x) for x in "abcdf")
    e_id = f"re-{world.unique}"
    params = {"model": "qwen3-8b", "max_tokens": 4096, "temperature": 0.6}

    code, out, err = _runs(capsys, "--json", f"r?-{world.unique}", *world.flags)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["schema_version"] == 1 and doc["not_found"] == []
    assert doc["kafka"] == world.base.kafka.bootstrap_servers
    assert doc["s3"] == {
        "bucket": world.base.s3.bucket, "prefix": world.base.s3.prefix, "listed": True, "error": None,
    }  # fmt: skip
    assert doc["at"] >= now
    runs = {r["run_id"]: r for r in doc["runs"]}
    assert set(runs) == {a.run_id, b.run_id, c.run_id, d.run_id, e_id, f.run_id}
    assert [r["run_id"] for r in doc["runs"]][:2] == [a.run_id, b.run_id], "oldest first"

    ra = runs[a.run_id]
    assert (ra["state"], ra["parent"], ra["created_at"], ra["created_from"]) == (
        "done", None, now - 300, "run_record",
    )  # fmt: skip
    assert ra["last_activity_at"] == now - 60
    assert ra["known_from"] == ["run_record", "topics"]
    assert (ra["by"], ra["prompts_topic"], ra["partitions"]) == (
        f"run@{socket.gethostname()}", a.topics.prompts, len(a_prompts),
    )  # fmt: skip
    assert (ra["params"], ra["params_from"], ra["servers"]) == (
        params,
        "run_record",
        ["http://127.0.0.1:30000"],
    )
    assert ra["counts"] == {
        "published": 6, "published_exact": True, "results": 6, "completions": 5, "errors": 1, "in_s3": 6,
        "exported": 6, "remaining": 0, "regenerated": 0,
    }  # fmt: skip
    assert ra["lag"] == {"prompts": 0, "sink": 0}
    assert ra["members"] == {"reported": 1, "live": 0}
    assert ra["gate"] == {"state": "running", "epoch": 0, "reason": "", "fix": "", "at": None, "breaches": []}
    assert ra["export"] == {
        "run_id": a.run_id, "at": now - 60, "ids": 6, "completions": 5, "errors": 1, "missing": 0,
        "duplicates_dropped": 0, "destination": "/data/a", "host": "h",
    }  # fmt: skip
    assert (ra["regenerations"], ra["regenerated_prompts"], ra["s3_folder"]) == (0, 0, None)

    rb = runs[b.run_id]
    assert (rb["state"], rb["parent"], rb["created_at"], rb["by"]) == (
        "running",
        a.run_id,
        now - 200,
        "replay@h",
    )
    assert (rb["prompts_topic"], rb["params"]) == (
        a.topics.prompts,
        {"model": "qwen3-32b", "max_tokens": 8192},
    )
    assert rb["servers"] == ["http://127.0.0.1:30000"], "no fleet record, none in the run record: reported"
    # its parent's prompts, published under the parent, and its regenerate record's; its own results and lag
    assert rb["counts"] == {
        "published": 8, "published_exact": True, "results": 2, "completions": 2, "errors": 0, "in_s3": 0,
        "exported": None, "remaining": 6, "regenerated": 2,
    }  # fmt: skip
    assert rb["lag"] == {"prompts": a_prompts[behind], "sink": 2}
    assert rb["members"] == {"reported": 1, "live": 1}
    assert (rb["regenerations"], rb["regenerated_prompts"]) == (1, 2)
    assert rb["last_activity_at"] >= now

    rc = runs[c.run_id]
    assert rc["state"] == "halted", "the gate wins over a live report"
    assert rc["gate"] == {
        "state": "halted", "epoch": 0, "reason": "all 1024 tokens went to reasoning",
        "fix": "raise --max-tokens", "at": now - 5, "breaches": [],
    }  # fmt: skip
    assert (rc["parent"], rc["by"], rc["created_from"], rc["known_from"]) == (
        None,
        None,
        "first_record",
        ["topics"],
    )
    assert now - 60 < rc["created_at"] <= time.time()
    assert (rc["params"], rc["params_from"]) == (
        {"model": "reported-model", "max_tokens": 1024},
        "member_report",
    )
    assert rc["servers"] == ["http://127.0.0.1:30000"]
    assert rc["counts"]["published"] == 2 and rc["counts"]["published_exact"] is False
    assert rc["lag"] == {"prompts": 2, "sink": 0}

    rd = runs[d.run_id]
    assert (rd["state"], rd["parent"], rd["known_from"], rd["s3_folder"]) == (
        "idle",
        None,
        ["topics", "s3"],
        made.d_folder,
    )
    assert (rd["prompts_topic"], rd["created_from"], rd["partitions"]) == (
        d.topics.prompts,
        "first_record",
        7,
    )
    assert rd["counts"] == {
        "published": 3, "published_exact": False, "results": 0, "completions": 0, "errors": 0, "in_s3": 0,
        "exported": None, "remaining": 3, "regenerated": 0,
    }  # fmt: skip
    assert rd["lag"] == {"prompts": 3, "sink": 0}
    assert (rd["params"], rd["servers"], rd["members"], rd["last_activity_at"]) == (
        {},
        [],
        {"reported": 0, "live": 0},
        None,
    )

    re = runs[e_id]
    assert (re["state"], re["known_from"], re["s3_folder"], re["created_from"]) == (
        "idle",
        ["s3"],
        made.e_folder,
        "s3",
    )
    assert now - 60 < re["created_at"] <= time.time() + 5
    assert (re["counts"], re["lag"], re["prompts_topic"], re["parent"]) == (None, None, None, None)

    rf = runs[f.run_id]
    assert (rf["state"], rf["parent"], rf["prompts_topic"]) == ("idle", a.run_id, a.topics.prompts)
    assert rf["counts"]["published"] == 6 and rf["counts"]["published_exact"] is True, "the parent's"
    assert rf["lag"]["prompts"] == 6 - 1

    # the table: one row per run, oldest first, the halt's reason and fix below
    code, out, err = _runs(capsys, f"r?-{world.unique}", *world.flags)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["run", "state", "created", "parent"]
    rows = {line.split()[0]: line.split() for line in lines[1:7]}
    assert {r: v[1] for r, v in rows.items()} == {
        a.run_id: "done", b.run_id: "running", c.run_id: "halted", d.run_id: "idle", e_id: "idle",
        f.run_id: "idle",
    }  # fmt: skip
    assert rows[b.run_id][4:7] == [a.run_id, "qwen3-32b", "8192"]
    assert rows[a.run_id][7:14] == ["6", "6", "1", "0", "6", "6", "0"]
    assert (
        f"{c.run_id} halted (gate epoch 0): all 1024 tokens went to reasoning; fix: raise --max-tokens"
        in lines
    )

    # without a filter: every run of the cluster, these among them
    code, out, err = _runs(capsys, "--json", *world.flags)
    assert code == 0, err
    every = {r["run_id"]: r["state"] for r in json.loads(out)["runs"]}
    assert {r: every.get(r) for r in runs} == {r: v["state"] for r, v in runs.items()}


def test_a_run_asked_for_that_does_not_exist_exits_1_and_the_others_are_listed(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    a = world.run("a")
    asyncio.run(publish(a, [make_prompt(0)]))
    missing = f"nothing-{world.unique}"
    code, out, err = _runs(capsys, "--json", a.run_id, missing, *world.flags)
    assert code == 1
    assert [r["run_id"] for r in json.loads(out)["runs"]] == [a.run_id]
    assert json.loads(out)["not_found"] == [missing]
    prefix = world.base.s3.prefix
    assert f"error: no run {missing!r} on Kafka at {world.base.kafka.bootstrap_servers} nor in s3://" in err
    assert f"/{prefix}/" in err


def test_kafka_unreachable_exits_3_and_s3_unreachable_lists_kafkas_runs_and_exits_3(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    code, out, err = _runs(
        capsys, "--json", *world.flags, "--kafka.bootstrap-servers", f"127.0.0.1:{unused_port()}"
    )
    assert code == 3 and out == ""
    assert err.startswith("error: Kafka at 127.0.0.1:") and "aiokafka" not in err
    assert time.monotonic() - started < 30

    d = world.run("d")
    asyncio.run(publish(d, [make_prompt(0)]))
    nowhere = f"http://127.0.0.1:{unused_port()}"
    code, out, err = _runs(capsys, "--json", d.run_id, *world.flags, "--s3.endpoint-url", nowhere)
    assert code == 3
    doc = json.loads(out)
    assert [r["run_id"] for r in doc["runs"]] == [d.run_id], "what Kafka knows is still listed"
    assert doc["s3"]["listed"] is False and nowhere in doc["s3"]["error"]
    assert "warning: runs known only from S3 are not listed" in err
    # --no-s3: Kafka's runs only, by choice
    code, out, err = _runs(capsys, "--json", d.run_id, *world.flags, "--s3.endpoint-url", nowhere, "--no-s3")
    assert code == 0, err
    assert json.loads(out)["s3"] == {
        "bucket": world.base.s3.bucket, "prefix": world.base.s3.prefix, "listed": False, "error": None,
    }  # fmt: skip


def test_a_bucket_that_does_not_exist_exits_1_with_kafkas_runs_listed(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    d = world.run("d")
    asyncio.run(publish(d, [make_prompt(0)]))
    bucket = f"no-such-bucket-{world.unique}"
    code, out, err = _runs(capsys, "--json", d.run_id, *world.flags, "--s3.bucket", bucket)
    assert code == 1, err
    doc = json.loads(out)
    assert [r["run_id"] for r in doc["runs"]] == [d.run_id]
    assert doc["s3"]["listed"] is False and "NoSuchBucket" in doc["s3"]["error"]
    assert f"create bucket {bucket!r}" in err


async def test_a_topic_deleted_while_listing_is_left_out_at_once(world: World) -> None:
    """Metadata read before a run's topics were deleted (a clean-up meanwhile): their offsets are
    left out, the others read, without waiting for a request timeout (aiokafka's ``end_offsets``
    would wait for the deleted topic's metadata, then fail the whole listing)."""
    gone, kept = world.run("g"), world.run("k")
    await publish(gone, [make_prompt(0)], partition=0)
    await publish(kept, [make_prompt(i) for i in range(3)], partition=0)
    admin = AIOKafkaAdminClient(**client_kwargs(world.base.kafka, role="test"))
    await admin.start()
    try:
        leaders = await _topics(admin)
        await admin.delete_topics([gone.topics.prompts])

        gone_tp = TopicPartition(gone.topics.prompts, 0)

        async def deleted() -> bool:
            # The broker applies the deletion a moment later, and its metadata forgets the topic
            # before its log is removed: until then ListOffsets still answers for the partition.
            if await topic_partitions(world.base.kafka, gone.topics.prompts):
                return False
            return gone_tp not in await _list_offsets(admin, leaders, [gone_tp], -1)

        await wait_for(deleted, timeout_s=30, what=f"{gone.topics.prompts} deleted")
        asked = [gone_tp, TopicPartition(kept.topics.prompts, 0)]
        started = time.monotonic()
        found = await _list_offsets(admin, leaders, asked, -1)
        assert time.monotonic() - started < 5
        assert found == {TopicPartition(kept.topics.prompts, 0): (3, -1)}
    finally:
        await admin.close()


def test_a_replay_of_a_regenerated_run_counts_the_parent_s_regenerations(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 25 item 10: a replay reads its parent's prompts topic, regenerated attempts included;
    with 4 results of 4 + 2 published, ``status`` and ``runs`` of the replay say 2 remain (they
    said 0, and the ETA 0)."""
    a = world.run("a")
    b = naming.for_run(world.base, f"rb-{world.unique}", replay_of=a.run_id)
    now = time.time()

    async def make() -> None:
        await publish(a, [make_prompt(i) for i in range(4)])
        await _progress(a, 4)
        again = [msgspec.structs.replace(make_prompt(i), attempt=1) for i in range(2)]
        await publish(a, again)  # what regenerate re-published: new attempts of 2 ids
        await _control(
            a,
            RegenerateRecord(
                run_id=a.run_id, digest="d1", where={"flag": "truncated"}, overrides={"max_tokens": 16384},
                ids=2, attempts={"1": 2}, at=now - 30, by="regenerate@h",
            ),
        )  # fmt: skip
        await ensure_topics(b, [topic_specs(b)[r] for r in ("completions", "errors")])
        await _produce(b, b.topics.completions, 4)
        await _control(
            b,
            RunRecord(
                run_id=b.run_id, parent=a.run_id, created_at=now - 20, updated_at=now - 20, by="replay@h",
                prompts_topic=a.topics.prompts, partitions=7,
            ),
        )  # fmt: skip

    asyncio.run(make())
    flags = world.flags
    assert cli_main(["status", "--run-id", b.run_id, "--json", *flags[2:]]) == 0
    prompts = json.loads(capsys.readouterr().out)["prompts"]
    assert (prompts["published"], prompts["regenerated"], prompts["remaining"]) == (6, 2, 2), prompts
    code, out, _ = _runs(capsys, b.run_id, "--json", *flags)
    assert code == 0, out
    (row,) = json.loads(out)["runs"]
    assert (row["counts"]["published"], row["counts"]["remaining"]) == (6, 2), row
    assert row["state"] != "done", row
