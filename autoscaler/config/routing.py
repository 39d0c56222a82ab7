"""``routing:`` (the label names read from alerts) and ``rules:`` (routes for alerts without them)."""
from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from autoscaler.models import Action
from autoscaler.config.common import Frozen, Step, regex_risk

class RoutingConfig(Frozen):
    """Label names read from alerts (for Grafana legacy notifications: rule tags)."""

    pool_label: str = "autoscaler_pool"
    action_label: str = "autoscaler_action"
    step_label: str = "autoscaler_step"
    node_label: str = Field(default="node", description="Label that names a node in scale-in alerts "
                            "(dcgm-exporter: Hostname).")


class RuleConfig(Frozen):
    """Routes alerts that carry no routing labels; the first match wins."""

    match: dict[str, str] = Field(default_factory=dict)
    match_re: dict[str, str] = Field(default_factory=dict)
    pool: str
    action: Action
    step: Step | None = None

    @field_validator("match_re")
    @classmethod
    def _compiles(cls, v: dict[str, str]) -> dict[str, str]:
        for label, pattern in v.items():
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{label}: not a valid regular expression: {exc}") from None
            problem = regex_risk(pattern)
            if problem:
                raise ValueError(f"{label}: {problem}")
        return v

    @model_validator(mode="after")
    def _has_matcher(self) -> "RuleConfig":
        if not self.match and not self.match_re:
            raise ValueError("needs `match` or `match_re`")
        return self
