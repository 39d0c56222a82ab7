"""WSGI entry point for gunicorn: ``gunicorn app:app`` (config from AUTOSCALER_CONFIG)."""
from autoscaler.app import create_app

app = create_app()
