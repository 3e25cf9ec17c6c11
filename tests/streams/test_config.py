"""Settings: environment, CLI overrides, frozen objects, masked secrets, clear errors."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from streams.config import Settings, load_settings
from streams.errors import ConfigError
from streams.kafka import client_kwargs


@pytest.fixture(autouse=True)
def _no_kafkagen_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about defaults and precedence: the caller's KAFKAGEN_* variables must not leak in."""
    import os

    for key in [k for k in os.environ if k.startswith("KAFKAGEN_")]:
        monkeypatch.delenv(key)


def test_defaults_match_the_local_stack() -> None:
    s = Settings()
    assert s.kafka.bootstrap_servers == "127.0.0.1:9092"
    assert s.topics.partitions == 7
    assert s.generation.max_tokens == 4096
    assert s.generation.chat_template_kwargs == {"enable_thinking": True}


def test_environment_then_cli_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKAGEN_KAFKA__BOOTSTRAP_SERVERS", "broker-a:9092,broker-b:9092")
    monkeypatch.setenv("KAFKAGEN_GENERATION__MAX_TOKENS", "8192")
    monkeypatch.setenv("KAFKAGEN_TOPICS__PARTITIONS", "14")
    s = load_settings(Settings, ["--generation.max-tokens", "256", "--run-id", "replay-2"], prog="t")
    assert s.kafka.bootstrap_servers == "broker-a:9092,broker-b:9092"  # from the environment
    assert s.topics.partitions == 14
    assert s.generation.max_tokens == 256  # the flag beats the environment
    assert s.run_id == "replay-2"


def test_settings_are_frozen() -> None:
    s = Settings()
    with pytest.raises(ValidationError):
        s.run_id = "other"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        s.kafka.bootstrap_servers = "x:1"


def test_secrets_never_print(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKAGEN_KAFKA__SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("KAFKAGEN_KAFKA__SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("KAFKAGEN_KAFKA__SASL_USERNAME", "svc")
    monkeypatch.setenv("KAFKAGEN_KAFKA__SASL_PASSWORD", "hunter2-kafka")
    monkeypatch.setenv("KAFKAGEN_S3__SECRET_ACCESS_KEY", "hunter2-s3")
    s = Settings()
    for text in (repr(s), str(s), s.model_dump_json()):
        assert "hunter2" not in text
    # ...but the clients get the real values.
    kwargs = client_kwargs(s.kafka, role="test")
    assert kwargs["sasl_plain_password"] == "hunter2-kafka"
    assert kwargs["sasl_mechanism"] == "SCRAM-SHA-512"
    assert kwargs["security_protocol"] == "SASL_SSL"
    assert "ssl_context" in kwargs
    assert s.s3.secret_access_key.get_secret_value() == "hunter2-s3"


def test_bad_value_names_the_setting_and_how_to_set_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKAGEN_TOPICS__PARTITIONS", "zero")
    with pytest.raises(ConfigError) as info:
        load_settings(Settings, [], prog="t")
    message = str(info.value)
    assert "topics.partitions" in message
    assert "KAFKAGEN_TOPICS__PARTITIONS" in message
    assert "--topics.partitions" in message


@pytest.mark.parametrize("run_id", ["", "a/b", "a+b", "a b", ".hidden"])
def test_run_id_must_be_safe_in_s3_keys(run_id: str) -> None:
    with pytest.raises(ConfigError, match="run_id"):
        load_settings(Settings, ["--run-id", run_id], prog="t")


@pytest.mark.parametrize("url", ["notaurl", "127.0.0.1:30000", "ftp://h:1", "http://", "http://h:99999"])
def test_a_server_that_is_not_an_http_url_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    monkeypatch.setenv("KAFKAGEN_SERVERS", f'["http://127.0.0.1:30000", "{url}"]')
    with pytest.raises(ConfigError) as info:
        load_settings(Settings, [], prog="t")
    message = str(info.value)
    assert "servers" in message and repr(url) in message and "KAFKAGEN_SERVERS" in message


def test_http_and_https_server_urls_are_kept_as_given(monkeypatch: pytest.MonkeyPatch) -> None:
    urls = ["http://127.0.0.1:30000", "https://gpu-3.internal:8443/", "http://[::1]:30001"]
    monkeypatch.setenv("KAFKAGEN_SERVERS", json.dumps(urls))
    assert load_settings(Settings, [], prog="t").servers == urls


def test_settings_round_trip_through_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import SecretStr

    from streams.environment import settings_to_env

    original = load_settings(
        Settings, ["--run-id", "r7", "--generation.max-tokens", "321", "--topics.partitions", "3"], prog="t"
    )
    original = original.model_copy(
        update={
            "servers": ["http://127.0.0.1:1", "http://127.0.0.1:2"],
            "s3": original.s3.model_copy(update={"secret_access_key": SecretStr("s3cr3t")}),
        }
    )
    env = settings_to_env(original)
    assert env["KAFKAGEN_GENERATION__MAX_TOKENS"] == "321"
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    rebuilt = Settings()
    assert rebuilt.model_dump() == original.model_dump()
    assert rebuilt.s3.secret_access_key.get_secret_value() == "s3cr3t"


def test_malformed_json_in_the_environment_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKAGEN_SERVERS", "http://not-a-json-list")
    with pytest.raises(ConfigError, match=r"servers.*JSON"):
        load_settings(Settings, [], prog="t")


@pytest.mark.parametrize(
    ("variable", "says"),
    [
        ("KAFKAGEN_GENRATION__MAX_TOKENS", "did you mean KAFKAGEN_GENERATION?"),
        ("KAFKAGEN_RUNID", "did you mean KAFKAGEN_RUN_ID?"),
        ("KAFKAGEN_SERVER", "did you mean KAFKAGEN_SERVERS?"),
        ("KAFKAGEN_GENERATION_MAX_TOKENS", "did you mean KAFKAGEN_GENERATION__MAX_TOKENS?"),
        ("KAFKAGEN_STACK__HOME", "did you mean KAFKAGEN_HOME?"),
        ("KAFKAGEN_PROMPTS__TOPIC", "KAFKAGEN_* are: run_id, replay_of, servers, home, kafka"),
    ],
)
def test_a_misspelt_environment_variable_is_refused_not_ignored(
    monkeypatch: pytest.MonkeyPatch, variable: str, says: str
) -> None:
    monkeypatch.setenv(variable, "1")
    with pytest.raises(ConfigError) as err:
        load_settings(Settings)
    assert f"{variable}: no such setting, {says}" in str(err.value) and "(unset it)" in str(err.value)


def test_variables_of_other_owners_under_the_prefix_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    others = ("KAFKAGEN_AUDIT_TRACE", "KAFKAGEN_SINK_TEST_PAUSE", "KAFKAGEN_STACK__LLM_PARALLEL")
    for name in (*others, "KAFKAGEN_HOME"):
        monkeypatch.setenv(name, "8")
    assert load_settings(Settings).home == "8"


def test_an_unknown_top_level_setting_given_in_code_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"stack: no such setting \(unset KAFKAGEN_STACK"):
        load_settings(Settings, overrides={"stack": {"home": "x"}})


def test_reuse_from_must_name_another_run() -> None:
    with pytest.raises(ConfigError, match=r"consumer\.reuse_from names this run itself"):
        load_settings(Settings, overrides={"run_id": "a", "consumer": {"reuse_from": "a"}})
    assert (
        load_settings(
            Settings, overrides={"run_id": "b", "consumer": {"reuse_from": "a"}}
        ).consumer.reuse_from
        == "a"
    )
