"""A run's identity: every name derived from its run id (:mod:`.naming`), which run a prompts topic
belongs to (:mod:`.ownership`) and the run record on its control topic (:mod:`.record`); the rule
is docs/runs.md."""
