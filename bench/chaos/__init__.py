"""The randomized fault audit: ``python -m bench.chaos --seed S --faults N``.

Modules: :mod:`.schedule` (the seeded fault schedule, pure), :mod:`.inputs` (the input file with
poison lines), :mod:`.pipeline` (the processes and the audit's settings), :mod:`.faults`
(injecting and undoing faults), :mod:`.monitor` (commits and ownership sampled during the run),
:mod:`.collect` (reading the run back), :mod:`.audit` (the checks, pure), :mod:`.report` (table,
summary, JSON) and :mod:`.__main__` (the command line).
"""
