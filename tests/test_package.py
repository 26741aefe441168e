"""refbench as an installed tool: the sdist and the wheel carry the templates, the bundled
scenarios and the s3restore source; installed into a fresh venv, the `refbench` command works
from a directory outside the checkout. And the GitHub Action and workflows pass actionlint."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT, need

PACKAGED = ("refbench/scenarios.toml", "refbench/templates/summary.md.j2", "refbench/templates/github.md.j2",
            "refbench/templates/report.html.j2", "refbench/templates/trend.html.j2",
            "refbench/tools_src/s3restore/main.go", "refbench/tools_src/s3restore/go.mod",
            "refbench/tools_src/s3restore/go.sum")

# a user's own scenarios file: the s5cmd target, one tiny scenario
USER_SCENARIOS = """
[targets.s5cmd]
repo = "https://github.com/peak/s5cmd"
build = ["go", "build", "-o", "{out}", "."]
binary = "s5cmd"
backend = "s3"

[[scenarios]]
name = "tiny upload"
target = "s5cmd"
fixture = { kind = "random", size = "64K", count = 40 }
  [[scenarios.steps]]
  name = "upload"
  command = "{{ bin }} {{ extra }} cp {{ fixture ~ '/*' }} {{ remote ~ '/up/' }}"
  cleanup = "{{ bin }} {{ extra }} rm {{ remote ~ '/up/*' }}"
