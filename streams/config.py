"""Settings: one frozen object, read from ``KAFKAGEN_*`` environment variables, overridable by CLI flags.

Precedence (highest first): CLI flags, environment variables, ``.env`` is not read, defaults.
Nested groups use ``__`` in the environment and ``.`` on the command line::

    KAFKAGEN_KAFKA__BOOTSTRAP_SERVERS=broker:9092      --kafka.bootstrap-servers broker:9092
    KAFKAGEN_S3__BUCKET=my-bucket                      --s3.bucket my-bucket
    KAFKAGEN_GENERATION__MAX_TOKENS=8192               --generation.max-tokens 8192

Secrets (Kafka SASL password, S3 secret key) are :class:`pydantic.SecretStr`: their ``repr``
and ``str`` print ``**********``, so logging a settings object never leaks them.
Settings are parsed by pydantic-settings (https://docs.pydantic.dev/latest/concepts/pydantic_settings/).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Final, Literal, TypeVar

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, CliApp, CliSettingsSource, SettingsConfigDict, SettingsError

from streams.environment import ENV_PREFIX, unknown_environment
from streams.errors import ConfigError
from streams.records import extra_body_problem, output_constraint_problem
from streams.runs import naming

__all__ = [
    "COMMON_SETTINGS",
    "ENV_PREFIX",
    "ConsumerSettings",
    "GateSettings",
    "GenerationSettings",
    "GroupMemberSettings",
    "KafkaSettings",
    "KeyBy",
    "ProducerSettings",
    "S3Settings",
    "Settings",
    "SettingsT",
    "SinkSettings",
    "TopicSettings",
    "check_server_url",
    "load_settings",
]


_FROZEN = ConfigDict(frozen=True, extra="forbid")


class KafkaSettings(BaseModel):
    """How every Kafka client connects. Security settings pass through to aiokafka unchanged
    (aiokafka ``AIOKafkaClient`` arguments of the same names)."""

    model_config = _FROZEN

    bootstrap_servers: str = Field("127.0.0.1:9092", description="comma-separated host:port list")
    client_id: str = Field("kafkagen", description="client id prefix seen in broker logs")
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_cafile: str | None = Field(None, description="path of a PEM CA bundle for TLS")
    ssl_certfile: str | None = Field(None, description="client certificate (mutual TLS)")
    ssl_keyfile: str | None = Field(None, description="client private key (mutual TLS)")
    max_message_bytes: int = Field(
        4 * 1024 * 1024,
        description="largest record in bytes: the topics' max.message.bytes and the clients' request "
        "and fetch sizes are all set from this one value",
        gt=0,
    )


class TopicSettings(BaseModel):
    """Topic names and layout (their configs: :mod:`streams.topics`). A name left ``""`` is derived
    from the run id (:mod:`streams.runs.naming`, ``docs/runs.md``); a name set here wins."""

    model_config = _FROZEN

    prompts: str = Field(
        "", description="PromptRecords; empty: <run id>.prompts, or <replay_of>.prompts for a replay"
    )
    completions: str = Field("", description="CompletionRecords; empty: <run id>.completions")
    errors: str = Field("", description="the dead-letter topic: ErrorRecords; empty: <run id>.errors")
    control: str = Field(
        "", description="compacted: the run's quality gate and members' reports; empty: <run id>.control"
    )
    producer_progress: str = Field(
        "kafkagen-producer-progress", description="compacted topic: the prompt producer's resume points"
    )
    partitions: int = Field(7, gt=0, description="partitions of prompts/completions/errors")
    replication_factor: int | None = Field(
        None,
        gt=0,
        description="replicas of each topic kafkagen creates; unset: 3 on a cluster of 3 or more live "
        "brokers, else the number of live brokers (decided when the topic is created); "
        "min.insync.replicas follows: 2 from 3 replicas up, else 1",
    )


class S3Settings(BaseModel):
    """Where the sink writes. Addressing is path-style (works with SeaweedFS, MinIO and AWS)."""

    model_config = _FROZEN

    endpoint_url: str | None = Field("http://127.0.0.1:8333", description="None means AWS itself")
    region: str = "us-east-1"
    bucket: str = "kafkagen"
    prefix: str = "runs"
    access_key_id: str = "kafkagen"
    secret_access_key: SecretStr = SecretStr("kafkagen-secret")


class GenerationSettings(BaseModel):
    """Default generation parameters; any PromptRecord may override them per record.

    ``max_tokens`` counts reasoning **and** answer tokens together (SGLang
    ``max_completion_tokens`` semantics, docs/sglang.md), so it must leave room for both.
    """

    model_config = _FROZEN

    model: str = Field("default", description="the `model` field sent to the server")
    max_tokens: int = Field(4096, gt=0, description="tokens: reasoning + answer")
    temperature: float = Field(0.6, ge=0.0)
    top_p: float = Field(0.95, gt=0.0, le=1.0)
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=lambda: {"enable_thinking": True},
        description="SGLang chat template switches; thinking is on unless turned off here",
    )
    separate_reasoning: bool = True
    response_format: dict[str, Any] | None = Field(
        None,
        description='every answer JSON: {"type": '
        '"json_object"} or {"type": "json_schema", "json_schema": {"name": ..., "schema": {...}}}',
    )
    regex: str | None = Field(None, description="SGLang: every answer must match this regular expression")
    ebnf: str | None = Field(None, description="SGLang: every answer must follow this EBNF grammar")
    top_k: int | None = Field(None, description="sample from the k most likely tokens (-1 or unset: all)")
    min_p: float | None = Field(None, ge=0.0, le=1.0, description="drop tokens under min_p x the top one")
    repetition_penalty: float | None = Field(None, gt=0.0, description="SGLang: >1 discourages repeats")
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0, description="OpenAI: per prior use")
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0, description="OpenAI: once a token is used")
    stop: list[str] | None = Field(None, description="strings that end the answer (not included)")
    seed: int | None = Field(None, description="sampling seed of every request (a row's seed wins)")
    logprobs: bool = Field(False, description="keep each output token's log probability in the completion")
    top_logprobs: int | None = Field(
        None, ge=0, le=20, description="with logprobs: the k likeliest tokens too"
    )
    extra_body: dict[str, Any] | None = Field(
        None,
        description="more request fields sent verbatim, e.g. '{\"stop_token_ids\": [7]}'; each must be "
        "a field of SGLang's chat request (misspelt ones are refused, not ignored)",
    )

    @model_validator(mode="after")
    def _one_output_constraint(self) -> GenerationSettings:
        problem = output_constraint_problem(self.response_format, self.regex, self.ebnf)
        if problem is None and self.extra_body is not None:
            problem = extra_body_problem(self.extra_body)
        if problem is not None:
            raise ValueError(problem)
        return self

    def with_budget(self, max_tokens: int | None = None, thinking: bool | None = None) -> GenerationSettings:
        """A copy with ``max_tokens`` (tokens) and thinking (``chat_template_kwargs.enable_thinking``,
        the other switches kept) replaced; None keeps the value. No validation runs on the copy
        (``model_copy``): ``max_tokens`` must already be > 0, as the command lines make sure."""
        update: dict[str, Any] = {}
        if max_tokens is not None:
            update["max_tokens"] = max_tokens
        if thinking is not None:
            update["chat_template_kwargs"] = {**self.chat_template_kwargs, "enable_thinking": thinking}
        return self.model_copy(update=update)


KeyBy = Literal["balanced", "id", "prefix"]
"""How the prompt producer picks a record's partition (see :mod:`producers.partitioning`)."""


