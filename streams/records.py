"""Record schemas: the only definitions of what travels on kafkagen's topics.

Every record is a :class:`msgspec.Struct` encoded as JSON (UTF-8), so any Kafka tool
(``kafka-console-consumer``, kcat) can read it. Every record carries ``schema_version`` and a stable
``id``: the prompt's id, shared by its completion and error records, which is also the Kafka message
key. Readers ignore fields they do not know (forward compatible); ``schema_version`` is bumped when
a field changes meaning or is removed. Which topic carries which record: ``docs/kafka.md``, "Topics and
their configs".

Units: token counts are tokens of the served model's tokenizer; times are seconds (``float``);
timestamps are Unix epoch seconds (``float``, UTC).
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Mapping
from typing import Any, Final, Literal, TypeVar

import msgspec

from streams.errors import RecordDecodeError

__all__ = [
    "MAX_ERROR_ID_CHARS",
    "OPTIONAL_SAMPLING",
    "OWN_FIELDS",
    "RESPONSE_FORMAT_TYPES",
    "SCHEMA_VERSION",
    "SGLANG_CHAT_FIELDS",
    "AnyRecord",
    "CompletionRecord",
    "ErrorRecord",
    "ErrorStage",
    "FinishReason",
    "GenerationParams",
    "ProgressRecord",
    "PromptMetadata",
    "PromptRecord",
    "RecordDecodeError",
    "RecordT",
    "SourceOffset",
    "Timings",
    "Usage",
    "content_identity",
    "decode",
    "encode",
    "extra_body_problem",
    "fit_error",
    "key_of",
    "output_constraint_problem",
    "prompt_identity",
]

SCHEMA_VERSION: Final = 1

FinishReason = Literal["stop", "length", "tool_calls", "abort", "content_filter", "function_call"]
"""OpenAI/SGLang ``finish_reason`` values (docs/sglang.md)."""


class _Record(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=False):
    """Base of the wire records: frozen, keyword-only, unknown fields ignored on decode."""


class GenerationParams(_Record, frozen=True, kw_only=True, omit_defaults=True):
    """Per-record generation overrides. ``None`` means "use the consumer's configured default".

    Sent to ``/v1/chat/completions`` under the same names (SGLang accepts all of them;
    ``top_k``, ``min_p``, ``repetition_penalty``, ``min_tokens``, ``chat_template_kwargs`` and
    ``separate_reasoning`` are SGLang extensions to the OpenAI API).
    """

    max_tokens: int | None = None
    """tokens: reasoning + answer together (SGLang counts both against this budget)."""
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    stop: list[str] | None = None
    seed: int | None = None
    repetition_penalty: float | None = None
    min_tokens: int | None = None
    """tokens: the server will not stop before this many."""
    chat_template_kwargs: dict[str, Any] | None = None
    """e.g. ``{"enable_thinking": true}``; per-request values beat the server's defaults."""
    separate_reasoning: bool | None = None
    response_format: dict[str, Any] | None = None
    """OpenAI ``response_format``: ``{"type": "json_object"}`` or ``{"type": "json_schema",
    "json_schema": {"name", "schema", "strict"?}}`` (``text``: none); checked by
    :func:`output_constraint_problem`, answers validated (docs/structured-output.md)."""
    regex: str | None = None
    """SGLang: the answer must match this regular expression."""
    ebnf: str | None = None
    """SGLang: the answer must follow this EBNF grammar."""
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    logprobs: bool | None = None
    """return each output token's log probability (kept in the completion's ``logprobs``)."""
    top_logprobs: int | None = None
    """with ``logprobs``: this many most likely tokens per position too."""
    extra_body: dict[str, Any] | None = None
    """more request fields, sent verbatim (each a field of SGLang's chat request:
    :func:`extra_body_problem`); they win over the others."""

    def as_request_fields(self) -> dict[str, Any]:
        """The non-``None`` fields as a dict, ready to merge into a request body (``extra_body``
        left as one field: the body's builder merges it last)."""
        return {k: v for k, v in msgspec.structs.asdict(self).items() if v is not None}


OPTIONAL_SAMPLING: Final = (
    "top_k",
    "min_p",
    "repetition_penalty",
    "frequency_penalty",
    "presence_penalty",
    "stop",
    "seed",
    "top_logprobs",
)
"""Sampling settings sent only when set, under SGLang's names; each also a flag (``--top-k``)."""


RESPONSE_FORMAT_TYPES: Final = ("text", "json_object", "json_schema")
"""SGLang 0.5.23 ``entrypoints/openai/protocol.py`` ``ResponseFormat.type``."""


