"""refbench: tell, with evidence, whether a change made a Go storage tool faster or slower."""

__version__ = "0.1.0"


def _gitpython_uses_a_clean_git() -> None:
    """GitPython runs `git version` when it is first imported, with whatever git PATH names first:
    name it the git refbench.tools finds (no cache directory of refbench's on the way).

    The one read of the environment at import, and it must be: GitPython reads its variable and
    runs git when it is imported (git/__init__.py calls refresh()), which the command line's own
    imports (builds, refs, sources) do before cli.main reads the environment. It reads PATH and
    where the caches are, and nothing is kept: paths.layout() stays the command line's to install."""
    import os
    import shutil
    from . import paths, tools
    machine = paths.Layout.from_environ(os.environ)
    found = shutil.which("git", path=tools.clean_path(layout=machine))
    if found:
        found = os.path.abspath(found)
        os.environ.setdefault("GIT_PYTHON_GIT_EXECUTABLE", found)


_gitpython_uses_a_clean_git()
