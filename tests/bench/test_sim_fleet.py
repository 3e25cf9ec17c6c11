"""The simulated fleet in processes of their own (bench/fleet/sim_fleet.py, ``--sim-processes``):
each answers chat on its port, its stats come back over HTTP, a restart gives fresh engines on the
same ports, and their CPU is counted."""

from __future__ import annotations

import httpx

from bench.fleet.sim_fleet import Sampler, SimFleet
from simulator import DEFAULT_PROFILE


async def test_simulator_processes_answer_report_stats_restart_and_count_their_cpu() -> None:
    fleet = SimFleet(2, DEFAULT_PROFILE, 50.0, processes=True)
    try:
        await fleet.start()
        urls = fleet.urls
        assert len(set(urls)) == 2
        body = {
            "model": DEFAULT_PROFILE.served_model_name,
            "max_tokens": 20,
            "messages": [{"role": "user", "content": "hi"}],
        }
        async with httpx.AsyncClient(timeout=30) as http:
            answer = await http.post(f"{urls[0]}/v1/chat/completions", json=body)
        assert answer.status_code == 200, answer.text
        sample = await fleet.sample()
        assert [s.requests_finished for s in sample.stats] == [1, 0]
        assert fleet.cpu_seconds() > 0
        sampler = Sampler(fleet, 0.05)
        await sampler.start()
        await sampler.stop()
        assert len(sampler.samples) >= 2
        await fleet.restart()
        assert fleet.urls == urls
        assert [s.requests_finished for s in (await fleet.sample()).stats] == [0, 0]
    finally:
        await fleet.stop()
    assert fleet.cpu_seconds() == 0  # no process left
