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
    """A build that failed. `sha` names the commit whose build failed; None when the failure is
    not one commit's (no Go, the toolchain, the target's build settings), so a caller can skip a
    commit that does not build and stop on anything else."""

    def __init__(self, message: str, detail: str | None = None, sha: str | None = None):
        super().__init__(message, detail)
        self.sha = sha


class RunError(RefbenchError):
    pass