"""


def _source_copy(dest: Path) -> Path:
    """The checkout's files as they are now (committed or not), without caches and symlinks, and
    without the page-cache tests' scratch dirs (.pagecache-*, made in the checkout to be on its
    disk): one removed by its test mid-copy failed this fixture in a CI trial (No such file)."""
    skip = {".git", ".venv", "tools", "builds", "__pycache__", ".pytest_cache", "build", "dist"}
    shutil.copytree(ROOT, dest, ignore=lambda d, names: [n for n in names if n in skip or n.endswith(".egg-info")
                                                         or n.startswith(".pagecache-")],
                    symlinks=True)
    return dest


@pytest.fixture(scope="module")
def dists(tmp_path_factory):
    """sdist and wheel, the wheel built from the unpacked sdist (what pipx does with an sdist)."""
    t0 = time.monotonic()
    d = tmp_path_factory.mktemp("dist")
    src = _source_copy(d / "src")
    code = ("import sys; from setuptools import build_meta as b; "
            "print(b.build_sdist(sys.argv[1]))")
    # `pip wheel .`: setuptools from PyPI in an isolated build environment, as pip and pipx do
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(d / "wheel0"), str(src)],
                   check=True, capture_output=True, text=True, timeout=900)
    env_dir = d / "buildenv"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True)
    subprocess.run([env_dir / "bin" / "python", "-m", "pip", "install", "-q", "setuptools>=68"], check=True,
                   capture_output=True, timeout=900)
    out = subprocess.run([env_dir / "bin" / "python", "-c", code, str(d / "sdist")], cwd=src, check=True,
                         capture_output=True, text=True).stdout.strip().splitlines()[-1]
    sdist = d / "sdist" / out
    unpacked = d / "unpacked"
    with tarfile.open(sdist) as tf:
        tf.extractall(unpacked, filter="data")
    (top,) = unpacked.iterdir()
    subprocess.run([env_dir / "bin" / "python", "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(d / "wheel"), str(top)], check=True, capture_output=True, text=True, timeout=900)
    (wheel,) = (d / "wheel").glob("refbench-*.whl")
    (direct,) = (d / "wheel0").glob("refbench-*.whl")
    return {"sdist": sdist, "wheel": wheel, "direct": direct, "seconds": time.monotonic() - t0}


def test_sdist_and_wheel_carry_the_package_data(dists):
    with tarfile.open(dists["sdist"]) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    missing = [p for p in PACKAGED if p not in names]
    assert not missing, f"sdist lacks {missing}"
    for wheel in (dists["wheel"], dists["direct"]):  # from the sdist, and `pip wheel .` of the checkout
        names = set(zipfile.ZipFile(wheel).namelist())
        missing = [p for p in PACKAGED if p not in names]
        assert not missing, f"{wheel.name} lacks {missing}"
    assert "refbench/paths.py" in names and "refbench/commands/doctor.py" in names
    assert not [n for n in names if n.startswith(("tests/", "templates/", "tools-src/"))]


@pytest.fixture(scope="module")
def installed(dists, tmp_path_factory):
    """A fresh venv with the wheel installed; its dependencies come from the test venv's
    site-packages through a .pth line (no second download of numpy and scipy)."""
    d = tmp_path_factory.mktemp("installed")
    venv = d / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (site,) = (venv / "lib").glob("python3*/site-packages")
    deps = [p for p in map(Path, sys.path) if p.name == "site-packages" and p.is_dir()]
    (site / "zz-refbench-test-deps.pth").write_text("\n".join(map(str, deps)) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--no-deps",
                    "-q", str(dists["wheel"])], check=True, capture_output=True, text=True, timeout=600)
    home = d / "home"  # outside the checkout, with an empty cache of its own
    home.mkdir()
    env = {**os.environ, "XDG_CACHE_HOME": str(d / "xdg"), "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"}
    env.pop("REFBENCH_BUILDS_DIR", None)
    env.pop("PYTHONPATH", None)
    return {"venv": venv, "home": home, "env": env, "xdg": d / "xdg"}


def refbench(installed, *args, cwd=None, timeout=900):
    return subprocess.run([str(installed["venv"] / "bin" / "refbench"), *args], cwd=cwd or installed["home"],
                          env=installed["env"], capture_output=True, text=True, timeout=timeout)


def test_installed_refbench_is_the_wheel_not_the_checkout(installed):
    code = "import refbench.paths as p; print(p.PACKAGE_DIR); print(p.CHECKOUT)"
    out = subprocess.run([installed["venv"] / "bin" / "python", "-c", code], env=installed["env"],
                         cwd=installed["home"], capture_output=True, text=True, check=True).stdout.split()
    assert out[0].startswith(str(installed["venv"])) and out[1] == "None"


def test_installed_list_and_doctor(installed):
    p = refbench(installed, "--list")
    assert p.returncode == 0, p.stderr
    assert "target s5cmd" in p.stdout and "target kubo" in p.stdout and "small files" in p.stdout
    p = refbench(installed, "doctor")
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"builds dir:  {installed['xdg'] / 'refbench' / 'builds'}" in p.stdout
    assert "installed at" in p.stdout and "(bundled;" in p.stdout
    for tool in ("hyperfine", "go", "git", "minio", "refbench-s3restore"):
        assert any(line.split()[:2] in (["ok", tool], ["warn", tool]) for line in p.stdout.splitlines()), tool


@pytest.mark.slow
def test_installed_comparison_with_a_user_scenarios_file_then_report(installed, s5_origin, builds_dir):
    work = installed["home"] / "project"
    work.mkdir()
    (work / "refbench.toml").write_text(USER_SCENARIOS)
    p = refbench(installed, "--list", cwd=work)
    assert p.returncode == 0 and "tiny upload" in p.stdout and "small files" not in p.stdout, p.stderr
    p = refbench(installed, "-s", "v1.0.0", "7", "--repo", str(s5_origin.path), "--quick", "--only", "upload",
                 "-r", "3", "-w", "1", "--rounds", "1", "--builds-dir", str(builds_dir), cwd=work)
    assert p.returncode == 0, p.stderr[-3000:]
    results = json.loads((work / "results.json").read_text())
    assert [sc["name"] for sc in results["scenarios"]] == ["tiny upload"]
    summary = (work / "summary.md").read_text()
    assert "MB/s" in summary and "objects/s" in summary
    # every view from the saved file, in another directory
    elsewhere = installed["home"] / "elsewhere"
    elsewhere.mkdir()
    saved = elsewhere / "saved.json"
    shutil.copy(work / "results.json", saved)
    p = refbench(installed, "report", str(saved), "--html", "r.html", "--csv", "r.csv", "--format", "github",
                 "-o", "comment.md", cwd=elsewhere)
    assert p.returncode == 0, p.stderr
    assert "<svg" in (elsewhere / "r.html").read_text()
    assert "tiny upload" in (elsewhere / "r.csv").read_text()
    assert (elsewhere / "comment.md").read_text().startswith("<!-- refbench:pr-comment -->")


def action_as_workflow(text: str) -> str:
    """action.yml as a reusable workflow, so actionlint (which lints workflows, not action
    metadata) checks its steps: expressions, contexts, the inputs used, and shellcheck on every
    run script. Text-based: inputs become workflow_call string inputs, runs.steps a job's steps."""
    lines = text.splitlines()
    top = {ln.split(":")[0]: i for i, ln in enumerate(lines) if ln and not ln.startswith((" ", "#"))}
    order = sorted(top.values())

    def section(key: str) -> list[str]:
        start = top[key]
        end = next((i for i in order if i > start), len(lines))
        return lines[start + 1:end]

    inputs = []
    for ln in section("inputs"):
        if ln.startswith("    default:") and "${{" in ln:
            ln = '    default: ""'  # contexts are not available in workflow_call defaults
        inputs.append("    " + ln if ln.strip() else ln)
        if ln.startswith("  ") and not ln.startswith("   ") and ln.rstrip().endswith(":"):
            inputs.append("        type: string")
    run = section("runs")
    steps_at = next(i for i, ln in enumerate(run) if ln.strip() == "steps:")
    steps = ["  " + ln if ln.strip() else ln for ln in run[steps_at + 1:]]
    return "\n".join(["name: refbench action (as a workflow, for actionlint)", "on:", "  workflow_call:",
                      "    inputs:", *inputs, "jobs:", "  action:", "    runs-on: ubuntu-latest", "    steps:",
                      *steps]) + "\n"


