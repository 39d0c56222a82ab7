"""The config file's shape as pydantic models, one module per section (validation only; the core reads
``models.PoolSpec``). A leaf: nothing here looks up the provider registry; the loader (``autoscaler.config.load``)
passes the provider names in the validation context and validates each provider's own section itself."""
from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

from pydantic import Field, model_validator

from autoscaler.config.cluster import DEFAULT_CLUSTER, ClusterConfig, KubernetesConfig, cluster_problems
from autoscaler.config.common import (DEFAULT_GPU_RESOURCES, MAX_MATCHED_LABEL, MAX_NODES, POOL_NAME, Count,
                                        Frozen, Step, regex_risk)
from autoscaler.config.gang import ProvisioningRequestsConfig
from autoscaler.config.groups import CapacityConfig, GroupConfig, group_problems
from autoscaler.config.pools import (DefaultsConfig, DirectionConfig, PoolConfig, ScaleInConfig, ScheduleConfig,
                                       Victims)
from autoscaler.config.replay import ReplayConfig, ReplayRule
from autoscaler.config.routing import RoutingConfig, RuleConfig
from autoscaler.config.server import (AZURE_ACTION_GROUPS_APP, SCOPES, AuthConfig, BasicUser, BearerToken, EntraId,
                                      GrafanaHmac, InfluxConfig, QueryToken, Scope, ServerConfig, StoreConfig,
                                      credential_problems)

__all__ = ["AZURE_ACTION_GROUPS_APP", "AuthConfig", "BasicUser", "BearerToken", "CapacityConfig", "Config", "Count",
           "DEFAULT_GPU_RESOURCES", "DefaultsConfig", "DirectionConfig", "EntraId", "GrafanaHmac", "GroupConfig",
           "InfluxConfig", "ClusterConfig", "DEFAULT_CLUSTER", "KubernetesConfig", "MAX_MATCHED_LABEL", "MAX_NODES",
           "POOL_NAME", "PoolConfig", "QueryToken", "ReplayConfig", "ReplayRule", "RoutingConfig", "RuleConfig",
           "SCOPES", "ScaleInConfig", "ScheduleConfig", "Scope", "ServerConfig", "Step", "StoreConfig", "Victims",
           "credential_problems", "group_problems", "reference_problems", "regex_risk"]


class Config(Frozen):
    """The whole config file."""

    server: ServerConfig
    store: StoreConfig = StoreConfig()
    defaults: DefaultsConfig = DefaultsConfig()
    routing: RoutingConfig = RoutingConfig()
    rules: list[RuleConfig] = Field(default_factory=list)
    pools: list[PoolConfig] = Field(min_length=1)
    groups: list[GroupConfig] = Field(default_factory=list)
    influxdb: InfluxConfig | None = None
    replay: ReplayConfig | None = None
    kubernetes: KubernetesConfig | None = None
    clusters: list[ClusterConfig] = Field(default_factory=list)
    provisioning_requests: ProvisioningRequestsConfig | None = None

    @model_validator(mode="after")
    def _requests_need_a_cluster(self) -> "Config":
        if self.provisioning_requests is not None and self.kubernetes is None and not getattr(self, "clusters", None):
            raise ValueError("provisioning_requests: needs the `kubernetes:` section (the requests, their "
                             "PodTemplates and the nodes are read from the cluster)")
        return self

    @model_validator(mode="after")
    def _references(self) -> "Config":
        problems = reference_problems([p.name for p in self.pools], [r.pool for r in self.rules],
                                      [r.pool for r in self.replay.rules] if self.replay else [],
                                      [g.name for g in self.groups])
        problems += group_problems(self.groups, [p.name for p in self.pools])
        problems += cluster_problems(self.kubernetes, list(self.clusters), [p.cluster for p in self.pools])
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def cluster_settings(self) -> dict[str, KubernetesConfig]:
        """Each configured cluster by name: ``kubernetes:`` is the one named "default"; none without either."""
        if self.kubernetes is not None:
            return {DEFAULT_CLUSTER: self.kubernetes}
        return {c.name: c for c in self.clusters}

    @property
    def clustered(self) -> bool:
        """Whether the service sees any cluster (``kubernetes:`` or ``clusters:``)."""
        return self.kubernetes is not None or bool(self.clusters)

    def cluster_of(self, pool: PoolConfig) -> str:
        """The cluster a pool's nodes join: its ``cluster:``, else the only one ("default" when there is none)."""
        if pool.cluster is not None:
            return pool.cluster
        names = list(self.cluster_settings())
        return names[0] if len(names) == 1 else DEFAULT_CLUSTER

    @model_validator(mode="after")
    def _credentials(self) -> "Config":
        """Credential names are unique (they are the actor in the event log) and name configured pools."""
        problems = credential_problems(self.server.auth, {p.name for p in self.pools})
        if problems:
            raise ValueError("\n".join(problems))
        return self


def reference_problems(pools: list[Any], rule_pools: list[Any], replay_pools: list[Any],
                       groups: Sequence[Any] = ()) -> list[str]:
    """Every duplicate pool name and every rule naming no configured pool or group (cross-field: checked on the raw
    file too, so that check-config reports them beside the field errors)."""
    counts = Counter(n for n in pools if isinstance(n, str))  # a set and a count: linear in the pools
    routable = set(counts) | {n for n in groups if isinstance(n, str)}
    problems = []
    dupes = sorted(n for n, seen in counts.items() if seen > 1)
    if dupes:
        problems.append(f"pools: duplicate pool names: {', '.join(dupes)}")
    for where, refs, known in (("rules", rule_pools, routable), ("replay.rules", replay_pools, routable)):
        problems += [f"{where}[{i}].pool: no pool named {pool!r}" for i, pool in enumerate(refs)
                     if isinstance(pool, str) and pool not in known]
    return problems
