"""Tables of the store (SQLAlchemy Core)."""
from __future__ import annotations

from sqlalchemy import Boolean, Column, Float, Index, Integer, MetaData, String, Table, Text

metadata = MetaData()

pools = Table(
    "pools",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("tracked_count", Integer, nullable=True),
    Column("count_changed_at", Float, nullable=True),
    Column("paused", Boolean, nullable=False, default=False),
    Column("pause_reason", Text, nullable=False, default=""),
    Column("last_scale_out_at", Float, nullable=True),
    Column("last_scale_in_at", Float, nullable=True),
    Column("failures", Integer, nullable=False, default=0),
    Column("backoff_until", Float, nullable=True),
    Column("lease_owner", String(128), nullable=True),
    Column("lease_until", Float, nullable=True),
    Column("last_event_id", Integer, nullable=True),
    Column("short_until", Float, nullable=True),
    Column("short_reason", Text, nullable=False, default=""),
)

events = Table(
    "events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("time", Float, nullable=False),
    Column("pool", String(64), nullable=True),
    Column("source", String(32), nullable=False),
    Column("action", String(32), nullable=True),
    Column("outcome", String(32), nullable=False),
    Column("from_count", Integer, nullable=True),
    Column("to_count", Integer, nullable=True),
    Column("reason", Text, nullable=False),
    Column("alerts", Text, nullable=False, default="[]"),
    Column("details", Text, nullable=False, default="{}"),
    Index("ix_events_pool_id", "pool", "id"),
    Index("ix_events_time", "time"),
)

dedup = Table(
    "dedup",
    metadata,
    Column("key", String(512), primary_key=True),
    Column("pool", String(64), nullable=False),
    Column("expires_at", Float, nullable=False),
    Column("claim", String(64), nullable=False),
    Index("ix_dedup_expires", "expires_at"),
)

recommendations = Table(  # proportional mode: recent desired sizes, for the scale-in stabilization window
    "recommendations",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("pool", String(64), nullable=False),
    Column("time", Float, nullable=False),
    Column("desired", Integer, nullable=False),
    Index("ix_recommendations_pool_time", "pool", "time"),
)

leases = Table(  # process-wide leases (the reconciler's): one holder across workers and replicas
    "leases",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("owner", String(128), nullable=False),
    Column("until", Float, nullable=False),
)

pool_views = Table(  # each pool's cloud view as the reconciler (or the last decision) read it
    "pool_views",
    metadata,
    Column("pool", String(64), primary_key=True),
    Column("current", Integer, nullable=True),
    Column("busy", Boolean, nullable=False, default=False),
    Column("detail", Text, nullable=False, default=""),
    Column("in_flight", Integer, nullable=False, default=0),
    Column("error", Text, nullable=True),
    Column("read_at", Float, nullable=False),
)

node_views = Table(  # each node-aware pool's nodes as the reconciler last listed them (what pages and the API show)
    "node_views",
    metadata,
    Column("pool", String(64), primary_key=True),
    Column("nodes", Text, nullable=False, default="[]"),  # JSON: the API's node bodies, newest first
    Column("error", Text, nullable=True),
    Column("read_at", Float, nullable=False),
)

repairs = Table(  # nodes in repair (docs/repair.md): one row from the repair's start to the node's removal or cancel
    "repairs",
    metadata,
    Column("pool", String(64), primary_key=True),
    Column("node", String(253), primary_key=True),
    Column("since", Float, nullable=False),
    Column("state", String(32), nullable=False),  # cordoned | waiting | draining | removing
    Column("reason", Text, nullable=False, default=""),
    Column("replacement", Integer, nullable=True),  # the pool's size asked for the replacement (None: none asked)
    Column("error", Text, nullable=False, default=""),  # the last failure that keeps it going (shown, not fatal)
    Column("updated_at", Float, nullable=False),
    Column("evicted", Text, nullable=False, default=""),  # the pods it evicted, ``namespace/name`` comma-separated
)

repair_alerts = Table(  # the alert firings that asked for a node's repair, and an operator's cancel (repair_alerts.py)
    "repair_alerts",
    metadata,
    Column("pool", String(64), primary_key=True),
    Column("node", String(253), primary_key=True),
    Column("fingerprint", String(200), primary_key=True),  # the alert's, as its sender gave it (bounded)
    Column("starts_at", String(64), primary_key=True),  # the firing's start as sent: a new firing has a new one
    Column("seen_at", Float, nullable=False),
    Column("cancelled_at", Float, nullable=True),  # set by an operator's cancel: repeats of this firing are skipped
)

gangs = Table(  # all-or-nothing scale-outs (docs/gang.md): one row from the ask to provisioned or rolled back
    "gangs",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("pool", String(64), nullable=False),  # the pool asked now (a group's next pool: a new row)
    Column("grp", String(64), nullable=False, default=""),  # the group whose pools are tried in turn ("" none)
    Column("request", String(320), nullable=False, default=""),  # ProvisioningRequest ``ns/name`` ("" by hand)
    Column("before", Integer, nullable=False),  # the pool's size before the ask: what a roll-back goes back to
    Column("asked", Integer, nullable=False),  # nodes asked, all at once
    Column("known", Text, nullable=False, default="[]"),  # JSON: the pool's node names before the ask
    Column("started", Float, nullable=False),
    Column("deadline", Float, nullable=False),  # started + the pool's provision_time
    Column("state", String(16), nullable=False),  # waiting | provisioned | rolled_back | failed
    Column("tried", Text, nullable=False, default=""),  # pools of the group already tried, comma-separated
    Column("reason", Text, nullable=False, default=""),
    Column("updated_at", Float, nullable=False),
    Column("nodes", Text, nullable=False, default="[]"),  # JSON: once provisioned, the nodes still booked
)

removal_intents = Table(  # node removals about to be sent: kept until the cloud's view settles each (scale_in.py)
    "removal_intents",
    metadata,
    Column("pool", String(64), primary_key=True),
    Column("node", String(253), primary_key=True),  # a Kubernetes node name is at most 253 characters
    Column("owner", String(128), nullable=False),  # the decision's lease owner (its cordons' mark)
    Column("at", Float, nullable=False),
    Column("from_count", Integer, nullable=False),  # the pool's size the removal was decided on
)
