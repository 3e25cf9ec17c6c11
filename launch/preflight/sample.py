"""The preflight's sample: a few prompts of the run's own input, read the way the producer reads
them (its reader and record maker, the run's mapping options), drawn evenly over its beginning by a
seeded reservoir. Bad lines are left out (the producer reports them); standard input (``-``) is
never read here. Why and how: docs/main-job.md, "The preflight".
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from launch.preflight.options import DEFAULT_SAMPLE, DEFAULT_SEED
from producers.reading.badlines import bad_line_text
from producers.reading.limits import line_limit
from producers.reading.maker import RecordMaker, Rejected
from producers.reading.reader import InputReader
from producers.sample import DEMO_FILE
from streams.config import Settings
from streams.inputs import InputMapping, resolve_inputs
from streams.records import PromptRecord, decode

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = ["DEFAULT_SAMPLE", "DEFAULT_SCAN", "DEFAULT_SEED", "Sample", "demo_sample", "read_sample"]

DEFAULT_SCAN: Final = 10_000
"""Good records of the input the sample is drawn from (its first ones)."""


@dataclass(frozen=True)
class Sample:
    """The prompts a preflight sends, and where they come from.

    Attributes:
        prompts: the records, as the producer would publish them.
        source: the inputs, for the report (``data/prompts/demo.jsonl``, ``a.jsonl, b.jsonl``).
        scanned: good records the reservoir saw (at most the scan limit).
        whole: the inputs were read to their end (fewer good records than the scan limit).
        skipped: inputs not read (``-``: the producer reads standard input).
        repeated: records left out because their id was seen before (each id is sent once: SGLang
            refuses a request id already in flight, 400 "Duplicate request ID").
        bad: lines read that the producer would not publish (:class:`producers.reading.maker.Rejected`).
        first_bad: the first of them as ``kafkagen produce`` tells it (``bad line a.jsonl:1: cannot
            tell this row's format from its fields (...): pass --input-format ...``:
            :func:`producers.reading.badlines.bad_line_text`), None when none was bad.
    """

    prompts: tuple[PromptRecord, ...]
    source: str
    scanned: int
    whole: bool = True
    skipped: tuple[str, ...] = ()
    repeated: int = 0
    bad: int = 0
    first_bad: str | None = None

    def describe(self) -> str:
        """``32 prompts of a.jsonl (seeded sample of its 1319 good records)``, and how many
        records were left out for an id seen before."""
        of = "its" if self.whole else "its first"
        drawn = f"seeded sample of {of} {self.scanned} good records"
        if self.repeated:
            drawn += f"; {self.repeated} with an id seen before left out"
        if self.bad:
            drawn += f"; {self.bad} bad lines left out"
        return f"{len(self.prompts)} prompts of {self.source} ({drawn})"

    def why_empty(self) -> str:
        """Why a sample without a prompt has none, for the report: standard input is not read
        here; else what was read, and the first bad line as ``kafkagen produce`` tells it (the
        fields the row has and the option that maps them)."""
        if self.skipped and self.source == "-":
            return "standard input (-) is read by the producer only: nothing was checked"
        nothing = f"no prompt could be read from {self.source}: nothing was checked"
        if self.first_bad is None:
            return f"{nothing}; it holds no row (empty, or blank lines only)"
        lines = "the only line read is bad" if self.bad == 1 else f"all {self.bad} lines read are bad"
        return f"{nothing}; {lines}, the first: {self.first_bad}"


def _shown(path: Path) -> str:
    """``path`` relative to the working folder when it is inside it (the report is shorter)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def read_sample(
    inputs: Sequence[str],
    mapping: InputMapping,
    settings: Settings,
    *,
    size: int = DEFAULT_SAMPLE,
    seed: int = DEFAULT_SEED,
    scan: int = DEFAULT_SCAN,
) -> Sample:
    """``size`` prompts drawn (seeded reservoir) from the first ``scan`` good records of ``inputs``
    (files, globs, ``s3://`` URIs, as ``kafkagen produce`` takes them; none: the bundled demo file),
    mapped with ``mapping``, within its first ``limit`` rows when set (``--limit``). Needs no
    Kafka: records are checked against ``kafka.max_message_bytes``.

    Raises:
        InputError: an input is missing or cannot be read (the message names it).
        ConfigError: the mapping options do not fit together.
        StorageError: an ``s3://`` input cannot be read.
    """
    given = list(inputs) or [_shown(DEMO_FILE)]
    readable = [i for i in given if i != "-"]
    options = mapping.options(settings.run_id)
    s3_client: list[S3Client] = []

    def s3() -> S3Client:
        if not s3_client:
            from streams.storage import s3_client as make_s3_client

            s3_client.append(make_s3_client(settings.s3))
        return s3_client[0]

    repeated = bad = 0
    first_bad: str | None = None

    async def draw() -> tuple[list[bytes], int]:
        nonlocal repeated, bad, first_bad
        rng = random.Random(seed)
        reservoir: list[bytes] = []
        seen = 0
        rows_left = options.limit  # --limit: the run's rows are the first ones of its inputs
        ids: set[str] = set()
        specs = (
            await asyncio.to_thread(resolve_inputs, readable, s3, skip_unreadable=mapping.skip_unreadable)
            if readable
            else []
        )
        for spec in specs:
            make = RecordMaker(
                spec.name,
                dataclasses.replace(options, samples=1),  # the prompts themselves, not their samples
                partitions=settings.topics.partitions,
                key_by=settings.producer.key_by,
                record_limit=settings.kafka.max_message_bytes,
            )
            reader = InputReader(spec, make, line_limit=line_limit(settings), s3=s3)
            line = 0  # 1-based, as the producer counts them (blank lines included)
            if rows_left == 0:
                break
            try:
                await reader.open()
                eof = False
                while not eof and seen < scan and rows_left != 0:
                    chunk = await reader.next_chunk()
                    eof = chunk.eof
                    for parsed in chunk.parsed:
                        if parsed is not None and rows_left is not None:
                            if rows_left == 0:
                                break
                            rows_left -= 1
                        line += 1
                        if isinstance(parsed, Rejected):
                            bad += 1
                            first_bad = first_bad or bad_line_text(spec.name, line, parsed.reason)
                            continue
                        if parsed is None or isinstance(parsed, list):  # never a list: samples=1
                            continue
                        if parsed[0] in ids:  # one request id per prompt: a server refuses a repeat
                            repeated += 1
                            continue
                        ids.add(parsed[0])
                        seen += 1
                        if len(reservoir) < size:
                            reservoir.append(parsed[2])
                        else:
                            j = rng.randrange(seen)
                            if j < size:
                                reservoir[j] = parsed[2]
                        if seen >= scan:
                            break
            finally:
                reader.close()
            if seen >= scan:
                break
        return reservoir, seen

    values, seen = asyncio.run(draw())
    return Sample(
        prompts=tuple(decode(v, PromptRecord) for v in values),
        source=", ".join(readable) or "-",
        scanned=seen,
        whole=seen < scan,
        skipped=tuple(i for i in given if i == "-"),
        repeated=repeated,
        bad=bad,
        first_bad=first_bad,
    )


def demo_sample(settings: Settings, *, size: int = DEFAULT_SAMPLE, seed: int = DEFAULT_SEED) -> Sample:
    """The sample for a preflight without input (``serve up``, ``serve probe``, a replay): drawn
    from the bundled demo prompts (``data/prompts/demo.jsonl``: GSM8K, MT-Bench and BFCL
    tool-calling rows, :mod:`producers.sample`)."""
    return read_sample([], InputMapping(), settings, size=size, seed=seed)
