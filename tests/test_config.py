"""scenarios.toml loading, validation errors, sizes and command templates."""
from pathlib import Path

import pytest

from refbench.config import load_config, render
from refbench.units import format_size, parse_size
from refbench.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("text,n", [("1M", 1 << 20), ("10G", 10 << 30), ("300G", 300 << 30), ("512", 512),
                                    ("64K", 65536), ("1T", 1 << 40), ("1.5K", 1536), ("2MiB", 2 << 20),
                                    ("4k", 4096), (123, 123)])
def test_parse_size(text, n):
    assert parse_size(text) == n


@pytest.mark.parametrize("bad", ["", "M", "1X", "-1M", "1.1", "ten"])
def test_parse_size_rejects(bad):
    with pytest.raises(ValueError):
        parse_size(bad)


def test_format_size_roundtrip():
    for s in ("1M", "10G", "300G", "256K", "1000"):
        assert format_size(parse_size(s)) == s


def test_shipped_scenarios_load_with_seed_defaults():
    cfg = load_config(ROOT / "refbench" / "scenarios.toml")
    s5 = {s.name: s for s in cfg.scenarios_for("s5cmd")}
    assert {"small files", "large file", "very large file"} <= set(s5)
    assert (s5["small files"].fixture.size, s5["small files"].fixture.count) == (1 << 20, 10000)
    assert s5["large file"].fixture.size == 10 << 30
    vl = s5["very large file"]
    assert (vl.fixture.size, vl.runs, vl.warmup) == (300 << 30, 1, 0)
    for s in s5.values():
        quick = s.for_quick(True).fixture
        assert quick.size * quick.count < s.fixture.size * s.fixture.count
    for name in ("small files", "large file", "very large file", "small files, region"):
        steps = [st.name for st in s5[name].steps]
        assert steps[:2] == ["upload", "download"] and steps[-1] == "remove", name
        remove = s5[name].steps[-1]  # last: src is restored only before each of its runs
        # restored before every run without sleep: batched delete-marker removal, else server-side copy
        assert remove.prepare and "sleep" not in remove.prepare
        assert "s3restore" in remove.prepare and " cp " in remove.prepare
    assert [st.name for st in s5["large file"].steps] == ["upload", "download", "cat", "remove"]


def test_shipped_s5cmd_commands_each_step_under_its_profile():
    """Issue 26: the commands users run besides cp and rm, on loopback and under region where
    latency governs them, each with a result check; the sync over 1 M objects only on request."""
    cfg = load_config(ROOT / "refbench" / "scenarios.toml")
    s5 = {s.name: s.with_network() for s in cfg.scenarios_for("s5cmd")}
    nets = {(s.name, st.name): st.network for s in s5.values() for st in s.steps}
    many = s5["many objects"]
    assert {"ls", "du", "run", "sync up", "sync down", "cp", "mv"} <= {st.name for st in many.steps}
    assert (many.fixture.size, many.fixture.count) == (1 << 20, 10000)  # the seed's size
    assert many.for_quick(True).fixture.count == 2000  # two pages of a listing
    for name in ("ls, region", "sync up, region", "sync down, region", "cp, region"):
        assert nets[("many objects", name)] == "region"
    assert nets[("many objects", "ls")] == nets[("large file", "cat")] == "loopback"
    assert all(st.network == "region" for name in ("small files, region", "large object, region")
               for st in s5[name].steps)
    for name in ("large object, region", "many objects", "sync, 1M objects"):
        assert all(st.check for st in s5[name].steps), name  # bytes, object counts, or the files themselves
    assert s5["large file"].steps[2].check
    big = s5["sync, 1M objects"]
    # opt-in: the 1M sync, and the s3 clients comparison (which a run with --impl selects by itself)
    clients = [s for s in s5.values() if s.name.startswith("s3 clients, ")]
    assert len(clients) == 2 and all(s.opt_in for s in clients)
    assert big.opt_in and big.fixture.count == 1_000_000 and \
        not any(s.opt_in for s in s5.values() if s is not big and s not in clients)


def write(tmp_path, text):
    p = tmp_path / "s.toml"
    p.write_text(text)
    return p


BASE = '''
[targets.t]
repo = "https://example.invalid/t"
binary = "t"
build = ["go", "build", "-o", "{out}", "."]
backend = "s3"
'''


@pytest.mark.parametrize("body,needle", [
    ('[[scenarios]]\nname="a"\ntarget="nope"\nfixture={kind="sparse",size="1M"}\nsteps=[{name="x",command="true"}]',
     "scenarios[0] ('a').target: expected one of the declared targets"),
    ('[[scenarios]]\nname="a"\ntarget="t"\nfixture={kind="sparse",size="huge"}\nsteps=[{name="x",command="true"}]',
     "scenarios[0] ('a').fixture.size: expected a size"),
    ('[[scenarios]]\nname="a"\ntarget="t"\nfixture={kind="dust",size="1M"}\nsteps=[{name="x",command="true"}]',
     "fixture.kind: expected one of sparse, random, tree"),
    ('[[scenarios]]\nname="a"\ntarget="t"\nfixture={kind="sparse",size="1M"}\nsteps=[{name="x",command="{{ bin"}]',
     "steps[0].command: expected a valid template"),
    ('[[scenarios]]\nname="a"\ntarget="t"\nfixture={kind="sparse",size="1M"}\nsteps=[{name="x",command="true",runs=0}]',
     "steps[0].runs: expected an integer >= 1"),
    ('[[scenarios]]\nname="a"\ntarget="t"\nfixture={kind="sparse",size="1M"}\nsteps=[]',
     "steps: expected at least one step"),
])
def test_errors_name_file_key_and_expectation(tmp_path, body, needle):
    p = write(tmp_path, BASE + body)
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert str(p) in str(e.value) and needle in str(e.value)


