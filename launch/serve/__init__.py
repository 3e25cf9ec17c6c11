"""The fleet launcher ``kafkagen serve``: one SGLang server per GPU, detached under supervisord
(docs/serve.md).

- :mod:`launch.serve.spec`: the :class:`FleetSpec` (GPUs, ports, parsers, flags, template);
- :mod:`launch.serve.sglang_args`: the SGLang command line built from it and the command template;
- :mod:`launch.serve.model_copy`: the one-time model copy to a RAM disk;
- :mod:`launch.serve.fleet`: start, readiness, status, logs, stop (:class:`Fleet`);
- :mod:`launch.serve.cli`: the click group.
"""

from __future__ import annotations
