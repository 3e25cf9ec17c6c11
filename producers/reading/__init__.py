"""From input lines to prompt records: reading an input ahead of the publisher (:mod:`.reader`),
making and checking records (:mod:`.maker`, :mod:`.limits`), duplicate ids (:mod:`.ids`) and the
bad lines report (:mod:`.badlines`)."""
