"""refbench: tell, with evidence, whether a change made a Go storage tool faster or slower."""

__version__ = "0.1.0"


def _gitpython_uses_a_clean_git() -> None:
    """GitPython runs `git version` when it is first imported, with whatever git PATH names first:
    name it the git refbench.tools finds (no cache directory of refbench's on the way)."""
    import os
    from . import tools
    found = tools.which("git")
    if found:
        os.environ.setdefault("GIT_PYTHON_GIT_EXECUTABLE", found)


_gitpython_uses_a_clean_git()
