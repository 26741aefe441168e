"""Named variants (issue 26, part 3): --variant NAME=REF[,go=...][,flags=...][,env=K=V] and
[[variants]] tables; a variant's name labels its build everywhere, its flags and environment reach
its commands only, and the identical-binary shortcut answers only when they are the same too."""
from __future__ import annotations

import pytest

from conftest import need, run_bench
from fakes.pipeline import fake_env, scenarios_file
from refbench import builds as bl, paths, pipeline, tools, variants as vr
from refbench.commands._args import bind_flag_values
from refbench.commands._run_options import request_from_args, run_parser
from refbench.config import load_config
from refbench.errors import ConfigError, RefbenchError
from refbench.refs import ResolvedRef
from refbench.verdict import Verdict
from factories import basic as fx_basic
from test_config import BASE, write

SCENARIOS = BASE + '''
[[variants]]
name = "gc-off"
ref = "v1.0.0"
env = { GOGC = "off" }
flags = "--workers 2"

[[scenarios]]
name = "tiny"
target = "t"
fixture = { kind = "sparse", size = "1K", count = 2 }
  [[scenarios.steps]]
  name = "copy"
  command = "{{ bin }} {{ extra }} cp {{ fixture }} {{ work }}"
'''


# ---- parsing --------------------------------------------------------------------------------------
def test_the_command_line_form():
    v = vr.parse("w64=v2.2.2,go=go1.22.0,flags=--numworkers 64 --retry-count 1,env=GOGC=200,env=GOMAXPROCS=2", {})
    assert v == vr.Variant("v2.2.2", "w64", "go1.22.0", ("--numworkers", "64", "--retry-count", "1"),
                           (("GOGC", "200"), ("GOMAXPROCS", "2")))
    assert vr.parse("plain=v1.0.0", {}) == vr.Variant("v1.0.0", "plain")
    assert v.record() == {"flags": ["--numworkers", "64", "--retry-count", "1"], "env": {"GOGC": "200", "GOMAXPROCS": "2"}}
    assert not v.same_run(vr.Variant("v2.2.2", "other", "go1.22.0"))
    assert vr.Variant("v1", "a", "go1.22.0").same_run(vr.Variant("v2", "b"))  # the Go makes another binary


@pytest.mark.parametrize("text,needle", [
    ("nosuch", "--variant 'nosuch': expected NAME=REF[,go=GO][,flags=FLAGS][,env=K=V ...], or the name of a "
               "[[variants]] table"),
    ("a b=v1", "a variant's name is letters, digits and . _ + - (up to 64), got 'a b'"),
    ("x=", "no ref"),
    ("x=v1,env=GOGC", "env: expected K=V, got 'GOGC'"),
    ("x=v1,env=S3_ENDPOINT_URL=http://elsewhere", "env 'S3_ENDPOINT_URL' is not a variable a variant may set"),
    ("x=v1,env=AWS_SECRET_ACCESS_KEY=k", "env 'AWS_SECRET_ACCESS_KEY' is not a variable a variant may set"),
    ("x=v1,flags='unclosed", "flags: No closing quotation"),
])
def test_a_bad_variant_is_one_line_saying_what_was_expected(text, needle):
    with pytest.raises(RefbenchError) as e:
        vr.parse(text, {})
    assert needle in str(e.value), str(e.value)