SGLANG_CHAT_FIELDS: Final = frozenset(
    # SGLang 0.5.23 entrypoints/openai/protocol.py ChatCompletionRequest (and PDRoutingFields)
    [
        "messages",
        "model",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "max_tokens",
        "max_completion_tokens",
        "n",
        "presence_penalty",
        "response_format",
        "seed",
        "stop",
        "stream",
        "stream_options",
        "temperature",
        "top_p",
        "user",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "return_hidden_states",
        "return_routed_experts",
        "routed_experts_start_len",
        "return_cached_tokens_details",
        "return_spec_tokens_details",
        "return_prompt_token_ids",
        "return_token_ids",
        "return_meta_info",
        "return_input_ids_in_sglext",
        "return_output_ids_in_sglext",
        "return_sampling_mask",
        "sampling_logprobs_mode",
        "return_flat_raw_output_top_logprobs",
        "reasoning_effort",
        "thinking",
        "task",
        "top_k",
        "min_p",
        "min_tokens",
        "regex",
        "ebnf",
        "repetition_penalty",
        "stop_token_ids",
        "stop_regex",
        "no_stop_trim",
        "ignore_eos",
        "continue_final_message",
        "skip_special_tokens",
        "lora_path",
        "session_id",
        "session_params",
        "separate_reasoning",
        "stream_reasoning",
        "chat_template_kwargs",
        "max_dynamic_patch",
        "min_dynamic_patch",
        "use_audio_in_video",
        "images_config",
        "video_config",
        "mm_processor_kwargs",
        "custom_logit_processor",
        "custom_params",
        "watermark",
        "input_ids",
        "rid",
        "extra_key",
        "cache_salt",
        "priority",
        "data_parallel_rank",
        "bootstrap_host",
        "bootstrap_port",
        "bootstrap_room",
        "routed_dp_rank",
        "disagg_prefill_dp_rank",
    ]
)
"""Every field SGLang's chat-completions request defines."""

OWN_FIELDS: Final[Mapping[str, str]] = {
    "messages": "the prompt's messages",
    "tools": "the prompt's tools",
    "model": "--generation.model (or the model discovery found)",
    "rid": "the consumer's request id",
    "stream": "the consumer (it reads whole answers)",
    "n": "--samples (and consumer.parallel_samples)",
    "max_tokens": "--max-tokens / --generation.max-tokens",
    "max_completion_tokens": "--max-tokens / --generation.max-tokens",
}
"""Fields kafkagen sets itself, and where to set them instead."""


def extra_body_problem(extra: Mapping[str, Any]) -> str | None:
    """Why ``extra`` cannot be added to the request body verbatim, or None when it can: a field
    kafkagen sets itself (:data:`OWN_FIELDS`), or one SGLang's request does not define
    (:data:`SGLANG_CHAT_FIELDS`; the message lists the close names, or all of them)."""
    for name in extra:
        if name in OWN_FIELDS:
            return f"extra_body may not set {name!r}: kafkagen sets it from {OWN_FIELDS[name]}"
        if name not in SGLANG_CHAT_FIELDS:
            close = difflib.get_close_matches(name, SGLANG_CHAT_FIELDS, n=3, cutoff=0.6)
            hint = (
                f"did you mean {', '.join(close)}?"
                if close
                else "known: " + ", ".join(sorted(SGLANG_CHAT_FIELDS - OWN_FIELDS.keys()))
            )
            return f"extra_body field {name!r} is not a field of SGLang's chat request ({hint})"
    return None


