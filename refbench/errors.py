"""Errors and the exit codes they map to."""

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130


class RefbenchError(Exception):
    """A user-facing failure: printed as one line, exits with ``code``."""

    code = EXIT_ERROR

    def __init__(self, message: str, detail: str | None = None):
        super().__init__(message)
        self.detail = detail  # extra lines (e.g. a build log tail) shown after the message


class ConfigError(RefbenchError):
    pass


class RefError(RefbenchError):
    pass


class BuildError(RefbenchError):
    pass


class RunError(RefbenchError):
    pass
