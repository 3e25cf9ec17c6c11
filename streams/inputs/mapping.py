"""The input mapping options, parsed once (by ``kafkagen produce``, ``run`` and ``preflight``) into
one frozen object: how rows become prompt records and which partition each goes to."""

from __future__ import annotations

from dataclasses import dataclass

from streams.config import KeyBy
from streams.inputs.answers import LastTurn
from streams.inputs.formats import FormatName, MappingOptions

__all__ = ["InputMapping"]


@dataclass(frozen=True)
class InputMapping:
    """The values of the input mapping options (:func:`mapping_options`): how rows become prompt
    records and which partition each goes to. ``None`` and ``()`` mean "not given"."""

    format: str = FormatName.AUTO.value
    prompt_field: str | None = None
    id_field: str | None = None
    system: str | None = None
    keep_fields: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    key_by: KeyBy | None = None
    last_turn: LastTurn = "auto"
    skip_unreadable: bool = False
    """a folder input's files that are not prompt files are left out, not refused."""

    def options(self, run_id: str | None) -> MappingOptions:
        """The reader's :class:`streams.inputs.MappingOptions` for run ``run_id``.

        Raises:
            ConfigError: the combination is invalid (e.g. ``--format dataset`` without
                ``--prompt-field``; :class:`MappingOptions` says which).
        """
        return MappingOptions(
            format=FormatName(self.format),
            prompt_field=self.prompt_field,
            id_field=self.id_field,
            system=self.system,
            keep_fields=self.keep_fields,
            tags=self.tags,
            run_id=run_id,
            last_turn=self.last_turn,
        )

    def argv(self) -> list[str]:
        """The same options as ``kafkagen produce`` flags, for a command line that runs the
        producer (the main job); options not given are left out."""
        args: list[str] = []
        if self.format != FormatName.AUTO.value:
            args += ["--format", self.format]
        if self.last_turn != "auto":
            args += ["--last-turn", self.last_turn]
        if self.skip_unreadable:
            args.append("--skip-unreadable")
        for flag, value in (
            ("--prompt-field", self.prompt_field),
            ("--id-field", self.id_field),
            ("--system", self.system),
            ("--key-by", self.key_by),
        ):
            if value is not None:
                args += [flag, value]
        for name in self.keep_fields:
            args += ["--keep-field", name]
        for tag in self.tags:
            args += ["--tag", tag]
        return args
