"""The Kubernetes tests' fixtures; their helpers live in kube_support.py, which test modules import by
name (a `from conftest import` would find whichever conftest.py pytest put first on sys.path)."""

from kube_support import qos_block, teams, test_image

__all__ = ["qos_block", "teams", "test_image"]