def output_constraint_problem(response_format: Any, regex: Any, ebnf: Any) -> str | None:
    """Why these output constraints cannot be sent, or None when they can: a ``response_format``
    that is not SGLang's (type one of :data:`RESPONSE_FORMAT_TYPES`; ``json_schema`` with a
    ``name`` and a ``schema`` that is a valid JSON Schema), or more than one constraint (SGLang
    0.5.23 ``sampling/sampling_params.py``: "Only one of json_schema, regex, ebnf, or
    structural_tag can be set"). ``regex`` must compile in Python too (the answers are checked
    with it)."""
    import re

    kind = None
    if response_format is not None:
        if not isinstance(response_format, dict) or response_format.get("type") not in RESPONSE_FORMAT_TYPES:
            return (
                f"response_format must be an object whose type is one of {', '.join(RESPONSE_FORMAT_TYPES)}"
            )
        kind = response_format["type"]
        if kind == "json_schema":
            spec = response_format.get("json_schema")
            if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or "schema" not in spec:
                return 'response_format json_schema needs {"json_schema": {"name": "...", "schema": {...}}}'
            if "strict" in spec and not isinstance(spec["strict"], bool):
                return "response_format json_schema.strict must be true or false (SGLang takes booleans only)"
            from jsonschema import SchemaError, validators

            schema = spec["schema"]
            try:
                validators.validator_for(schema).check_schema(schema)
            except SchemaError as exc:
                return f"response_format's schema is not a valid JSON Schema: {exc.message}"
            dangling = _dangling_ref(schema)
            if dangling is not None:
                return f"response_format's schema has $ref {dangling!r}, which points nowhere in it"
    given = [name for name, v in (("regex", regex), ("ebnf", ebnf)) if v is not None]
    if kind in ("json_object", "json_schema"):
        given.insert(0, f"response_format {kind}")
    if len(given) > 1:
        return f"only one output constraint at a time (SGLang's rule), not {' and '.join(given)}"
    if regex is not None:
        try:
            re.compile(regex)
        except re.error as exc:
            return f"regex {regex!r} does not compile: {exc}"
    return None


