"""gpu-pool-autoscaler: alert-driven node-pool autoscaling for GPU clusters."""

__version__ = "0.6.0"