def test_bad_backend_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="targets.t.backend: expected one of s3, ipfs"):
        load_config(write(tmp_path, BASE.replace('"s3"', '"ftp"') + '\nscenarios=[]'))
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(write(tmp_path, "[[["))


def test_render_quotes_every_value():
    cmd = render("{{ bin }} {{ extra }} cp {{ fixture ~ '/*' }} {{ remote ~ '/' }}",
                 {"bin": "/p with space/s5cmd", "extra": ["--numworkers", "64", "$(id)"],
                  "fixture": "/tmp/f'x", "remote": "s3://b/p;rm -rf ~"})
    assert cmd == ("'/p with space/s5cmd' --numworkers 64 '$(id)' cp '/tmp/f'\"'\"'x/*' "
                   "'s3://b/p;rm -rf ~/'")
    assert render("{{ bin }} {{ extra }} x", {"bin": "b", "extra": []}) == "b  x"


def test_render_unknown_value_is_an_error():
    with pytest.raises(ConfigError, match="undefined"):
        render("{{ nope }}", {})


def test_extra_flags_may_start_with_a_dash():
    from refbench.commands._args import bind_flag_values
    from refbench.commands._run_options import run_parser
    argv = ["-s", "a", "b", "-sf", "--numworkers 8", "-hf", "-i --shell=bash", "-r", "3"]
    args = run_parser().parse_args(bind_flag_values(argv))
    assert args.target_flags == "--numworkers 8" and args.hyperfine_extra_flags == "-i --shell=bash"
    assert args.runs == 3 and args.refs == ["a", "b"]
    args = run_parser().parse_args(bind_flag_values(["-s", "a", "b", "-sf", " --legacy-leading-space"]))
    assert args.target_flags.split() == ["--legacy-leading-space"]


IPFS = BASE.replace('"s3"', '"ipfs"')
ONE = 'fixture={kind="random",size="1M"}\nsteps=[{name="x",command="true"}]'


def test_shipped_kubo_scenarios_run_online_but_gc_which_restores_a_cached_state():
    cfg = load_config(ROOT / "refbench" / "scenarios.toml")
    kubo = {s.name: s for s in cfg.scenarios_for("kubo")}
    gc = kubo.pop("garbage collection")
    assert {s.daemon_mode for s in kubo.values()} == {"online"}
    assert gc.daemon_mode == "none" and gc.state and all(st.prepare == "{{ restore }}" for st in gc.steps)
    # the seed's scale: 4 files of 256 MiB in 1 KiB blocks, ~1 M blocks; --quick keeps ~4,000
    assert (gc.fixture.count, gc.fixture.size) == (4, 256 << 20) and "--chunker=size-1024" in gc.state
    assert gc.fixture.count * gc.fixture.size // 1024 >= 1_000_000
    assert gc.for_quick(True).fixture.size == 1 << 20
    # --daemon changes every scenario but the one whose state is restored closed
    assert {s.for_run(False, "offline").daemon_mode for s in kubo.values()} == {"offline"}
    assert gc.for_run(False, "online").daemon_mode == "none"


@pytest.mark.parametrize("daemon,mode", [("", "online"), ('daemon="offline"', "offline"), ('daemon="none"', "none"),
                                         ("daemon=true", "offline"), ("daemon=false", "none")])
def test_daemon_modes_and_the_old_booleans(tmp_path, daemon, mode):
    cfg = load_config(write(tmp_path, IPFS + f'[[scenarios]]\nname="a"\ntarget="t"\n{daemon}\n{ONE}'))
    assert cfg.scenarios[0].daemon_mode == mode


@pytest.mark.parametrize("body,needle", [
    ('daemon="sometimes"\n' + ONE, "scenarios[0] ('a').daemon: expected one of online, offline, none, got 'sometimes'"),
    ('state="true"\ndaemon="online"\n' + ONE, "scenarios[0] ('a').daemon: expected \"none\" with a state"),
    ('fixture={kind="random",size="1M"}\nsteps=[{name="x",command="true",state="true"}]',
     "scenarios[0] ('a').state: expected a state template for the steps' states to build on (x)"),
])
def test_daemon_and_state_errors_name_the_key(tmp_path, body, needle):
    p = write(tmp_path, IPFS + f'[[scenarios]]\nname="a"\ntarget="t"\n{body}')
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert str(p) in str(e.value) and needle in str(e.value)


def test_a_state_is_for_ipfs_targets_only(tmp_path):
    with pytest.raises(ConfigError, match=r"state: expected no state: a cached state is an IPFS repo"):
        load_config(write(tmp_path, BASE + f'[[scenarios]]\nname="a"\ntarget="t"\nstate="true"\n{ONE}'))
