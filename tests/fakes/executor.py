"""The MockExecutor, which lives in the package (refbench.mock) so `--executor mock` can use it
without importing the tests; re-exported here, where the tests have always found it."""
from refbench.mock import BASE_MEMORY, CALL_SECONDS, INFO_1, INFO_2, MockExecutor  # noqa: F401
