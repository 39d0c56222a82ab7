"""WSGI target for the fault drills: the real app with the HTTP test provider on pool ``gpu``."""
from __future__ import annotations

import os

from autoscaler.app import create_app
from tests.support.fakes.fault_cloud import HttpTestProvider

app = create_app(os.environ["AUTOSCALER_CONFIG"],
                 providers={"gpu": HttpTestProvider(os.environ["FAULT_CLOUD_URL"],
                                                    float(os.environ.get("FAULT_TIMEOUT", "10")))})
