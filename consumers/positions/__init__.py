"""Where each assigned partition stands: the book of work from fetch to commit (:mod:`.jobs`),
the contiguous finished prefix (:mod:`.offsets`), when and what is committed (:mod:`.commits`),
and the position recovered when the group's committed offsets are gone (:mod:`.recovery`)."""
