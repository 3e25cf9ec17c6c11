"""What the main job checks of its local prompt inputs before it starts anything
(:func:`check_prompts`, used by :mod:`launch.run.job`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import zstandard

from streams.errors import InputError
from streams.inputs import CHUNK_BYTES, InputSpec, open_input, read_rows, resolve_inputs

__all__ = ["check_prompts"]


def check_prompts(prompts: Sequence[str], *, skip_unreadable: bool = False) -> None:
    """Check, before anything starts, that each local prompt input exists and can be read (files,
    globs and folders, as :func:`streams.inputs.resolve_inputs` resolves them with
    ``skip_unreadable``; ``-`` and ``s3://`` inputs are left to the producer).

    Raises:
        InputError: no such file, a folder holding files that are not prompt files, a glob
            matching nothing, a file that cannot be read, only local inputs and none holds a row
            (empty, blank lines only, ``[]``: a run of nothing); the message names them.
    """

    def no_s3() -> Any:
        raise AssertionError("s3:// inputs are not resolved here")

    local = [p for p in prompts if p != "-" and not p.startswith("s3://")]
    specs = resolve_inputs(local, no_s3, skip_unreadable=skip_unreadable)
    for spec in specs:
        if not os.access(spec.location, os.R_OK):
            raise InputError("cannot be read: check its permissions", source=spec.name)
    if specs and len(local) == len(prompts) and not any(_has_a_row(spec) for spec in specs):
        raise InputError(
            "holds no prompt (empty, or blank lines only): there is nothing to generate",
            source=", ".join(prompts),
        )


def _has_a_row(spec: InputSpec) -> bool:
    """Whether the local input ``spec`` holds a row that is not blank (read up to the first one)."""

    def no_s3() -> Any:
        raise AssertionError("a local input")

    try:
        with open_input(spec, no_s3) as opened:
            rows = read_rows(opened, source=spec.name, limit=CHUNK_BYTES)
            return any(row.text is not None or row.too_long for row in rows)
    except (InputError, OSError, EOFError, zstandard.ZstdError):
        return True  # not readable to a row: the producer reports it with its line
