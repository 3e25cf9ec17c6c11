"""WindowPolicy: fill the server's slots plus a small queue, back off on overload, stay in bounds."""

from __future__ import annotations

import random

import pytest

from consumers.window import WindowConfig, WindowPolicy


def test_initial_window_is_slots_plus_standing_queue() -> None:
    assert WindowPolicy(WindowConfig(max_running=16, target_queue=4)).size == 20
    assert WindowPolicy(WindowConfig(initial_size=8)).size == 8
    assert WindowPolicy(WindowConfig(max_running=512, max_size=64)).size == 64
    assert WindowPolicy().size == WindowConfig().initial_size


def test_grows_to_fill_the_reported_free_slots_in_one_reading() -> None:
    policy = WindowPolicy(WindowConfig(max_running=16, target_queue=4))
    policy.observe_overload(now=0.0)
    assert policy.size == 10
    # After the cooldown, 6 of the 16 slots are free and nothing is queued: refill them all.
    policy.observe_metrics(running=10, queued=0, now=20.0, in_flight=10)
    assert policy.size == 16 + 4
    # The same reading again (gauges polled faster than requests finish) changes nothing.
    policy.observe_metrics(running=10, queued=0, now=21.0, in_flight=10)
    assert policy.size == 20


def test_converges_on_an_unknown_slot_count_and_keeps_the_target_queue() -> None:
    """A simulated server with 30 slots the policy is not told about."""
    slots, target = 30, 3
    policy = WindowPolicy(WindowConfig(target_queue=target, initial_size=4, max_size=200))
    sizes = []
    for tick in range(40):
        in_flight = policy.size  # the consumer always has input to fill its window
        running, queued = min(in_flight, slots), max(0, in_flight - slots)
        policy.observe_metrics(running=running, queued=queued, now=float(tick), in_flight=in_flight)
        sizes.append(policy.size)
    assert sizes[-10:] == [slots + target] * 10
    assert sizes.index(slots + target) <= 4, f"slow start fills 30 slots from 4 in a few readings: {sizes}"
    assert max(sizes) <= 2 * slots + target, "overshoots by at most one doubling"


def test_queue_longer_than_target_shrinks_to_running_plus_target() -> None:
    policy = WindowPolicy(WindowConfig(max_running=64, target_queue=4))
    assert policy.size == 68
    # KV-cache bound: only 40 run, 28 wait.
    policy.observe_metrics(running=40, queued=28, now=0.0, in_flight=68)
    assert policy.size == 44
    policy.observe_metrics(running=40, queued=28, now=1.0, in_flight=68)
    assert policy.size == 44, "a repeated reading does not shrink twice"


def test_input_bound_consumer_does_not_inflate_its_window() -> None:
    policy = WindowPolicy(WindowConfig(initial_size=10, target_queue=4))
    for tick in range(20):  # 9 in flight, all running: the server could take more, but we have no input
        policy.observe_metrics(running=9, queued=0, now=float(tick), in_flight=9)
    assert policy.size == 10
    policy.observe_metrics(running=10, queued=0, now=20.0, in_flight=10)  # input is back: window full
    assert policy.size == 2 * 10 + 4, "slow start: twice what runs, plus the standing queue"


def test_overload_halves_once_per_cooldown_and_blocks_growth() -> None:
    config = WindowConfig(max_running=30, target_queue=2, cooldown_s=10.0, min_size=2)
    policy = WindowPolicy(config)
    assert policy.size == 32
    policy.observe_overload(now=100.0)
    assert policy.size == 16
    policy.observe_overload(now=105.0)  # same congestion episode
    assert policy.size == 16
    policy.observe_metrics(running=10, queued=0, now=106.0, in_flight=16)
    assert policy.size == 16, "no growth while cooling down"
    for i in range(5):
        policy.observe_overload(now=110.0 + 10 * i)
    assert policy.size == 2, "never below min_size"


def test_aimd_without_metrics_adds_one_per_window_of_completions() -> None:
    policy = WindowPolicy(WindowConfig(initial_size=4, increase_step=1, max_size=6))
    for i in range(4):
        policy.observe_completion(latency_s=2.0, now=float(i))
    assert policy.size == 5
    for i in range(4):
        policy.observe_completion(latency_s=2.0, now=10.0 + i)
    assert policy.size == 5, "needs a whole window (5) of completions"
    policy.observe_completion(latency_s=2.0, now=20.0)
    assert policy.size == 6
    for i in range(50):
        policy.observe_completion(latency_s=2.0, now=30.0 + i)
    assert policy.size == 6, "capped at max_size"


def test_fresh_metrics_take_over_from_completions() -> None:
    policy = WindowPolicy(WindowConfig(initial_size=4, metrics_stale_s=30.0))
    policy.observe_metrics(running=4, queued=4, now=0.0, in_flight=8)
    for i in range(20):
        policy.observe_completion(latency_s=1.0, now=1.0 + i)
    assert policy.size == 4
    for i in range(4):  # metrics went stale: AIMD resumes
        policy.observe_completion(latency_s=1.0, now=100.0 + i)
    assert policy.size == 5