class ProducerSettings(BaseModel):
    """The prompt producer (``python -m producers.prompts``)."""

    model_config = _FROZEN

    key_by: KeyBy = Field(
        "balanced",
        description="how a prompt's partition is picked (the Kafka key is always the id): balanced "
        "deals each input's lines round-robin (equal counts per partition), id hashes the id like "
        "Kafka's default partitioner, prefix hashes the shared prefix (system prompt + tools) so "
        "prompts sharing it reach the same server's prefix cache",
    )
    checkpoint_every: int = Field(
        20000,
        gt=0,
        description="records per Kafka transaction; each commit also writes the resume point to the "
        "progress topic (bigger: faster, more re-sent after a crash)",
    )
    checkpoint_interval_s: float = Field(
        10.0,
        gt=0,
        description="seconds a transaction may stay open before it is committed early (slow inputs, "
        "the rate limit); must be below a third of transaction_timeout_ms",
    )
    transaction_timeout_ms: int = Field(
        60000,
        gt=0,
        description="Kafka transaction.timeout.ms of the producer (ms): the broker aborts a transaction "
        "open longer (at most the broker's transaction.max.timeout.ms, 15 min by default)",
    )
    max_records_per_s: float | None = Field(
        None, gt=0, description="publish at most this many records per second (None: no limit)"
    )

    @model_validator(mode="after")
    def _commits_well_within_the_transaction_timeout(self) -> ProducerSettings:
        limit_s = self.transaction_timeout_ms / 1000 / 3
        if self.checkpoint_interval_s >= limit_s:
            raise ValueError(
                f"checkpoint_interval_s {self.checkpoint_interval_s:g} must be below a third of "
                f"transaction_timeout_ms {self.transaction_timeout_ms} ({limit_s:g} s), so a transaction is "
                "committed long before the broker aborts it: lower KAFKAGEN_PRODUCER__CHECKPOINT_INTERVAL_S "
                "or raise KAFKAGEN_PRODUCER__TRANSACTION_TIMEOUT_MS"
            )
        return self


