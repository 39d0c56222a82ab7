"""All or nothing: a job that needs N nodes gets N or none (docs/gang.md). ``ask.py`` asks one pool (or a group's
first pool that can hold it) for every node at once and stores the gang; ``carry.py``, from the reconciler's tick,
records ``provisioned`` once every node is GPU-ready, or removes the nodes that came by the deadline and asks the
group's next pool (``rolled_back``)."""
