"""The backend for unit tests, refbench.mock's MockBackend (a local directory stands for the
remote, nothing is started), under the name the tests have always used."""
from refbench.mock import MockBackend as FakeBackend  # noqa: F401
