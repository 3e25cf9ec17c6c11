"""What every kafkagen command shares: settings flags, one exit-code map, one logging set-up.

Commands are click commands (https://click.palletsprojects.com, click 8; installed with
faust-streaming anyway). A command decorated with :func:`settings_options` accepts every setting
as a flag, nested groups joined by ``.`` and ``_`` written ``-`` (``--kafka.bootstrap-servers``,
``--generation.max-tokens``, ``--run-id``). The flags are hidden from ``--help`` (there are
dozens); ``--settings-help`` lists them with their environment variables. Flags beat
``KAFKAGEN_*`` environment variables, which beat defaults (:func:`streams.config.load_settings`).

:func:`run_command` runs a command the same way for the ``kafkagen`` console script and for the
``python -m <module>`` entry points: one logging set-up (:func:`streams.logs.configure`), and one
map from what went wrong to the exit status, :func:`exit_code`:

======  =============  ===========================================================================
status  name           when
======  =============  ===========================================================================
0       OK             done
1       FAILED         the command ran and its result has problems (bad lines, missing ids, a
                       fatal error while running: the message says what to do)
2       USAGE          bad flags, settings or input (:class:`~streams.errors.ConfigError`,
                       :class:`~streams.errors.InputError`, an unusable path)
3       UNAVAILABLE    Kafka, S3, an inference server or a local service cannot be reached or
                       started
130     INTERRUPTED    SIGINT or SIGTERM before the end
======  =============  ===========================================================================
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import sys
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, TypeVar

import click
from aiokafka.errors import KafkaError
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from streams import logs
from streams.config import COMMON_SETTINGS, ENV_PREFIX, KeyBy, Settings, load_settings
from streams.errors import ConfigError, ExitCode, KafkagenError
from streams.inputs import (
    LAST_TURN_RULES,
    MAX_SAMPLES,
    FormatName,
    InputMapping,
    LastTurn,
    MappingOptions,
    prompt_template,
)
from streams.records import OPTIONAL_SAMPLING

__all__ = [
    "MAPPING_OPTIONS",
    "SummaryGroup",
    "command_settings",
    "exit_code",
    "flag_given",
    "input_format_option",
    "log_level",
    "mapping_options",
    "port",
    "run_command",
    "settings_options",
    "skip_unreadable_option",
    "template_options",
]

F = TypeVar("F", bound=Callable[..., Any])

_META = "kafkagen.settings"

HELP_OPTIONS: Final = ["-h", "--help"]
"""Both spellings of help, on every command (click's default is ``--help`` only)."""


def first_sentence(text: str) -> str:
    """``text``'s first sentence (up to the first ``. ``, whitespace collapsed), whole."""
    words = " ".join(text.split())
    end = words.find(". ")
    return words if end < 0 else words[: end + 1]


class SummaryGroup(click.Group):
    """A command group whose --help lists each subcommand with its whole first sentence (its
    ``short_help`` when set), wrapped: click 8.3's ``Group.format_commands`` cuts a summary to the
    terminal width minus the longest name and adds ``...`` (``click/core.py``, 8.3.3), which lost
    the end of most summaries."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.short_help or first_sentence(command.help or "")))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def exit_code(exc: BaseException) -> ExitCode:
    """The exit status for an error that ended a command (the one map; module docstring): a
    kafkagen error's own ``exit_status`` (:mod:`streams.errors`); for others, what they mean."""
    if isinstance(exc, KafkagenError):
        return exc.exit_status
    if isinstance(exc, KeyboardInterrupt | asyncio.CancelledError):
        return ExitCode.INTERRUPTED
    if isinstance(exc, click.UsageError):
        return ExitCode.USAGE
    if isinstance(exc, KafkaError | TimeoutError | ConnectionError):
        return ExitCode.UNAVAILABLE
    if isinstance(exc, OSError):  # a path that cannot be read or written
        return ExitCode.USAGE
    return ExitCode.FAILED


def run_command(
    command: click.Command,
    argv: Sequence[str] | None,
    *,
    prog: str,
    describe: Callable[[BaseException], str | None] | None = None,
) -> int:
    """Run ``command`` on ``argv`` (``None``: ``sys.argv[1:]``) and return its exit status.

    The command's callback returns an exit status (``None`` counts as 0). Errors it raises are
    printed as one ``error: ...`` line on stderr (``describe(exc)`` may word it better, e.g. name
    the Kafka address) and mapped by :func:`exit_code`; a usage error prints click's usage text.
    Nothing else is caught: a bug still shows its traceback.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        result = command.main(
            args=args, prog_name=prog, standalone_mode=False, help_option_names=HELP_OPTIONS
        )
    except click.exceptions.Exit as exc:  # --help, --settings-help
        return exc.exit_code
    except click.Abort:
        return ExitCode.INTERRUPTED
    except click.ClickException as exc:
        exc.show()
        return ExitCode.USAGE
    except (KafkagenError, KafkaError, TimeoutError, ConnectionError, OSError, asyncio.CancelledError) as exc:
        text = (describe(exc) if describe is not None else None) or f"error: {exc}"
        print(text, file=sys.stderr)
        return exit_code(exc)
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    if isinstance(result, int):
        return result
    return ExitCode.OK


LOG_LEVELS: Final = ("debug", "info", "warning", "error", "critical")
_LOG_LEVEL = "kafkagen.log_level"


def _configure_logging(ctx: click.Context, param: click.Parameter, value: str) -> None:
    defaulted = param.name is not None and ctx.get_parameter_source(param.name) in (
        click.core.ParameterSource.DEFAULT,
        click.core.ParameterSource.DEFAULT_MAP,
    )
    if defaulted and _LOG_LEVEL in ctx.meta:  # a group's --log-level holds for its subcommands
        return
    value = value.lower()
    ctx.meta[_LOG_LEVEL] = value
    logs.configure(getattr(logging, value.upper()))


def log_level(ctx: click.Context | None = None) -> str:
    """The running command's ``--log-level`` (one of :data:`LOG_LEVELS`)."""
    ctx = ctx or click.get_current_context()
    level = ctx.meta.get(_LOG_LEVEL, "info")
    assert isinstance(level, str)
    return level


# -- settings flags --------------------------------------------------------------------------------


_Path = tuple[str, ...]
"""A setting's place: ("kafka", "bootstrap_servers")."""


def _fields(model: type[BaseModel], path: _Path = ()) -> Iterator[tuple[_Path, FieldInfo]]:
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _fields(annotation, (*path, name))
        else:
            yield (*path, name), info


def _flag(path: _Path) -> str:
    return "--" + ".".join(p.replace("_", "-") for p in path)


_SHORT_FLAGS: Final[dict[_Path, str]] = {
    ("consumer", "retry_invalid"): "--retry-invalid",
    **{("generation", name): "--" + name.replace("_", "-") for name in (*OPTIONAL_SAMPLING, "extra_body")},
}
"""Settings that also answer to a short flag (the names users of peer tools know)."""


def _off_flag(path: _Path) -> str:
    """The flag that turns a bool setting off: ``--group.no-field``."""
    return _flag((*path[:-1], "no_" + path[-1]))


def _env(path: _Path) -> str:
    return ENV_PREFIX + "__".join(p.upper() for p in path)


def _kind(annotation: Any) -> str:
    """``bool``, ``list``, ``dict`` or ``text`` for a settings field's type (``X | None`` is X)."""
    origin = typing.get_origin(annotation)
    if origin in (types.UnionType, typing.Union):
        inner = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _kind(inner[0]) if len(inner) == 1 else "text"
    if annotation is bool:
        return "bool"
    if annotation is list or origin is list:
        return "list"
    if annotation is dict or origin is dict:
        return "dict"
    return "text"


def _nullable(annotation: Any) -> bool:
    """Whether a settings field's type admits ``None`` (``X | None``)."""
    origin = typing.get_origin(annotation)
    return origin in (types.UnionType, typing.Union) and type(None) in typing.get_args(annotation)


def _store(path: _Path, kind: str, nullable: bool) -> Callable[[click.Context, click.Parameter, Any], None]:
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value is None or value == ():
            return
        if nullable and value == "null":  # as pydantic-settings' CLI: the flag sets None
            value = None
        elif kind == "list":
            items: list[Any] = []
            for text in value:
                if text.lstrip().startswith("["):
                    items.extend(_json(path, text))
                else:
                    items.extend(part.strip() for part in text.split(",") if part.strip())
            value = items
        elif kind == "dict":
            value = _json(path, value)
        ctx.meta.setdefault(_META, {})[path] = value

    return callback


def _json(path: _Path, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"{text!r} is not JSON ({exc.msg})", param_hint=_flag(path)) from None


def _setting_lines(path: _Path, info: FieldInfo) -> list[str]:
    default = info.get_default(call_default_factory=True)
    flag = _flag(path)
    if _kind(info.annotation) == "bool":
        flag = f"{flag}/{_off_flag(path)}"
    lines = [f"  {flag}  {_env(path)}  (default: {default!r})"]
    if info.description:
        lines.append(f"      {info.description}")
    return lines


def _settings_help(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    fields = dict(_fields(Settings))
    lines = ["Settings (flag, environment variable, default: description).", "", "Most runs set:"]
    for dotted in COMMON_SETTINGS:
        path = tuple(dotted.split("."))
        lines += _setting_lines(path, fields[path])
    groups: dict[str, list[_Path]] = {}
    for path in fields:
        if ".".join(path) not in COMMON_SETTINGS:
            groups.setdefault(path[0] if len(path) > 1 else "", []).append(path)
    for group, paths in groups.items():
        title = Settings.model_fields[group].description if group else "the rest of the run"
        lines += ["", f"{group or 'run'}: {title}"]
        for path in paths:
            lines += _setting_lines(path, fields[path])
    lines += [
        "",
        'Lists take JSON (\'["a", "b"]\'), commas (a,b) or a repeated flag; dicts take JSON; null unsets',
        "a setting that may be unset (--replay-of null).",
    ]
    click.echo("\n".join(lines))
    ctx.exit(0)


def settings_options(*shown: str, log_default: str = "info") -> Callable[[F], F]:
    """Decorator for a click command: every setting as a flag, ``--settings-help`` and
    ``--log-level`` (the one logging set-up, :func:`streams.logs.configure`, done as soon as the
    flag is parsed; ``log_default`` is the command's default level).

    Only the settings named in ``shown`` (dotted paths, e.g. ``"run_id"``) appear in ``--help``;
    the others are hidden there and listed by ``--settings-help``. Read the result with
    :func:`command_settings`.
    """

    def decorate(command: F) -> F:
        for path, info in reversed(list(_fields(Settings))):
            kind = _kind(info.annotation)
            flag = _flag(path)
            name = "setting__" + "__".join(path)  # apart from the command's own parameters
            common: dict[str, Any] = {
                "default": None,
                "hidden": ".".join(path) not in shown,
                "expose_value": False,
                "help": f"{info.description or ''} [{_env(path)}]".strip(),
                "callback": _store(path, kind, _nullable(info.annotation)),
            }
            if kind == "bool":
                off = _off_flag(path)
                old_off = "--no-" + _flag(path)[2:]  # pydantic-settings' spelling: --no-group.field
                option = click.option(name, f"{flag}/{off}", f" /{old_off}", **common)
            else:
                flags = (flag, _SHORT_FLAGS[path]) if path in _SHORT_FLAGS else (flag,)
                option = click.option(name, *flags, metavar="VALUE", multiple=kind == "list", **common)
            command = option(command)
        command = click.option(
            "--log-level",
            "--loglevel",
            type=click.Choice(LOG_LEVELS, case_sensitive=False),
            default=log_default,
            show_default=True,
            expose_value=False,
            is_eager=True,
            callback=_configure_logging,
            help="log lines at this level and above, on stderr",
        )(command)
        return click.option(
            "--settings-help",
            is_flag=True,
            expose_value=False,
            is_eager=True,
            callback=_settings_help,
            help="list every setting with its flag and environment variable, then exit",
        )(command)

    return decorate


def command_settings(ctx: click.Context | None = None) -> Settings:
    """The :class:`Settings` of the running command: its settings flags over the environment.

    Raises:
        ConfigError: a value is malformed (the message names the setting, its flag and variable).
    """
    ctx = ctx or click.get_current_context()
    given: dict[_Path, Any] = ctx.meta.get(_META, {})  # click shares meta with child contexts
    nested: dict[str, Any] = {}
    for path, value in given.items():
        node = nested
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return load_settings(Settings, overrides=nested)


def flag_given(ctx: click.Context, *path: str) -> bool:
    """Whether the settings flag for ``path`` (e.g. ``"run_id"``) was on the command line."""
    return tuple(path) in ctx.meta.get(_META, {})


def input_format_option(help_text: str, flag: str = "--input-format") -> Callable[[F], F]:
    """The ``--input-format`` option (or ``flag``) of the commands that read prompt inputs (the
    value: a :class:`streams.inputs.FormatName`, ``auto`` by default), passed as ``format_``."""
    return click.option(
        flag,
        "format_",
        type=click.Choice([f.value for f in FormatName]),
        default=FormatName.AUTO.value,
        show_default=True,
        help=help_text,
    )


def skip_unreadable_option() -> Callable[[F], F]:
    """The ``--skip-unreadable`` flag of the commands that read prompt inputs (passed as
    ``skip_unreadable``): a folder input's files that are not prompt files are left out instead
    of refused (:mod:`streams.inputs.resolve`)."""
    return click.option(
        "--skip-unreadable",
        is_flag=True,
        help="a folder input: leave out its files that are not prompt files (JSON Lines, JSON arrays, "
        "Parquet, plain or compressed) instead of refusing the folder",
    )


def template_options() -> Callable[[F], F]:
    """``--template`` and ``--system-template`` (passed as ``template``, ``system_template``):
    prompts rendered from a row's fields (:func:`streams.inputs.prompt_template`)."""
    user = click.option(
        "--template",
        metavar="FILE|TEXT",
        help="render the user message from the row's fields with this Jinja2 template (a file, or the "
        "text itself), e.g. '{{ instruction }}'; nested fields as '{{ instances[0].input }}'; a row "
        "missing a field it reads is a bad row (docs/inputs.md, Templates)",
    )
    system = click.option(
        "--system-template",
        metavar="FILE|TEXT",
        help="render the system message likewise (with --template; empty: no system message)",
    )

    def decorate(command: F) -> F:
        return user(system(command))

    return decorate


def port(text: str | int) -> int:
    """A TCP port number (1-65535).

    Raises:
        ConfigError: not a number in range.
    """
    try:
        number = int(text)
    except ValueError:
        number = 0
    if not 1 <= number <= 65535:
        raise ConfigError(f"{text!r} is not a TCP port (1-65535)")
    return number


MAPPING_OPTIONS: Final = (
    "--input-format",
    "--prompt-field",
    "--id-field",
    "--system",
    "--keep-field",
    "--tag",
    "--key-by",
    "--last-turn",
    "--skip-unreadable",
    "--template",
    "--system-template",
    "--samples",
    "--limit",
)
"""The flags :func:`mapping_options` adds."""


def mapping_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator for a click command that reads prompt inputs: the input mapping options
    (:data:`MAPPING_OPTIONS`: ``--input-format``, ``--prompt-field``, ``--id-field``, ``--system``,
    ``--keep-field``, ``--tag``, ``--key-by``, ``--last-turn``, ``--skip-unreadable``), handed to
    the command as one keyword argument ``mapping`` (an :class:`InputMapping`). ``kafkagen
    produce`` and ``kafkagen run`` both use it, so their options cannot drift apart. ``--format`` is
    a hidden alias of ``--input-format`` (its old name, for scripts; both with different values: a
    usage error). Put it below ``@click.command``."""

    @functools.wraps(command)
    def wrapper(
        *args: Any,
        format_: str,
        old_format: str | None,
        prompt_field: str | None,
        id_field: str | None,
        system: str | None,
        keep_field: tuple[str, ...],
        tag: tuple[str, ...],
        key_by: KeyBy | None,
        last_turn: LastTurn,
        skip_unreadable: bool,
        template: str | None,
        system_template: str | None,
        samples: int,
        limit: int | None,
        **kwargs: Any,
    ) -> Any:
        if old_format is not None:
            if format_ != FormatName.AUTO.value and format_ != old_format:
                raise click.UsageError(
                    f"--format {old_format} and --input-format {format_}: --format is the old name of "
                    "--input-format; give one"
                )
            format_ = old_format
        rows = MappingOptions(
            template=prompt_template(template, system_template),
            samples=samples,
            limit=limit,
            format=FormatName(format_),  # a click.Choice of the names
            prompt_field=prompt_field,
            id_field=id_field,
            system=system,
            keep_fields=keep_field,
            tags=tag,
            last_turn=last_turn,
        )
        mapping = InputMapping(rows, key_by=key_by, skip_unreadable=skip_unreadable)
        return command(*args, mapping=mapping, **kwargs)

    decorators = [
        input_format_option("how the input rows are read (docs/inputs.md, Row formats)"),
        click.option(
            "--format",
            "old_format",
            type=click.Choice([f.value for f in FormatName]),
            hidden=True,
            help="the old name of --input-format, kept for scripts",
        ),
        click.option("--prompt-field", metavar="NAME", help="dataset rows: the field holding the prompt"),
        click.option("--id-field", metavar="NAME", help="the field holding the record id"),
        click.option("--system", metavar="TEXT", help="system prompt for rows that have none"),
        click.option(
            "--keep-field",
            multiple=True,
            metavar="NAME",
            help="copy this row field into metadata.extra (repeatable)",
        ),
        click.option("--tag", multiple=True, metavar="TAG", help="add to metadata.tags (repeatable)"),
        click.option(
            "--key-by",
            type=click.Choice(typing.get_args(KeyBy)),
            help="pick the partition round-robin by line (balanced, default), by a hash of the record id, "
            "or by a hash of the shared prefix (system prompt + tools); same as --producer.key-by",
        ),
        click.option(
            "--last-turn",
            type=click.Choice(LAST_TURN_RULES),
            default="auto",
            show_default=True,
            help="a conversation ending with an assistant turn: 'reference' sends the turns before it and "
            "keeps the answer in metadata.extra.reference, 'keep' sends it whole; 'auto': reference for "
            "sharegpt rows, keep for the others (docs/inputs.md, The last assistant turn)",
        ),
        skip_unreadable_option(),
        template_options(),
        click.option(
            "--samples",
            type=click.IntRange(1, MAX_SAMPLES),
            default=1,
            show_default=True,
            metavar="N",
            help="completions per prompt: each row is published as N records <id>#0 .. <id>#N-1; on "
            "SGLang those that start together go as one request with n (docs/inputs.md, Samples)",
        ),
        click.option(
            "--limit",
            type=click.IntRange(min=1),
            metavar="N",
            help="only the first N rows of the inputs, in order (blank lines not counted): try a "
            "dataset before running all of it; part of the run's resume point (docs/inputs.md, Limit)",
        ),
    ]
    decorated: Callable[..., Any] = wrapper
    for option in reversed(decorators):  # the first listed shows first in --help
        decorated = option(decorated)
    return decorated
