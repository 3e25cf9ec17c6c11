"""The generation consumer's membership of its Kafka consumer group: the partition assignor
(:mod:`.assignor`), the group consumer it joins with (:mod:`.membership`), the rebalance listener
(:mod:`.rebalance`) and which run its prompts topic belongs to (:mod:`.ownership`)."""