def _actionlint() -> str:
    found = shutil.which("actionlint", path=f"{ROOT / 'tools' / 'bin'}:{os.environ.get('PATH', '')}")
    if not found:
        need("actionlint", "make setup installs it from the Go module proxy")
    return found


def test_actionlint_passes_on_the_workflows():
    workflows = sorted(str(p) for p in (ROOT / ".github" / "workflows").glob("*.yml"))
    p = subprocess.run([_actionlint(), "-color=false", *workflows], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def test_actionlint_passes_on_the_action(tmp_path):
    wf = tmp_path / ".github" / "workflows" / "action.yml"
    wf.parent.mkdir(parents=True)
    wf.write_text(action_as_workflow((ROOT / "action.yml").read_text()))
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    p = subprocess.run([_actionlint(), "-color=false", str(wf)], cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr + "\n" + wf.read_text()
    # the conversion saw every step and input
    action = (ROOT / "action.yml").read_text()
    assert wf.read_text().count("- ") >= action.count("\n    - ")
    assert wf.read_text().count("type: string") == len(re.findall(r"^  [a-z-]+:$", action.split("outputs:")[0],
                                                                   re.MULTILINE))


def test_example_workflows_use_the_action():
    for name in ("bench-pr.yml", "bench-comment.yml", "bench-command.yml"):
        text = (ROOT / ".github" / "workflows" / name).read_text()
        assert "uses: OWNER/refbench@v1" in text, name
        assert "bench.py" not in text and "--repo" not in text and "setup.sh" not in text, name
    comment = (ROOT / ".github" / "workflows" / "bench-comment.yml").read_text()
    assert "actions/checkout" not in comment  # the write-token job checks nothing out


def test_paths_defaults(tmp_path, monkeypatch, request):
    from refbench import paths, tools

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("REFBENCH_BUILDS_DIR", raising=False)
    monkeypatch.delenv("REFBENCH_TOOLS_BIN", raising=False)
    assert paths.cache_root() == tmp_path / "xdg" / "refbench"
    # this test runs from a checkout: builds and tools stay in it, as before
    assert paths.CHECKOUT == ROOT and paths.default_builds_dir() == ROOT / "builds"
    assert paths.tools_bin() == ROOT / "tools" / "bin"
    # as installed from the wheel: the machine's settings say no checkout (paths.Layout.checkout)
    previous = paths.use(lambda: paths.Layout.from_environ(os.environ, checkout=None))
    request.addfinalizer(lambda: paths.use(previous))
    assert paths.default_builds_dir() == tmp_path / "xdg" / "refbench" / "builds"
    assert paths.tools_bin() == tmp_path / "xdg" / "refbench" / "bin"
    monkeypatch.setenv("REFBENCH_BUILDS_DIR", str(tmp_path / "mine"))
    assert paths.default_builds_dir() == tmp_path / "mine"
    # scenarios: ./refbench.toml first, else the bundled file
    assert paths.default_scenarios(tmp_path) == paths.bundled_scenarios()
    assert paths.bundled_scenarios().is_file() and paths.bundled_scenarios().parent == paths.PACKAGE_DIR
    (tmp_path / "refbench.toml").write_text("")
    assert paths.default_scenarios(tmp_path) == tmp_path / "refbench.toml"
    # tools: nothing but a pinned, hash-checked tool is taken from a cache directory, and no cache
    # directory is on PATH (issue 35; the pinned tools' checks: test_security, test_trust_cache)
    bin_dir = tmp_path / "xdg" / "refbench" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "ipfs").write_text("#!/bin/sh\n")
    (bin_dir / "ipfs").chmod(0o755)
    assert tools.find_tool("ipfs") != str(bin_dir / "ipfs")
    assert tools.clean_path(f"{bin_dir}:/usr/bin") == "/usr/bin"
    # the s3restore source hash is the one scripts/setup.sh used (cat go.mod go.sum *.go | sha256sum)
    src = paths.PACKAGE_DIR / "tools_src" / "s3restore"
    import hashlib
    blob = b"".join((src / n).read_bytes() for n in ("go.mod", "go.sum", *sorted(p.name for p in src.glob("*.go"))))
    assert paths.tool_source_hash("s3restore") == hashlib.sha256(blob).hexdigest()[:16]
    with paths.tool_source("s3restore") as d:
        assert (d / "main.go").is_file()


def test_templates_load_through_importlib_resources():
    from refbench import paths

    loader = paths.template_loader()
    import jinja2
    env = jinja2.Environment(loader=loader)
    source, _, uptodate = loader.get_source(env, "summary.md.j2")
    assert "refbench:" in source and uptodate()
    with pytest.raises(jinja2.TemplateNotFound):
        env.get_template("nope.j2")


def test_doctor_says_what_is_missing_and_how_to_fix_it(tmp_path):
    """A PATH the test makes itself (git alone), an empty cache, tools directory and home: each line
    that is not ok names what it disables and the command that fixes it; exit 2 without hyperfine
    and Go. The PATH is not /usr/bin, so the answer does not depend on what this machine has there."""
    path = tmp_path / "path"
    path.mkdir()
    (path / "git").symlink_to(shutil.which("git"))
    env = {**os.environ, "PATH": str(path), "XDG_CACHE_HOME": str(tmp_path / "xdg"),
           "REFBENCH_TOOLS_BIN": str(tmp_path / "bin"), "HOME": str(tmp_path)}
    p = subprocess.run([sys.executable, str(ROOT / "bench.py"), "doctor"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stdout + p.stderr
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith(("ok ", "warn ", "MISSING "))]
    status = {ln.split()[1]: ln.split()[0] for ln in lines}
    assert status["go"] == "MISSING" and status["minio"] == "MISSING" and status["hyperfine"] == "MISSING"
    assert status["git"] == "ok"
    assert status["refbench-s3restore"] in ("MISSING", "warn")
    for ln in lines:
        if not ln.startswith("ok "):
            assert re.search(r"run `refbench setup`|apt-get install|install Rust|pass -t", ln), ln
    assert "cannot run comparisons until hyperfine, go are installed" in p.stderr
