"""The framework tests run gangs on the local backend: the same fixtures as tests/local."""

from tests.local.conftest import backend, home, no_process_left_behind

__all__ = ["backend", "home", "no_process_left_behind"]
