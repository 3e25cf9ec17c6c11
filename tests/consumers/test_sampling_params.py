"""Every sampling parameter reaches the server and the completion record: a consumer against the
simulator and real Kafka, with the settings' parameters, ``extra_body`` and ``logprobs``."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from simulator import SimulatedServer
from streams.config import Settings
from streams.records import GenerationParams
from tests.consumers.support import Fleet, completions, wait_all_done
from tests.helpers import make_prompt, publish

pytestmark = pytest.mark.kafka


async def test_sampling_parameters_and_logprobs_are_sent_and_recorded(
    cs: Settings, sim: SimulatedServer, tmp_path: Path
) -> None:
    generation = cs.generation.model_copy(
        update={
            "top_k": 20,
            "min_p": 0.05,
            "frequency_penalty": 0.3,
            "presence_penalty": 0.1,
            "repetition_penalty": 1.05,
            "logprobs": True,
            "top_logprobs": 2,
            "extra_body": {"stop_token_ids": [151645]},
        }
    )
    settings = cs.model_copy(update={"generation": generation})
    plain = make_prompt(0, max_tokens=100)
    row = msgspec.structs.replace(
        make_prompt(1, max_tokens=100), params=GenerationParams(max_tokens=100, presence_penalty=0.7, seed=3)
    )
    await publish(settings, [plain, row])
    fleet = Fleet(settings, tmp_path)
    try:
        fleet.start("c0", sim.url)
        _, failed = await wait_all_done(settings, {plain.id, row.id}, timeout_s=60, fleet=fleet)
    finally:
        fleet.stop_all()
    assert not failed
    by_id = {r.id: r for r in await completions(settings)}
    for record in by_id.values():
        params = record.params
        assert (params["top_k"], params["min_p"], params["frequency_penalty"]) == (20, 0.05, 0.3)
        assert params["repetition_penalty"] == 1.05 and params["stop_token_ids"] == [151645]
        assert params["logprobs"] is True and params["top_logprobs"] == 2
        assert record.logprobs is not None
        tokens = record.logprobs["content"]
        assert len(tokens) == record.usage.completion_tokens, "one entry per output token"
        assert all(len(t["top_logprobs"]) == 2 and t["logprob"] <= 0 for t in tokens)
    assert by_id[plain.id].params["presence_penalty"] == 0.1
    assert by_id[row.id].params["presence_penalty"] == 0.7 and by_id[row.id].params["seed"] == 3