def test_latency_above_the_limit_counts_as_overload() -> None:
    policy = WindowPolicy(
        WindowConfig(max_running=16, target_queue=4, max_latency_s=100.0, latency_alpha=0.5)
    )
    policy.observe_completion(latency_s=60.0, now=0.0)
    assert policy.size == 20
    policy.observe_completion(latency_s=180.0, now=1.0)  # mean 120 s > 100 s
    assert policy.latency_s == pytest.approx(120.0)
    assert policy.size == 10


def test_missing_gauges_are_ignored() -> None:
    policy = WindowPolicy(WindowConfig(initial_size=6))
    policy.observe_metrics(running=None, queued=None, now=0.0)
    policy.observe_metrics(running=6, queued=None, now=0.0)
    assert policy.size == 6
    for i in range(6):  # and the missing gauges did not silence AIMD
        policy.observe_completion(latency_s=1.0, now=float(i))
    assert policy.size == 7


@pytest.mark.parametrize("seed", range(10))
def test_random_observations_stay_within_min_and_cap(seed: int) -> None:
    rng = random.Random(seed)
    config = WindowConfig(min_size=3, max_size=40, max_running=rng.choice([None, 8, 32, 100]), target_queue=2)
    policy = WindowPolicy(config)
    now = 0.0
    for _ in range(3000):
        now += rng.expovariate(1.0)
        kind = rng.random()
        if kind < 0.4:
            policy.observe_metrics(
                running=rng.randrange(0, 120),
                queued=rng.randrange(0, 50),
                now=now,
                in_flight=rng.choice([None, rng.randrange(0, 60)]),
            )
        elif kind < 0.95:
            policy.observe_completion(latency_s=rng.uniform(0.0, 300.0), now=now)
        else:
            policy.observe_overload(now=now)
        assert config.min_size <= policy.size <= config.cap <= 40


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_size": 0}, "min_size"),
        ({"min_size": 10, "max_size": 5}, "min_size"),
        ({"max_running": 0}, "max_running"),
        ({"target_queue": -1}, "target_queue"),
        ({"increase_step": 0}, "increase_step"),
        ({"decrease_factor": 1.0}, "decrease_factor"),
        ({"decrease_factor": 0.0}, "decrease_factor"),
        ({"latency_alpha": 0.0}, "latency_alpha"),
        ({"cooldown_s": -1.0}, "cooldown_s"),
        ({"max_latency_s": 0.0}, "max_latency_s"),
    ],
)
def test_invalid_config_raises(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WindowConfig(**kwargs)  # type: ignore[arg-type]


def test_invalid_observations_raise() -> None:
    policy = WindowPolicy()
    with pytest.raises(ValueError, match="negative"):
        policy.observe_metrics(running=-1, queued=0, now=0.0)
    with pytest.raises(ValueError, match="latency_s"):
        policy.observe_completion(latency_s=float("nan"), now=0.0)


def test_slow_start_is_idempotent_on_a_stale_reading() -> None:
    """SGLang refreshes its gauges every ``decode_log_interval`` decode steps: the same reading
    seen twice must not double the window twice."""
    policy = WindowPolicy(WindowConfig(initial_size=8, target_queue=4))
    policy.observe_metrics(running=8, queued=0, now=0.0, in_flight=8)
    assert policy.size == 20
    policy.observe_metrics(running=8, queued=0, now=1.0, in_flight=20)
    assert policy.size == 20


def test_a_full_kv_cache_holds_the_window_at_running_plus_the_standing_queue() -> None:
    """SGLang's automatic running limit is in the thousands: the KV cache is the real limit. A
    cache fuller than ``max_token_usage`` stops growth even though slots look free."""
    policy = WindowPolicy(WindowConfig(max_running=4096, target_queue=4, max_size=512, max_token_usage=0.9))
    assert policy.size == 512
    policy.observe_metrics(running=300, queued=2, now=0.0, in_flight=302, token_usage=0.97)
    assert policy.size == 304
    policy.observe_metrics(running=300, queued=0, now=1.0, in_flight=304, token_usage=0.97)
    assert policy.size == 304, "no growth while the cache is full"
    policy.observe_metrics(running=304, queued=0, now=2.0, in_flight=304, token_usage=0.5)
    assert policy.size == 512, "room in the cache again: back to the cap"


def test_max_token_usage_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="max_token_usage"):
        WindowConfig(max_token_usage=0.0)


def test_a_short_queue_on_a_kv_bound_server_grows_by_at_most_a_doubling() -> None:
    """SGLang's automatic running limit is in the thousands; a server whose KV cache holds 150
    requests must not be flooded back to the cap by one reading with a short queue."""
    policy = WindowPolicy(WindowConfig(max_running=4096, target_queue=4, max_size=1024))
    policy.observe_metrics(running=150, queued=874, now=0.0, in_flight=1024)
    assert policy.size == 154
    policy.observe_metrics(running=150, queued=0, now=1.0, in_flight=154, token_usage=0.6)
    assert policy.size == 304
