"""The usage tests' fixtures; their helpers live in usage_support.py, which test modules import by name
(a `from conftest import` would find whichever conftest.py pytest put first on sys.path)."""

from usage_support import make_stack

__all__ = ["make_stack"]
