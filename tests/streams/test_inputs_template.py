"""Prompt templates (``--template``): rows rendered by Jinja2's sandbox, strict about fields."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from producers.progress import options_fingerprint
from streams.errors import ConfigError, InputError
from streams.inputs import FormatName, InputMapping, MappingOptions, parse_line, prompt_template
from tests.helpers import REPO_ROOT

pytestmark = pytest.mark.pure

INSTRUCTIONS = REPO_ROOT / "data" / "instructions"
ALPACA = "{{ instruction }}{% if instances[0].input %}\n\n{{ instances[0].input }}{% endif %}"


def _parse(row: object, template: str, system: str | None = None, **options: object) -> list[dict[str, str]]:
    mapped = MappingOptions(template=prompt_template(template, system), **options)  # type: ignore[arg-type]
    return parse_line(json.dumps(row).encode(), source="rows.jsonl", line=7, options=mapped).messages


def test_nested_fields_of_the_bundled_instruction_tasks_reach_the_prompt() -> None:
    options = MappingOptions(template=prompt_template(str(INSTRUCTIONS / "template.j2")))
    lines = (INSTRUCTIONS / "tasks.jsonl").read_bytes().splitlines()
    for n, raw in enumerate(lines, 1):
        row = json.loads(raw)
        record = parse_line(raw, source="tasks.jsonl", line=n, options=options)
        [user] = record.messages
        assert record.id == row["id"]
        assert user["content"].startswith(row["instruction"])
        given = row["instances"][0]["input"]
        assert user["content"] == (f"{row['instruction']}\n\n{given}" if given else row["instruction"])


KEYED = ALPACA.replace("instances[0].input", "instances[0]['input']")


@pytest.mark.parametrize(
    ("template", "row", "reason"),
    [
        (
            ALPACA,
            {"instances": [{"input": "x"}]},
            "instruction is missing; the row has instances",
        ),
        (ALPACA, {"instruction": "a"}, "template field instances is missing"),
        (ALPACA, {"instruction": "a", "instances": []}, "template field instances[0] is missing"),
        (ALPACA, {"instruction": "a", "instances": [{}]}, "template field instances[0].input is missing"),
        (KEYED, {"instruction": "a", "instances": [{}]}, "template field instances[0]['input'] is missing"),
        (ALPACA, {"instruction": None, "instances": [{"input": ""}]}, "template field instruction is null"),
        (
            ALPACA,
            {"instruction": " ", "instances": [{"input": ""}]},
            "rendered an empty user message",
        ),
    ],
)
def test_a_row_missing_a_field_is_a_bad_row_naming_it(
    template: str, row: dict[str, object], reason: str
) -> None:
    with pytest.raises(InputError) as err:
        _parse(row, template)
    assert str(err.value).startswith("rows.jsonl:7: ")
    assert reason in str(err.value)


def test_the_sandbox_refuses_python_internals() -> None:
    with pytest.raises(InputError, match="SecurityError: access to attribute '__class__'"):
        _parse({"q": "x"}, "{{ q }}{{ ''.__class__.__mro__ }}")


def test_system_template_renders_and_an_empty_one_means_no_system_message() -> None:
    system = "{% if persona is defined %}You are {{ persona }}.{% endif %}"
    assert _parse({"q": "hi", "persona": "a tutor"}, "{{ q }}", system) == [
        {"role": "system", "content": "You are a tutor."},
        {"role": "user", "content": "hi"},
    ]
    assert _parse({"q": "hi"}, "{{ q }}", system) == [{"role": "user", "content": "hi"}]


def test_static_system_prompt_and_keep_fields_work_beside_a_template() -> None:
    mapped = MappingOptions(template=prompt_template("{{ q }}"), system="Be brief.", keep_fields=("q",))
    record = parse_line(b'{"q": "hi", "id": 3}', source="r", line=1, options=mapped)
    assert record.messages[0] == {"role": "system", "content": "Be brief."}
    assert record.metadata.extra == {"q": "hi"} and record.id == "3"


@pytest.mark.parametrize(
    ("user", "system", "options", "message"),
    [
        ("{{ q ", None, {}, "--template: line 1: unexpected end of template"),
        ("hello {{ 1 }}", None, {}, "--template reads no field of the row"),
        ("promts.j2", None, {}, "--template 'promts.j2': no such file, and no template either"),
        (None, "{{ s }}", {}, "--system-template needs --template"),
        ("{{ q }}", "{{ s }}", {"system": "x"}, "--system and --system-template are alternatives"),
        ("{{ q }}", None, {"format": FormatName.SHAREGPT}, "drop --input-format sharegpt"),
        ("{{ q }}", None, {"prompt_field": "q"}, "drop --prompt-field"),
    ],
)
def test_a_bad_template_or_combination_is_refused_before_any_row(
    user: str | None, system: str | None, options: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        MappingOptions(template=prompt_template(user, system), **options)  # type: ignore[arg-type]


def test_a_template_text_travels_to_the_producer_as_a_file(tmp_path: Path) -> None:
    mapping = InputMapping(MappingOptions(template=prompt_template(ALPACA, "Be {{ tone }}.")))
    argv = mapping.with_template_files(tmp_path / "run").argv()
    assert argv == [
        "--template",
        str((tmp_path / "run" / "template.user.j2").resolve()),
        "--system-template",
        str((tmp_path / "run" / "template.system.j2").resolve()),
    ]
    again = prompt_template(argv[1], argv[3])
    assert again is not None and (again.user, again.system) == (ALPACA, "Be {{ tone }}.")
    on_file = InputMapping(MappingOptions(template=prompt_template(str(INSTRUCTIONS / "template.j2"))))
    assert on_file.with_template_files(tmp_path / "other").argv() == [
        "--template",
        str((INSTRUCTIONS / "template.j2").resolve()),
    ]
    assert not (tmp_path / "other").exists()


def test_a_changed_template_changes_the_resume_fingerprint() -> None:
    plain = options_fingerprint(MappingOptions())
    one = options_fingerprint(MappingOptions(template=prompt_template("{{ a }}")))
    other = options_fingerprint(MappingOptions(template=prompt_template("{{ b }}")))
    assert "template" not in plain and one["template"] != other["template"]
    assert one == options_fingerprint(MappingOptions(template=prompt_template("{{ a }}")))


@pytest.mark.parametrize(
    ("template", "row", "reason"),
    [
        ("{{ meta.items }}", {"meta": {"other": 1}}, "template field meta.items is missing"),
        ("{{ a.b }}", {"a": None}, "template field a is null"),
        ("{{ a ~ '' }}", {"a": None}, "template field a is null"),
        ("{{ a | string }}", {"a": None}, "template field a is null"),
        ("{{ xs | join(', ') }}", {"xs": ["a", None]}, "template field xs[1] is null"),
    ],
)
def test_a_null_or_missing_field_is_never_rendered_as_text(
    template: str, row: dict[str, object], reason: str
) -> None:
    with pytest.raises(InputError, match=reason.replace("[", r"\[").replace("]", r"\]")):
        _parse(row, template)


def test_a_mapping_field_named_like_a_dict_method_is_the_field_and_tojson_keeps_nulls() -> None:
    assert _parse({"meta": {"items": "apples"}}, "{{ meta.items }}")[-1]["content"] == "apples"
    tools = [{"name": "f", "default": None}]
    assert (
        _parse({"tools": tools}, "{{ tools | tojson }}")[-1]["content"] == '[{"name": "f", "default": null}]'
    )
    assert (
        _parse({"a": None, "b": "x"}, "{{ a | default('none given') }} {{ b }}")[-1]["content"]
        == "none given x"
    )
    optional = "{% if a is defined %}{{ a }}{% else %}-{% endif %}"
    assert _parse({"a": None}, optional)[-1]["content"] == "-"