class GroupMemberSettings(BaseModel):
    """What the generation consumers and the sink share as members of a Kafka consumer group:
    its session timings (milliseconds; Kafka's ``session.timeout.ms``, ``rebalance.timeout.ms``
    and ``heartbeat.interval.ms``)."""

    model_config = _FROZEN

    session_timeout_ms: int = Field(30000, gt=0, description="Kafka group session timeout (ms)")
    rebalance_timeout_ms: int | None = Field(
        None, gt=0, description="Kafka group rebalance timeout (ms); unset: the session timeout"
    )
    heartbeat_interval_ms: int = Field(3000, gt=0, description="Kafka group heartbeat (ms)")

    @property
    def rebalance_ms(self) -> int:
        """The rebalance timeout in effect (ms): ``rebalance_timeout_ms``, else the session timeout
        (aiokafka 0.14's own default, ``aiokafka/consumer/consumer.py``)."""
        return self.rebalance_timeout_ms or self.session_timeout_ms


class ConsumerSettings(GroupMemberSettings):
    """Generation consumers (``python -m consumers.generate``): one per inference server."""

    group: str = Field("kafkagen-generate", description="consumer group id on the prompts topic")
    max_in_flight: int = Field(256, gt=0, description="hard cap on requests in flight per server")
    standing_queue: int = Field(4, ge=0, description="requests kept waiting on the server beyond its slots")
    prefetch: int = Field(
        128,
        ge=0,
        description="prompts fetched from Kafka ahead of the in-flight window, so a finished request "
        "is replaced at once; within max_uncommitted per partition, never committed past",
    )
    max_token_usage: float = Field(
        0.9,
        gt=0,
        le=1,
        description="KV-cache usage (sglang:token_usage, 0..1) above which the window stops growing "
        "past running + standing_queue",
    )
    max_attempts: int = Field(5, gt=0, description="sends per prompt before it is dead-lettered")
    reuse_from: str | None = Field(
        None,
        description="a run whose completions answering the same request "
        "(messages, tools, parameters, model) are copied instead of generated again (docs/runs.md)",
    )
    retry_invalid: int = Field(
        0,
        ge=0,
        le=10,
        description="times an answer that breaks its request's "
        "response_format or regex is asked again (another seed); the last one is kept, flagged",
    )
    parallel_samples: bool = Field(
        True,
        description="send a long prompt's samples (--samples) that start together as one request with "
        "the server's own n, prefilled once, on SGLang without deterministic inference (docs/inputs.md)",
    )
    lend: bool = Field(True, description="send waiting prompts to idle members' servers (docs/consumer.md)")
    retry_initial_s: float = Field(1.0, gt=0, description="seconds before a first retry")
    retry_max_s: float = Field(60.0, gt=0, description="cap on one retry wait, seconds")
    request_timeout_s: float = Field(3600.0, gt=0, description="seconds for one whole generation")
    startup_timeout_s: float = Field(
        900.0, gt=0, description="seconds to wait at start for the server to become ready"
    )
    max_uncommitted: int = Field(
        512,
        gt=0,
        description="prompts per partition that may be started past its committed offset; a SIGKILL "
        "re-generates at most this many per partition the consumer owned",
    )
    commit_interval_s: float = Field(5.0, gt=0, description="seconds between offset commits")
    down_after_failures: int = Field(3, gt=0, description="consecutive failures that mark the server down")
    down_grace_s: float = Field(
        60.0, gt=0, description="seconds a server may stay down before its consumer leaves the group"
    )
    hang_timeout_s: float = Field(
        600.0, gt=0, description="seconds with requests in flight and none finishing: the server is hung"
    )
    shutdown_deadline_s: float = Field(60.0, gt=0, description="seconds SIGTERM waits for in-flight work")
    watchdog_window_s: float = Field(
        300.0, gt=0, description="seconds of finished requests the output-rate watchdog averages over"
    )
    watchdog_factor: float = Field(
        5.0, gt=1, description="an output rate this many times below the server's recent peak is a collapse"
    )
    watchdog_collapse_s: float = Field(
        300.0, ge=0, description="seconds a collapse must last before the consumer gives up its partitions"
    )
    watchdog_hold_s: float = Field(
        600.0, gt=0, description="seconds a consumer whose server collapsed stays out of the group"
    )


