"""The migslice scheduler extender: filter and prioritize for kube-scheduler over HTTPS."""

from extender.app import create_app
from extender.settings import ExtenderSettings
from extender.state import ExtenderState

__all__ = ["ExtenderSettings", "ExtenderState", "create_app"]