def _dangling_ref(schema: Any) -> str | None:
    """The first ``$ref`` of ``schema`` that is not a JSON pointer into ``schema`` itself (a
    remote reference, or a local one to nothing), else None: answers are checked offline."""
    refs: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                refs.append(node["$ref"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    for ref in refs:
        if not ref.startswith("#"):
            return ref
        node: Any = schema
        for part in ref[1:].lstrip("/").split("/") if ref not in ("#", "#/") else ():
            key = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and key in node:
                node = node[key]
            elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
                node = node[int(key)]
            else:
                return ref
    return None


class PromptMetadata(_Record, frozen=True, kw_only=True):
    """Where a prompt came from: enough to point a user back at the input line."""

    source: str
    """input file name or URI as given (``-`` for stdin)."""
    line: int
    """1-based line number in ``source`` (record index for a JSON array file)."""
    tags: list[str] = []
    extra: dict[str, Any] = {}
    """free-form fields from the input row the user asked to keep (e.g. a reference answer)."""


class PromptRecord(_Record, frozen=True, kw_only=True):
    """One prompt on the prompts topic.

    ``messages`` is OpenAI chat format: a list of ``{"role": "system"|"user"|"assistant"|"tool",
    "content": str | list[part], ...}`` dicts, assistant turns possibly with ``tool_calls``,
    tool turns with ``tool_call_id``. ``tools`` is the OpenAI ``tools`` list of
    ``{"type": "function", "function": {"name", "description", "parameters": <JSON Schema>}}``.
    """

    schema_version: int = SCHEMA_VERSION
    id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    params: GenerationParams = GenerationParams()
    metadata: PromptMetadata
    run_id: str | None = None
    """the run that published it; a replay under a new run id re-publishes with its own."""
    attempt: int = 0
    """0 for the first publication; incremented by each re-publish of the same id."""
    sample: int | None = None
    """k (0-based) of the prompt's ``--samples`` completions, its id ``<prompt id>#<k>``; None: the
    prompt's only one (docs/inputs.md, Samples)."""

    @property
    def prompt_id(self) -> str:
        """The id of the input row this record came from: ``id`` without its ``#<k>`` sample suffix."""
        return self.id if self.sample is None else self.id.removesuffix(f"#{self.sample}")


class Usage(_Record, frozen=True, kw_only=True):
    """Token usage as the server reported it (OpenAI ``usage``; ``reasoning_tokens`` is SGLang's)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    """reasoning + answer tokens."""
    reasoning_tokens: int = 0
    cached_tokens: int | None = None
    """prompt tokens served from the prefix cache (SGLang ``--enable-cache-report``)."""
    shared_by: int = 1
    """samples answered by the one request this usage comes from (``n``; docs/inputs.md,
    "Samples"). Above 1, ``prompt_tokens`` and ``cached_tokens`` are the request's and
    ``completion_tokens`` / ``reasoning_tokens`` this sample's share of the request's totals,
    apportioned by output length: with ``n`` the server reports only totals."""


class Timings(_Record, frozen=True, kw_only=True):
    """How long a generation took, in seconds, and when (Unix epoch seconds)."""

    queued_s: float
    """from the record being fetched from Kafka to its request being sent."""
    latency_s: float
    """from the request being sent to the full response arriving."""
    started_at: float
    finished_at: float


class SourceOffset(_Record, frozen=True, kw_only=True):
    """The Kafka position of the prompt a completion or error answers."""

    topic: str
    partition: int
    offset: int


class CompletionRecord(_Record, frozen=True, kw_only=True):
    """One finished generation on the completions topic, self-contained: it carries its prompt.

    ``content`` is always a string (``""`` when empty, as SGLang returns it);
    ``reasoning_content`` is ``None`` when the server returned no reasoning.
    ``quality`` lists the quality flags raised (docs/gate.md, "Quality flags").
    """

    schema_version: int = SCHEMA_VERSION
    id: str
    run_id: str
    attempt: int = 0
    prompt: PromptRecord
    content: str
    reasoning_content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    finish_reason: str
    usage: Usage
    timings: Timings
    server: str
    """base URL of the inference server that generated it."""
    model: str
    """served model name as the server reported it."""
    params: dict[str, Any]
    """the generation parameters actually sent (defaults merged with the record's overrides)."""
    quality: list[str] = []
    source: SourceOffset | None = None
    consumer: str | None = None
    """the consumer instance id that produced it."""
    logprobs: dict[str, Any] | None = None
    """the choice's ``logprobs`` as the server returned it (``{"content": [{"token", "logprob",
    "bytes", "top_logprobs"}, ...]}``), when the request asked for them."""
    invalid_retries: int = 0
    """answers refused before this one for breaking the request's structured output
    (``consumer.retry_invalid``; docs/structured-output.md)."""
    reused_from: SourceOffset | None = None
    """where the completion this one copies lies (a completion of run ``consumer.reuse_from``
    answering the same request: docs/runs.md, "Reusing identical requests"); None: generated."""


ErrorStage = Literal["produce", "generate", "sink", "export"]


class ErrorRecord(_Record, frozen=True, kw_only=True):
    """A prompt that could not be completed, on the dead-letter topic. Never silently dropped.

    ``prompt`` is ``None`` only when the input bytes could not be decoded at all; then ``raw``
    holds them (decoded as UTF-8 with replacement characters) for inspection.
    """

    schema_version: int = SCHEMA_VERSION
    id: str
    run_id: str | None = None
    attempt: int = 0
    prompt: PromptRecord | None = None
    raw: str | None = None
    stage: ErrorStage
    error_type: str
    """the exception class name or error kind, e.g. ``FatalRequestError``."""
    message: str
    status: int | None = None
    """HTTP status from the inference server, when there was one."""
    retriable: bool = False
    """whether the last failure was of a retriable kind (retries were exhausted)."""
    attempts: int = 1
    """how many times the request was sent before giving up."""
    server: str | None = None
    source: SourceOffset | None = None
    at: float = 0.0
    """Unix epoch seconds when the record was dead-lettered."""


class ProgressRecord(_Record, frozen=True, kw_only=True):
    """The resume point of one input, the value on the compacted progress topic.

    Written in the same Kafka transaction as the records it accounts for; its key is the progress
    key ``["<prompts topic>", "<run id>", "<input identity>"]`` (see :mod:`producers.progress`).
    """

    schema_version: int = SCHEMA_VERSION
    input: str
    """the input's identity: resolved path, ``s3://`` URI, or ``stdin:<sha256 of its head>``."""
    source: str
    """the input as given on the command line (``metadata.source`` of its records)."""
    topic: str
    run_id: str
    line: int
    """1-based: every line up to this one is published (in this or an earlier transaction) or bad."""
    offset: int
    """bytes of the (decompressed) input up to and including ``line``."""
    digest: str
    """SHA-256 (hex) of those ``offset`` bytes; a line over the length limit counts its first bytes only."""
    published: int
    """records published from lines ``1..line``, all runs together."""
    done: bool = False
    """``line`` is the input's last line."""
    options: dict[str, Any] = {}
    """the mapping options the records were made with (``producers.progress.options_fingerprint``)."""
    at: float = 0.0
    """Unix epoch seconds of the commit."""


AnyRecord = PromptRecord | CompletionRecord | ErrorRecord | ProgressRecord


RecordT = TypeVar("RecordT", PromptRecord, CompletionRecord, ErrorRecord, ProgressRecord)

_encoder = msgspec.json.Encoder()
_decoders: dict[type[Any], msgspec.json.Decoder[Any]] = {
    cls: msgspec.json.Decoder(cls) for cls in (PromptRecord, CompletionRecord, ErrorRecord, ProgressRecord)
}


def encode(record: AnyRecord) -> bytes:
    """Encode a record as compact UTF-8 JSON bytes (the Kafka message value)."""
    return _encoder.encode(record)


def decode(data: bytes | str, cls: type[RecordT]) -> RecordT:
    """Decode JSON bytes into a record of type ``cls``.

    Raises:
        RecordDecodeError: not JSON, not UTF-8, or a field is missing or of the wrong type;
            the message is msgspec's, naming the field path (e.g. ``$.messages[0]``).
    """
    try:
        result: RecordT = _decoders[cls].decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise RecordDecodeError(f"not a valid {cls.__name__}: {exc}") from None
    return result


MAX_ERROR_ID_CHARS: Final = 256
"""A dead letter's id (also its Kafka key) longer than this is cut (:func:`fit_error`)."""


def fit_error(error: ErrorRecord, max_bytes: int) -> ErrorRecord:
    """``error`` made to fit in ``max_bytes`` encoded bytes (a Kafka record's value budget).

    A dead letter embeds its prompt (or the raw input bytes) so it can be re-published; those can
    be larger than the record limit (a prompt near the limit, or raw bytes that grow 3-6x once
    decoded with replacement characters and JSON-escaped: one character encodes to at most 6
    bytes). An id over :data:`MAX_ERROR_ID_CHARS` characters (a poison record's key) is cut first,
    keeping its source offset. Then, each step only while the record is still too large: ``raw`` is cut
    to a prefix, then ``prompt`` is left out, then ``message`` is cut. What was left out is said
    at the end of ``message``; the full prompt stays at ``source`` (topic, partition, offset) of
    the prompts topic.

    Raises:
        ValueError: ``max_bytes`` is below 4096, too small for any error record.
    """
    if max_bytes < 4096:
        raise ValueError(f"max_bytes {max_bytes} is too small for an error record (at least 4096)")
    notes: list[str] = []
    if len(error.id) > MAX_ERROR_ID_CHARS:  # a poison record's key: it is the Kafka key too
        where = f"{error.source.topic}+{error.source.partition}+{error.source.offset}" if error.source else ""
        notes.append(f"id cut from {len(error.id)} characters")
        error = msgspec.structs.replace(error, id=f"{error.id[:64]}...{where}")
    if len(encode(error)) <= max_bytes and not notes:
        return error
    if error.raw is not None:
        keep = max_bytes // 4 // 6
        if len(error.raw) > keep:
            notes.append(f"raw input cut from {len(error.raw)} to {keep} characters")
            error = msgspec.structs.replace(error, raw=error.raw[:keep])
    if len(encode(error)) > max_bytes and error.prompt is not None:
        notes.append(f"prompt left out ({len(encode(error.prompt))} bytes)")
        error = msgspec.structs.replace(error, prompt=None)
    suffix = f" [trimmed to fit {max_bytes} bytes: {'; '.join(notes) or 'message cut'}]"
    if len(encode(error)) + len(suffix) <= max_bytes:
        return msgspec.structs.replace(error, message=error.message + suffix)
    message = error.message
    if len(encode(error)) + len(suffix) > max_bytes:
        message = message[: max_bytes // 4 // 6]
        if (
            len(encode(msgspec.structs.replace(error, message=""))) + 6 * len(message) + len(suffix)
            > max_bytes
        ):
            message = message[:200]
    return msgspec.structs.replace(error, message=message + suffix)


def key_of(record_id: str) -> bytes:
    """The Kafka message key for a record id: its UTF-8 bytes."""
    return record_id.encode("utf-8")


_identity_encoder: Final = msgspec.json.Encoder(order="sorted")


def prompt_identity(prompt: PromptRecord) -> str:
    """What makes two prompts the same request, as a hex BLAKE2b-128 digest: the prompt's
    ``messages``, ``tools`` and ``params``, encoded as JSON with sorted keys (so key order in the
    input does not matter). The id, run id, ``attempt`` and ``metadata`` are left out: a re-publish
    of the same prompt (a new attempt, another run) has the same identity; the same id with
    other content is a conflict (docs/export.md, "Deduplication")."""
    data = _identity_encoder.encode([prompt.messages, prompt.tools, prompt.params])
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def content_identity(prompt: PromptRecord) -> str:
    """What a prompt asks, whatever its generation parameters: a hex BLAKE2b-128 digest of its
    ``messages`` and ``tools`` (sorted-key JSON). A regenerated attempt keeps it and may change
    ``params`` (``kafkagen regenerate --max-tokens ...``); the same id with another content is
    a conflict in every case (:mod:`sinks.export.index`)."""
    data = _identity_encoder.encode([prompt.messages, prompt.tools])
    return hashlib.blake2b(data, digest_size=16).hexdigest()