class SinkSettings(GroupMemberSettings):
    """The S3 sink (``python -m sinks.s3``; design and guarantees: docs/sink.md).

    The sink's Kafka consumer group is ``<group>.<run_id>``: its committed offsets must describe
    the same stream as the run's S3 folder, because the sink resumes from the further of the two.
    """

    model_config = _FROZEN

    group: str = Field(
        "kafkagen-sink", description="faust app id and consumer group prefix; the run id is appended"
    )
    flush_records: int = Field(1000, gt=0, description="records per S3 object (deterministic rotation)")
    flush_bytes: int = Field(
        64 * 1024 * 1024, gt=0, description="uncompressed bytes per S3 object (deterministic rotation)"
    )
    idle_flush_s: float = Field(10.0, gt=0, description="seconds of silence before the tail is flushed")
    multipart_threshold_bytes: int = Field(
        16 * 1024 * 1024, gt=0, description="objects at least this large are sent as multipart uploads"
    )
    compression_level: int = Field(3, ge=1, le=22, description="zstd level of the objects")
    poll_records: int = Field(
        500, gt=0, description="records per Kafka poll; bounds what is held beyond a batch per partition"
    )
    retry_initial_s: float = Field(0.5, gt=0, description="seconds before the first S3 retry")
    retry_max_s: float = Field(10.0, gt=0, description="cap on one S3 retry wait, seconds")
    shutdown_deadline_s: float = Field(
        30.0, gt=0, description="seconds SIGTERM waits for uploads in flight to finish and commit"
    )
    instance_id: str | None = Field(
        None, description="static group membership id (Kafka KIP-345): a restart rejoins at once"
    )


class GateSettings(BaseModel):
    """The fleet-wide quality gate (:mod:`consumers.quality.gate`): the share of each quality class above
    which every consumer of the run stops sending prompts, and the preflight refuses the run.

    A share counts results (completions and dead letters): over the first ``warmup`` results of the
    run (or since the last resume), and then over the last ``window`` results. A class whose share
    passes its ``max_*`` halts the run; 1.0 turns that class off. The classes are the quality flags
    (docs/gate.md, "Quality flags"), ``error`` (a dead letter) and ``degenerate`` (any flag that makes a
    completion unusable, :data:`streams.quality.DEGENERATE_FLAGS`).
    """

    model_config = _FROZEN

    enabled: bool = Field(True, description="halt the run when a quality class passes its share")
    warmup: int = Field(200, gt=0, description="results judged first, the run's first or a resume's")
    window: int = Field(1000, gt=0, description="results of the rolling window judged after the warm-up")
    report_interval_s: float = Field(1.0, gt=0, description="seconds between a consumer's control reports")
    max_empty_content: float = Field(
        0.25, ge=0, le=1, description="share of results: no answer, no tool call"
    )
    max_reasoning_ate_budget: float = Field(
        0.25, ge=0, le=1, description="share of results: max_tokens spent before the answer began"
    )
    max_thinking_missing: float = Field(
        0.5, ge=0, le=1, description="share of results: thinking asked for, no reasoning_content"
    )
    max_repetition_loop: float = Field(0.25, ge=0, le=1, description="share of results: output loops")
    max_truncated: float = Field(0.5, ge=0, le=1, description="share of results: finish_reason length")
    max_malformed_tool_call: float = Field(0.25, ge=0, le=1, description="share of results: bad tool call")
    max_template_leak: float = Field(
        0.25, ge=0, le=1, description="share of results: chat template in output"
    )
    max_echoed_prompt: float = Field(0.25, ge=0, le=1, description="share of results: the prompt repeated")
    max_invalid_json: float = Field(0.1, ge=0, le=1, description="share of results: JSON asked, not JSON")
    max_schema_mismatch: float = Field(
        0.1, ge=0, le=1, description="share of results: JSON that the response_format schema refuses"
    )
    max_pattern_mismatch: float = Field(0.1, ge=0, le=1, description="share of results: regex not matched")
    max_error: float = Field(0.2, ge=0, le=1, description="share of results: dead letters")
    max_degenerate: float = Field(0.5, ge=0, le=1, description="share of results: any unusable flag")
    max_output_tokens: int | None = Field(None, gt=0, description="halt at this many output tokens in all")
    deadline: AwareDatetime | None = Field(None, description="halt when the projected finish passes it")

    def thresholds(self) -> dict[str, float]:
        """``{quality class: max share}`` for every class (the ``max_*`` share fields without the prefix)."""
        return {
            name.removeprefix("max_"): value
            for name, value in self.model_dump().items()
            if name.startswith("max_") and name != "max_output_tokens"
        }


