"""Fixtures of the monitoring tests (helpers live in monitoring_support.py)."""

from monitoring_support import make_stack

__all__ = ["make_stack"]
