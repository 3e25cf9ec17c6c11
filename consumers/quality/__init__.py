"""Judging results: the flags of one completion (:mod:`.flags`), the quality gate over a run's
results (:mod:`.gate`, pure) and the consumer's part in the fleet-wide gate (:mod:`.fleet_gate`;
docs/gate.md)."""