COMMON_SETTINGS: Final[tuple[str, ...]] = (
    "run_id",
    "servers",
    "kafka.bootstrap_servers",
    "s3.endpoint_url",
    "s3.bucket",
    "generation.model",
    "generation.max_tokens",
    "generation.temperature",
    "generation.chat_template_kwargs",
    "topics.partitions",
    "gate.enabled",
)
"""The settings most runs set (dotted paths), listed first by ``--settings-help``."""


class Settings(BaseSettings):
    """All of kafkagen's settings. Immutable: derive a changed copy with ``model_copy(update=...)``;
    switch to another run id with :func:`streams.runs.naming.for_run` (``model_copy`` runs no validator,
    so it would keep the old run's derived topic names).

    Topic names left empty are derived from ``run_id`` and ``replay_of`` when the object is built
    (:func:`streams.runs.naming.fill_topic_names`; the rule: ``docs/runs.md``).

    Raises:
        ConfigError: from :func:`load_settings` when a value is malformed.
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        frozen=True,
        extra="forbid",
        cli_kebab_case=True,
        cli_implicit_flags=True,
        nested_model_default_partial_update=True,
    )

    run_id: str = Field(
        "default",
        description="names this generation run: its topics, consumer groups and S3 folder derive from it "
        "(docs/runs.md)",
    )
    replay_of: str | None = Field(
        None,
        description="this run regenerates run REPLAY_OF's prompts (topic <REPLAY_OF>.prompts) under its own "
        "run id, completions and errors topics, groups and S3 folder (docs/runs.md)",
    )
    servers: list[str] = Field(
        default_factory=lambda: ["http://127.0.0.1:30000", "http://127.0.0.1:30001"],
        description="inference server base URLs (SGLang, or llama.cpp locally), one consumer each",
    )
    home: str = Field(
        ".local",
        description="folder of this machine's kafkagen state: run folders, serve fleets, datasets and "
        "the local stack's services (relative to cwd)",
    )
    kafka: KafkaSettings = Field(KafkaSettings(), description="how every Kafka client connects")
    topics: TopicSettings = Field(TopicSettings(), description="topic names and partitions")
    s3: S3Settings = Field(S3Settings(), description="where the sink writes")
    generation: GenerationSettings = Field(
        GenerationSettings(), description="sampling parameters sent with every request"
    )
    producer: ProducerSettings = Field(ProducerSettings(), description="the prompt producer")
    consumer: ConsumerSettings = Field(ConsumerSettings(), description="the generation consumers")
    sink: SinkSettings = Field(SinkSettings(), description="the S3 sink")
    gate: GateSettings = Field(GateSettings(), description="the fleet-wide quality gate")

    @model_validator(mode="before")
    @classmethod
    def _derive_topic_names(cls, data: Any) -> Any:
        return naming.fill_topic_names(data)

    @field_validator("run_id")
    @classmethod
    def _run_id_is_key_safe(cls, value: str) -> str:
        return naming.check_run_id(value)

    @field_validator("replay_of", mode="before")
    @classmethod
    def _replay_of_is_another_run(cls, value: Any, info: ValidationInfo) -> Any:
        if value == "":  # KAFKAGEN_REPLAY_OF= (e.g. docker compose's ${REPLAY_OF:-}): not a replay
            return None
        if isinstance(value, str):
            naming.check_run_id(value, what="replay_of")
            naming.check_not_self_replay(info.data.get("run_id", ""), value)
        return value

    @field_validator("servers")
    @classmethod
    def _servers_are_urls(cls, value: list[str]) -> list[str]:
        for url in value:
            check_server_url(url)
        return value

    @model_validator(mode="after")
    def _reuse_from_another_run(self) -> Settings:
        if self.consumer.reuse_from is not None:
            naming.check_run_id(self.consumer.reuse_from, what="consumer.reuse_from")
            if self.consumer.reuse_from == self.run_id:  # a regenerate would copy what it redoes
                raise ValueError("consumer.reuse_from names this run itself: name the run to copy from")
        return self


def check_server_url(url: str) -> str:
    """``url`` unchanged when it can be an inference server's base URL: an ``http`` or ``https``
    scheme, a host and, when given, a port in 1-65535, as httpx parses it; not ending in ``/v1``
    (an OpenAI-style base URL: the client adds ``/v1/chat/completions`` itself).

    Raises:
        ValueError: anything else; the message quotes ``url`` and shows a good one.
    """
    import httpx  # here, not at the top: a command's --help does not wait for it

    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        parsed = httpx.URL("")
    port_ok = parsed.port is None or 1 <= parsed.port <= 65535
    if parsed.scheme not in ("http", "https") or not parsed.host or not port_ok:
        raise ValueError(f"{url!r} is not an http(s) URL, e.g. http://127.0.0.1:30000")
    if parsed.path.rstrip("/").endswith("/v1"):  # the client adds /v1/chat/completions itself
        base = url.rstrip("/").removesuffix("/v1")
        raise ValueError(f"{url!r}: give the server's base URL without /v1 ({base})")
    return url


SettingsT = TypeVar("SettingsT", bound=BaseSettings)


def load_settings(
    cls: type[SettingsT] = Settings,  # type: ignore[assignment]
    argv: Sequence[str] | None = None,
    *,
    prog: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> SettingsT:
    """Build a settings object from the environment, then CLI flags in ``argv`` or ``overrides``.

    Args:
        cls: :class:`Settings` or an entry point's subclass adding its own fields.
        overrides: values that beat the environment, nested (``{"kafka": {"client_id": "x"}}``),
            merged field by field; the command line's flags arrive this way (:mod:`streams.cli`).
        argv: command-line arguments without the program name; ``None`` reads no flags.
        prog: program name shown in ``--help``.

    Raises:
        ConfigError: a value is malformed; the message names the setting and its env variable.
        SystemExit: on ``--help`` or an unknown flag (argparse behaviour).
    """
    unknown = unknown_environment(cls, os.environ)
    if unknown:
        raise ConfigError("\n".join(["invalid settings:", *unknown]))
    try:
        if overrides is not None:
            return cls(**overrides)
        if argv is None:
            return cls()
        source: CliSettingsSource[SettingsT] = CliSettingsSource(
            cls, cli_prog_name=prog, cli_kebab_case=True, cli_implicit_flags=True
        )
        return CliApp.run(cls, cli_args=list(argv), cli_settings_source=source)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None
    except SettingsError as exc:  # e.g. an environment variable that must be JSON is not
        cause = f": {exc.__cause__}" if exc.__cause__ else ""
        raise ConfigError(
            f"invalid settings: {exc}{cause}; lists and dicts are JSON in the environment, "
            f"e.g. KAFKAGEN_SERVERS='[\"http://127.0.0.1:30000\"]'"
        ) from None


def _describe(exc: ValidationError) -> str:
    lines = ["invalid settings:"]
    for err in exc.errors():
        path = [str(p) for p in err["loc"]]
        env = ENV_PREFIX + "__".join(p.upper() for p in path)
        flag = "--" + ".".join(p.replace("_", "-") for p in path)
        if err["type"] == "extra_forbidden":  # e.g. a name of an older version
            lines.append(f"  {'.'.join(path)}: no such setting (unset {env}; --settings-help lists them)")
        else:
            lines.append(f"  {'.'.join(path)}: {err['msg']} (set {env} or {flag})")
    return "\n".join(lines)