def test_settings_without_a_ref_are_for_the_commands_that_choose_refs():
    """bisect (and the nightly's bisect line) take a variant's settings alone; written back with
    settings_text and spec, a variant reads as it was given."""
    v = vr.configuration("go=1.26,flags=--numworkers 4 --endpoint 'a b',env=GOGC=200", {}, "bisect")
    assert v == vr.Variant("", None, "1.26", ("--numworkers", "4", "--endpoint", "a b"), (("GOGC", "200"),))
    assert vr.configuration(vr.settings_text(v), {}, "bisect") == v
    table = vr.Variant("v1.0.0", "gc-off", None, (), (("GOGC", "off"),))
    assert vr.configuration("gc-off", {"gc-off": table}, "bisect") is table
    good, probe = vr.on_refs(table, (("a" * 40, "gc-off.good"), ("b" * 40, "gc-off")))
    assert (good.ref, good.name, probe.ref, probe.name) == ("a" * 40, "gc-off.good", "b" * 40, "gc-off")
    assert good.env == probe.env == table.env
    full = vr.parse("w4=master,go=1.26,flags=--numworkers 4,env=GOGC=200", {})
    assert vr.spec(full) == "w4=master,go=1.26,flags=--numworkers 4,env=GOGC=200" and vr.parse(vr.spec(full), {}) == full
    assert full.describe() == "w4 (flags --numworkers 4; env GOGC=200; go 1.26)"
    # settings alone are not a variant named "go" of a ref "1.26"
    with pytest.raises(RefbenchError, match=r"settings alone, \[go=GO\].*, are for bisect"):
        vr.parse("go=1.26,flags=-x", {})


def test_variants_follow_the_refs_and_are_labelled_by_name(tmp_path):
    cfg = load_config(write(tmp_path, SCENARIOS))
    assert cfg.variants["gc-off"] == vr.Variant("v1.0.0", "gc-off", None, ("--workers", "2"), (("GOGC", "off"),))
    builds = vr.builds(("v1.0.0",), ("gc-off", "w8=v1.0.0,flags=--workers 8"), cfg.variants)
    assert [v.name for v in builds] == [None, "gc-off", "w8"]
    refs = [ResolvedRef(v.ref, "tag", "1" * 40, v.ref) for v in builds]
    assert vr.labels(builds, bl.unique_labels(refs)) == ["v1.0.0", "gc-off", "w8"]  # not 'v1.0.0 #2', '#3'
    with pytest.raises(RefbenchError, match="'w8' is named twice"):
        vr.builds((), ("w8=v1", "w8=v2"), {})
    with pytest.raises(RefbenchError, match="also the label of a ref given with -s"):
        clash = vr.builds(("v1.0.0",), ("v1.0.0=v1.1.0",), {})
        vr.labels(clash, ["v1.0.0", "v1.1.0"])


@pytest.mark.parametrize("body,needle", [
    ('[[variants]]\nname = "a"', "variants[0].ref: expected a string (required)"),
    ('[[variants]]\nname = "a"\nref = "v1"\nworkers = 4', "variants[0].workers: expected one of the keys"),
    ('[[variants]]\nname = "a"\nref = "v1"\nenv = { GOGC = 50 }', "variants[0].env: expected a table of strings"),
    ('[[variants]]\nname = "a"\nref = "v1"\n[[variants]]\nname = "a"\nref = "v2"', "variants: expected names unique"),
])
def test_the_files_variants_errors_name_file_and_key(tmp_path, body, needle):
    p = write(tmp_path, "scenarios = []\n" + BASE + body)
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert str(p) in str(e.value) and needle in str(e.value), str(e.value)


# ---- a whole run on stand-ins -----------------------------------------------------------------------
@pytest.fixture
def fake_variants(tmp_path, monkeypatch):
    """A fake RunEnv whose MockBuilder resolves and labels builds as the real pipeline does
    (variants and all), every ref built into the same binary (the MockExecutor reads 'scale=' in a
    command as that command's length: a flag of one variant makes its runs longer)."""
    path = scenarios_file(monkeypatch, tmp_path, SCENARIOS.replace('"t"', '"fake"').replace("[targets.t]",
                                                                                          "[targets.fake]"))
    return path, fake_env(tmp_path, {})


def run(path, tmp_path, fakes, *argv):
    args = ["-t", "fake", "--scenarios", str(path), "--builds-dir", str(tmp_path / "builds"), "-r", "8",
            "--rounds", "2", "-w", "0", *argv]
    return pipeline.run(request_from_args(run_parser().parse_args(bind_flag_values(args)), args), fakes.env())


