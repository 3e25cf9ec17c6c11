"""Structure of docker-compose.yml and the app image's Dockerfile (no Docker engine needed).

The compose file is parsed with ``yaml.safe_load``, which resolves anchors and ``<<:`` merge keys
the way compose does. ``${VAR:-default}`` references are left as written, except where a test
resolves them to their defaults (:func:`_defaults`) to feed the values to :class:`Settings`.
"""

from __future__ import annotations

import os
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from launch.serve.sglang_args import server_argv
from launch.serve.spec import DEFAULT_HEALTH_PATH, FleetSpec
from launch.stack.kafka import KAFKA_VERSION
from streams.config import Settings

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"

GPUS = range(7)
SGLANG = [f"sglang-{n}" for n in GPUS]
GENERATE = [f"generate-{n}" for n in GPUS]
PROBE = [f"probe-{n}" for n in GPUS]
BASE = ["kafka", "minio", "minio-init"]
APP = [*GENERATE, *PROBE, "sink", "producer"]

Service = dict[str, Any]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Service]:
    svcs = compose["services"]
    assert isinstance(svcs, dict)
    return svcs


def _argv(value: str | list[Any]) -> list[str]:
    """A command or entrypoint as an argument list (compose splits a string shell-like)."""
    return shlex.split(value) if isinstance(value, str) else [str(v) for v in value]


def _env(svc: Service) -> dict[str, str]:
    env = svc.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def _defaults(value: str) -> str:
    """Compose interpolation with no variable set: ``${X:-d}`` -> ``d``, ``$$`` -> ``$``."""
    value = re.sub(r"\$\{\w+:?-([^}]*)\}", r"\1", value)
    return value.replace("$$", "$")


def _option(argv: list[str], flag: str) -> str:
    """The value after ``flag`` in ``argv`` (the flag must appear exactly once)."""
    assert argv.count(flag) == 1, f"{flag} appears {argv.count(flag)} times in {argv}"
    return argv[argv.index(flag) + 1]


