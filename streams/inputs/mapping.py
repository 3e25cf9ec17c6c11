"""The input mapping options, parsed once (by ``kafkagen produce``, ``run`` and ``preflight``) into
one frozen object: how rows become prompt records (:class:`streams.inputs.MappingOptions`, checked
when it is made) and which partition each goes to."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from streams.config import KeyBy
from streams.inputs.formats import FormatName, MappingOptions

__all__ = ["InputMapping"]


@dataclass(frozen=True)
class InputMapping:
    """The values of the input mapping options (``producers.cli.mapping_options``).

    Attributes:
        rows: how rows become prompt records; its ``run_id`` is left None (:meth:`options` sets it).
        key_by: how records are keyed to partitions; None: the producer's setting.
        skip_unreadable: a folder input's files that are not prompt files are left out, not refused.
    """

    rows: MappingOptions = field(default_factory=MappingOptions)
    key_by: KeyBy | None = None
    skip_unreadable: bool = False

    def options(self, run_id: str | None) -> MappingOptions:
        """The reader's :class:`streams.inputs.MappingOptions` for run ``run_id``."""
        return dataclasses.replace(self.rows, run_id=run_id)

    def with_template_files(self, folder: Path) -> InputMapping:
        """This mapping with its template texts that came from no file written to ``folder``
        (:meth:`PromptTemplate.with_files`), so :meth:`argv` names files, never multi-line text."""
        if self.rows.template is None:
            return self
        rows = dataclasses.replace(self.rows, template=self.rows.template.with_files(folder))
        return dataclasses.replace(self, rows=rows)

    def argv(self) -> list[str]:
        """The same options as ``kafkagen produce`` flags, for a command line that runs the
        producer (the main job); options not given are left out."""
        rows = self.rows
        args: list[str] = []
        if rows.format != FormatName.AUTO:
            args += ["--input-format", rows.format.value]
        if rows.last_turn != "auto":
            args += ["--last-turn", rows.last_turn]
        if self.skip_unreadable:
            args.append("--skip-unreadable")
        if rows.samples != 1:
            args += ["--samples", str(rows.samples)]
        if rows.limit is not None:
            args += ["--limit", str(rows.limit)]
        for flag, value in (
            ("--prompt-field", rows.prompt_field),
            ("--id-field", rows.id_field),
            ("--system", rows.system),
            ("--key-by", self.key_by),
        ):
            if value is not None:
                args += [flag, value]
        if rows.template is not None:
            for flag, text, path in (
                ("--template", rows.template.user, rows.template.files[0]),
                ("--system-template", rows.template.system, rows.template.files[1]),
            ):
                if text is not None:
                    args += [flag, str(path) if path is not None else text]
        for name in rows.keep_fields:
            args += ["--keep-field", name]
        for tag in rows.tags:
            args += ["--tag", tag]
        return args