def test_two_flags_on_one_binary_are_both_measured_and_labelled_by_name(fake_variants, tmp_path):
    path, fakes = fake_variants
    r = run(path, tmp_path, fakes, "--variant", "w4=v1.0.0,flags=--workers 4", "--variant",
            "w8=v1.0.0,flags=--workers 8 scale=1.5,env=GOGC=50")
    assert [b.label for b in r.builds] == ["w4", "w8"] and r.baseline == "w4"
    assert r.builds[1].flags == ("--workers", "8", "scale=1.5") and dict(r.builds[1].env) == {"GOGC": "50"}
    assert r.builds[0].env is None
    st = next(st for _, st in r.steps())
    assert "--workers 4 cp" in st.builds["w4"].command and "export GOGC" not in st.builds["w4"].command
    assert st.builds["w8"].command.startswith("export GOGC=50; ") and "--workers 8 scale=1.5 cp" in st.builds["w8"].command
    c = st.comparisons[0]
    assert (c.baseline, c.contender, c.verdict) == ("w4", "w8", Verdict.SLOWER)  # measured: 1.5x as long
    from refbench.render import markdown
    md = markdown.render_markdown(r, "md")
    assert "| Variant" in md and "--workers 8 scale=1.5; GOGC=50" in md and "#2" not in md
    assert "| Variant" not in markdown.render_markdown(fx_basic(), "md")  # plain refs: the table as it was


def test_the_same_binary_run_the_same_way_is_identical_and_not_measured(fake_variants, tmp_path):
    path, fakes = fake_variants
    r = run(path, tmp_path, fakes, "-s", "v1.0.0", "--variant", "again=v1.0.0", "--variant", "gc-off")
    comps = {c.contender: c.verdict for _, st in r.steps() for c in st.comparisons}
    # 'again' runs the same binary the same way: answered without measuring; 'gc-off' sets GOGC and flags
    assert comps == {"again": Verdict.IDENTICAL, "gc-off": comps["gc-off"]} and comps["gc-off"] != Verdict.IDENTICAL
    assert [b.label for b in r.builds] == ["v1.0.0", "again", "gc-off"]
    # beside an identical contender, a measured one keeps every metric's comparison (all but the
    # last were dropped before: one comparison per contender was kept)
    st = next(st for _, st in r.steps())
    assert {c.metric for c in st.all_contrasts() if c.contender == "gc-off"} == {"wall", "cpu", "memory"}


# ---- end to end: real s5cmd ---------------------------------------------------------------------
@pytest.mark.slow
def test_two_numworkers_of_one_s5cmd_build_are_a_named_comparison(s5_origin, builds_dir, tmp_path):
    if not tools.find_tool("minio"):
        need("minio", "the embedded S3 server")
    proc = run_bench("--variant", "w4=v1.0.0,flags=--numworkers 4", "--variant", "w64=v1.0.0,flags=--numworkers 64",
                     "--repo", str(s5_origin.path), "--builds-dir", str(builds_dir), "--quick", "--only",
                     "small files/upload", "-r", "2", "-w", "0", "--rounds", "1", "-o", str(tmp_path / "s.md"),
                     cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    from refbench import results as rs

    r = rs.load(tmp_path / "results.json")
    assert [b.label for b in r.builds] == ["w4", "w64"] and r.builds[0].sha == r.builds[1].sha
    st = next(st for _, st in r.steps())
    assert "--numworkers 4 cp" in st.builds["w4"].command and "--numworkers 64 cp" in st.builds["w64"].command
    assert all(len(b.times) == 2 for b in st.builds.values())  # both measured, though the binary is one
    assert st.comparisons[0].verdict != Verdict.IDENTICAL and st.comparisons[0].contender == "w64"
    md = (tmp_path / "s.md").read_text()
    assert "w4" in md and "w64" in md and "#2" not in md