def _seconds(duration: str) -> float:
    """A compose duration such as ``1m30s`` or ``20m`` in seconds."""
    units = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    parts = re.findall(r"(\d+(?:\.\d+)?)(us|ms|s|m|h)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, f"bad duration {duration!r}"
    return sum(float(n) * units[u] for n, u in parts)


def _host_ip(port: str | dict[str, Any]) -> str:
    """The host address a published port binds to ("" = every interface)."""
    if isinstance(port, dict):
        return str(port.get("host_ip", ""))
    parts = str(port).split(":")
    return parts[0] if len(parts) == 3 else ""


def _depends(svc: Service) -> dict[str, str]:
    deps = svc.get("depends_on") or {}
    if isinstance(deps, list):  # short syntax: service_started
        return dict.fromkeys(deps, "service_started")
    return {name: spec["condition"] for name, spec in deps.items()}


def _healthcheck_argv(svc: Service) -> list[str]:
    test = svc["healthcheck"]["test"]
    argv = _argv(test)
    assert argv[0] in {"CMD", "CMD-SHELL"}, argv
    return argv[1:]


# --- services and images ---------------------------------------------------------------------------


def test_services_and_profiles(services: dict[str, Service]) -> None:
    assert set(services) == {*BASE, *SGLANG, *PROBE, *GENERATE, "sink", "producer"}
    for name in BASE:
        assert "profiles" not in services[name], f"{name} must start without a profile"
    for name in [*SGLANG, *PROBE, *GENERATE, "sink"]:
        assert services[name].get("profiles") == ["gpu"], name
    assert services["producer"].get("profiles") == ["tools"]


def test_images_are_pinned(services: dict[str, Service]) -> None:
    for name, svc in services.items():
        image = svc.get("image")
        assert isinstance(image, str), f"{name} has no image"
        _repo, sep, tag = image.rpartition(":")
        assert sep and "/" not in tag and tag, f"{name}: image {image!r} has no tag"
        assert tag != "latest", f"{name}: image {image!r} is not pinned"
    assert services["kafka"]["image"] == f"apache/kafka:{KAFKA_VERSION}" == "apache/kafka:4.1.1"
    assert services["minio"]["image"].split(":", 1)[1].startswith("RELEASE.")
    assert services["minio-init"]["image"].rsplit("/", 1)[1].startswith("mc:RELEASE.")
    sglang_images = {services[name]["image"] for name in SGLANG}
    assert len(sglang_images) == 1
    assert re.fullmatch(r"lmsysorg/sglang:v0\.5\.\d+(\.post\d+)?", sglang_images.pop())


def test_app_image_is_built_from_the_repo(services: dict[str, Service]) -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for name in APP:
        svc = services[name]
        assert svc["build"]["context"] == ".", name
        assert svc["image"] == f"kafkagen:{version}", name


def test_published_ports_bind_loopback_only(services: dict[str, Service]) -> None:
    published: dict[str, int] = {}
    for name, svc in services.items():
        assert svc.get("network_mode") != "host", f"{name} uses the host network"
        for port in svc.get("ports", []):
            assert _host_ip(port) == "127.0.0.1", f"{name}: port {port!r} is not bound to 127.0.0.1"
            published[name] = published.get(name, 0) + 1
    assert published == {"kafka": 1, "minio": 2, **dict.fromkeys(SGLANG, 1)}
    host_ports = [str(services[name]["ports"][0]).split(":")[1] for name in SGLANG]
    assert host_ports == [str(30000 + n) for n in GPUS]


def test_named_volumes_are_declared(compose: dict[str, Any], services: dict[str, Service]) -> None:
    declared = set(compose["volumes"])
    used = set()
    for svc in services.values():
        for vol in svc.get("volumes", []):
            if isinstance(vol, str) and not vol.startswith((".", "/", "$")):
                used.add(vol.split(":", 1)[0])
            elif isinstance(vol, dict) and vol.get("type") == "volume":
                used.add(vol["source"])
    assert used == declared == {"kafka-data", "minio-data"}


# --- Kafka and MinIO ---------------------------------------------------------------------------------


def test_kafka_is_single_node_kraft(services: dict[str, Service]) -> None:
    kafka = services["kafka"]
    env = _env(kafka)
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert env["KAFKA_NODE_ID"] == "1"
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == "1@kafka:9093"
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    assert "CLUSTER_ID" in env
    for key in (
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR",
    ):
        assert env[key] == "1", key

    listeners = dict(item.split("://", 1) for item in env["KAFKA_LISTENERS"].split(","))
    advertised = dict(item.split("://", 1) for item in env["KAFKA_ADVERTISED_LISTENERS"].split(","))
    protocols = dict(item.split(":", 1) for item in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    controller = env["KAFKA_CONTROLLER_LISTENER_NAMES"]
    assert set(protocols) == set(listeners)
    assert controller in listeners and controller not in advertised
    assert sorted(advertised.values()) == ["127.0.0.1:29092", "kafka:9092"]
    assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] in advertised
    # the host listener is the one published, on the port it advertises
    host = next(name for name, addr in advertised.items() if addr.startswith("127.0.0.1:"))
    assert listeners[host] == ":29092"
    assert kafka["ports"] == ["127.0.0.1:29092:29092"]

    assert f"kafka-data:{env['KAFKA_LOG_DIRS']}" in kafka["volumes"]
    probe = _healthcheck_argv(kafka)
    assert probe[0].endswith("/kafka-broker-api-versions.sh")
    assert _option(probe, "--bootstrap-server") == "localhost:9092"


def test_minio_and_bucket(services: dict[str, Service]) -> None:
    minio, init = services["minio"], services["minio-init"]
    assert "minio-data:/data" in minio["volumes"]
    assert _argv(minio["command"])[:2] == ["server", "/data"]
    assert _healthcheck_argv(minio) == ["mc", "ready", "local"]
    env = _env(minio)
    assert _defaults(env["MINIO_ROOT_USER"]) == "kafkagen"
    assert len(_defaults(env["MINIO_ROOT_PASSWORD"])) >= 8  # MinIO refuses shorter ones

    assert _depends(init) == {"minio": "service_healthy"}
    assert _env(init) == {k: env[k] for k in ("MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD")}
    script = " ".join(_argv(init["entrypoint"]) + _argv(init["command"]))
    assert "http://minio:9000" in script
    assert re.search(r"mc mb --ignore-existing \w+/kafkagen\b", script), script
    assert init.get("restart") == "no"


# --- gpu profile ---------------------------------------------------------------------------------------


def test_sglang_servers(services: dict[str, Service]) -> None:
    device_ids: list[str] = []
    for n, name in enumerate(SGLANG):
        svc = services[name]
        argv = _argv(svc["command"])
        assert argv[:3] == ["python3", "-m", "sglang.launch_server"], name
        assert _option(argv, "--reasoning-parser") == "qwen3"
        assert _option(argv, "--tool-call-parser") == "qwen25"
        assert "--enable-metrics" in argv
        assert _option(argv, "--host") == "0.0.0.0"
        assert _option(argv, "--port") == "30000"
        assert _defaults(_option(argv, "--model-path")) == "/models/Qwen/Qwen3-8B"
        assert _defaults(_option(argv, "--served-model-name")) == "Qwen/Qwen3-8B"

        probe = _healthcheck_argv(svc)
        assert probe[0] == "curl" and "-fsS" in probe
        assert probe[-1] == "http://localhost:30000/health_generate"
        health = svc["healthcheck"]
        assert _seconds(health["start_period"]) >= 10 * 60, "model load + CUDA graphs need minutes"
        assert _seconds(health["timeout"]) > 20, "SGLang's own health generation timeout is 20 s"

        (model_mount,) = svc["volumes"]
        assert model_mount["type"] == "bind" and model_mount["target"] == "/models"
        assert model_mount["read_only"] is True
        assert _defaults(model_mount["source"]) == "/dev/shm/models"
        assert svc["ipc"] == "host" and svc["shm_size"]
        assert svc["ports"] == [f"127.0.0.1:{30000 + n}:30000"]

        (device,) = svc["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
        assert device["device_ids"] == [str(n)], name
        device_ids.extend(device["device_ids"])
    assert sorted(device_ids) == [str(n) for n in GPUS]


def test_sglang_command_is_the_fleet_launchers(services: dict[str, Service]) -> None:
    """x-sglang's command is exactly what ``kafkagen serve`` builds for the compose's parameters
    (launch/serve/sglang_args.py), and its healthcheck probes the launcher's health path."""
    model = "${MODEL:-Qwen/Qwen3-8B}"
    spec = FleetSpec(
        model_path=f"/models/{model}",
        served_model_name=model,
        gpus=(0,),
        host="0.0.0.0",
        port=30000,
        reasoning_parser="qwen3",
        tool_call_parser="qwen25",
        metrics=True,
        cache_report=True,
    )
    for name in SGLANG:
        assert _argv(services[name]["command"]) == server_argv(spec, 0, python="python3"), name
        assert _healthcheck_argv(services[name])[-1] == f"http://localhost:30000{DEFAULT_HEALTH_PATH}"


def test_one_consumer_per_server(services: dict[str, Service]) -> None:
    for n, name in enumerate(GENERATE):
        svc = services[name]
        assert _argv(svc["command"]) == [
            "python",
            "-m",
            "consumers.generate",
            "--server",
            f"http://sglang-{n}:30000",
            "--instance-id",
            name,
        ]
        assert _depends(svc) == {f"probe-{n}": "service_completed_successfully", "kafka": "service_healthy"}
        assert svc["restart"] == "unless-stopped"
        # SIGTERM drains in-flight requests for consumer.shutdown_deadline_s before compose kills
        assert _seconds(svc["stop_grace_period"]) > Settings().consumer.shutdown_deadline_s


def test_each_server_is_probed_before_its_consumer_starts(services: dict[str, Service]) -> None:
    """probe-N runs ``kafkagen serve probe`` (the preflight, launch/preflight/check.py, as ``serve up``
    and ``run`` do) once sglang-N is healthy, once: a failing probe must not be restarted in a loop."""
    for n, name in enumerate(PROBE):
        svc = services[name]
        assert _argv(svc["command"]) == ["kafkagen", "serve", "probe", "--server", f"http://sglang-{n}:30000"]
        assert _depends(svc) == {f"sglang-{n}": "service_healthy"}
        assert svc["restart"] == "no"


def test_sink(services: dict[str, Service]) -> None:
    sink = services["sink"]
    assert _argv(sink["command"]) == ["python", "-m", "sinks.s3"]
    assert _depends(sink) == {"kafka": "service_healthy", "minio-init": "service_completed_successfully"}
    assert sink["restart"] == "unless-stopped"


def test_producer(services: dict[str, Service]) -> None:
    producer = services["producer"]
    assert _argv(producer["command"]) == ["python", "-m", "producers.prompts", "/data/prompts.jsonl"]
    assert producer["volumes"] == [{"type": "bind", "source": "./data", "target": "/data", "read_only": True}]
    assert _depends(producer) == {"kafka": "service_healthy"}


def test_app_environment_configures_settings(
    services: dict[str, Service], monkeypatch: pytest.MonkeyPatch
) -> None:
    envs = [_env(services[name]) for name in APP]
    assert all(env == envs[0] for env in envs), "all app containers share one environment"
    env = envs[0]
    assert env["AWS_EC2_METADATA_DISABLED"] == "true"
    minio = _env(services["minio"])
    assert env["KAFKAGEN_S3__ACCESS_KEY_ID"] == minio["MINIO_ROOT_USER"]
    assert env["KAFKAGEN_S3__SECRET_ACCESS_KEY"] == minio["MINIO_ROOT_PASSWORD"]
    served = _option(_argv(services["sglang-0"]["command"]), "--served-model-name")
    assert env["KAFKAGEN_GENERATION__MODEL"] == served

    # the variable names must be ones Settings reads: load them and look at the result
    for key in [k for k in os.environ if k.startswith("KAFKAGEN_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, _defaults(value))
    s = Settings()
    assert s.kafka.bootstrap_servers == "kafka:9092"
    assert s.s3.endpoint_url == "http://minio:9000"
    assert s.s3.bucket == "kafkagen"
    assert s.s3.access_key_id == "kafkagen"
    assert s.s3.secret_access_key.get_secret_value() == _defaults(minio["MINIO_ROOT_PASSWORD"])
    assert s.generation.model == "Qwen/Qwen3-8B"
    # the probes and the consumers share the production budget and thinking on
    assert s.generation.max_tokens == 4096
    assert s.generation.chat_template_kwargs == {"enable_thinking": True}
    assert s.run_id == "default" and s.replay_of is None
    assert (s.topics.prompts, s.topics.completions, s.topics.errors) == (
        "default.prompts",
        "default.completions",
        "default.errors",
    )


# --- Dockerfile --------------------------------------------------------------------------------------


def _dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, args = line.partition(" ")
            out.append((op.upper(), " ".join(args.split())))
    return out


def test_dockerfile_installs_the_package_without_extras() -> None:
    assert DOCKERFILE.is_file()
    instructions = _dockerfile_instructions()
    assert instructions[0] == ("FROM", "python:3.11-slim")
    copied = {arg.split()[0] for op, arg in instructions if op == "COPY"}
    assert {"pyproject.toml", "streams", "producers", "consumers", "sinks", "launch"} <= copied
    runs = [arg for op, arg in instructions if op == "RUN"]
    installs = [re.search(r"pip install ([^&;]*)", run) for run in runs]
    targets = [m.group(1).split() for m in installs if m]
    assert targets == [["."]], f"expected exactly `pip install .`, got {targets}"
    text = DOCKERFILE.read_text()
    for word in ("[serve", "[local", ",serve", ",local", "sglang", "llama"):
        assert word not in " ".join(runs), f"the image must not install {word}"
    assert "USER" in {op for op, _ in instructions}, "the app must not run as root"
    assert "AWS_EC2_METADATA_DISABLED=true" in text
