"""Network profiles (issue 26): their figures and toxics, the scenarios file's [networks.NAME], the
profile each step runs under, --network and --list, opt-in scenarios, the record and the summary,
and the shaper itself (toxiproxy on loopback, when installed)."""
from __future__ import annotations

import http.server
import threading
import time
from pathlib import Path

import pytest

import factories as fx
from conftest import need, run_cli
from refbench import network as nw, paths, pipeline, tools
from refbench.config import load_config
from refbench.errors import ConfigError, RefbenchError, RunError
from refbench.sampling import Sampling
from refbench.render import markdown
from refbench.units import format_rate, parse_rate
from test_config import BASE, write

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = load_config(paths.bundled_scenarios())

S3 = BASE  # one S3 target, t


# ---- figures and toxics -------------------------------------------------------------------------
@pytest.mark.parametrize("text,n", [("40MB/s", 40_000_000), ("1Gbit/s", 125_000_000), ("500KB/s", 500_000),
                                    ("2.5MB/s", 2_500_000), (1000, 1000)])
def test_rates_are_decimal_bytes_or_bits_per_second(text, n):
    assert parse_rate(text) == n


@pytest.mark.parametrize("bad", ["40M", "fast", "0MB/s", "-1MB/s", 0, "1bit/s"])
def test_a_rate_that_is_not_one_is_refused(bad):
    with pytest.raises(ValueError):
        parse_rate(bad)


def test_region_is_10_ms_round_trip_and_40_MB_s_per_connection_as_toxiproxy_reads_it():
    region = nw.BUNDLED["region"]
    assert (region.rtt_ms, region.down, region.up, region.jitter_ms) == (10, 40_000_000, 40_000_000, 0)
    toxics = {(t["type"], t["stream"]): t["attributes"] for t in region.toxics()}
    assert toxics == {("latency", "upstream"): {"latency": 5, "jitter": 0},
                      ("latency", "downstream"): {"latency": 5, "jitter": 0},
                      ("bandwidth", "upstream"): {"rate": 40_000},  # KB/s of 1000 bytes, as toxiproxy reads it
                      ("bandwidth", "downstream"): {"rate": 40_000}}
    assert region.words() == "10 ms round trip, 40 MB/s per connection each way"
    assert format_rate(125_000_000) == "125 MB/s"


def test_an_odd_round_trip_goes_down_with_the_response_and_loopback_has_no_shaper():
    odd = nw.NetworkProfile("odd", rtt_ms=1, jitter_ms=3, down=1_000_000)
    legs = {t["stream"]: t["attributes"] for t in odd.toxics() if t["type"] == "latency"}
    assert legs == {"upstream": {"latency": 0, "jitter": 1}, "downstream": {"latency": 1, "jitter": 2}}
    assert odd.words() == "1 ms round trip ± 3 ms, 1 MB/s per connection down"
    loopback = nw.BUNDLED[nw.LOOPBACK]
    assert loopback.direct and loopback.toxics() == () and not nw.BUNDLED["lan"].direct


# ---- the scenarios file ------------------------------------------------------------------------------
def test_a_declared_profile_is_known_beside_the_bundled_ones(tmp_path):
    cfg = load_config(write(tmp_path, S3 + '''
[networks.far]
rtt = 80
jitter = 4
down = "10MB/s"
description = "another continent"

[[scenarios]]
name = "a"
target = "t"
network = "far"
fixture = {kind="sparse", size="1M"}
steps = [{name="x", command="true"}, {name="y", command="true", network="lan"}]
'''))
    assert list(cfg.networks) == ["loopback", "lan", "region", "far"]
    far = cfg.networks["far"]
    assert (far.rtt_ms, far.jitter_ms, far.down, far.up, far.description) == (80, 4, 10_000_000, None,
                                                                               "another continent")
    sc = cfg.scenarios[0]
    # a step's own profile, else its scenario's, else the run's --network, else loopback
    assert [st.network for st in sc.with_network("region").steps] == ["far", "lan"]
    bare = sc.__class__(**{**sc.__dict__, "network": None})
    assert [st.network for st in bare.with_network("region").steps] == ["region", "lan"]
    assert [st.network for st in bare.with_network().steps] == ["loopback", "lan"]


@pytest.mark.parametrize("body,needle", [
    ('[networks.region]\nrtt = 1', "networks.region: expected a name other than the bundled profiles"),
    ('[networks.x]\nrtt = 1.5', "networks.x.rtt: expected a whole number of milliseconds"),
    ('[networks.x]\nrtt = 2\njitter = 3', "networks.x.jitter: expected at most the round trip (2 ms)"),
    ('[networks.x]\ndown = "fast"', "networks.x.down: expected a rate per connection like 40MB/s"),
    ('[networks.x]\ntotal_down = "1Gbit/s"', "networks.x.total_down: expected no cap on all connections together"),
    ('[networks.x]\nlatency = 3', "networks.x.latency: expected one of the keys rtt, jitter, down, up, description"),
    ('[[scenarios]]\nname="a"\ntarget="t"\nnetwork="mars"\nfixture={kind="sparse",size="1M"}\n'
     'steps=[{name="x",command="true"}]', "scenarios[0] ('a').network: expected one of the network profiles "
                                           "(loopback, lan, region)"),
    ('[[scenarios]]\nname="a"\ntarget="t"\nfixture={kind="sparse",size="1M"}\n'
     'steps=[{name="x",command="true",network="mars"}]', "scenarios[0] ('a').steps[0].network: expected one of"),
])
def test_errors_name_the_file_the_key_and_what_was_expected(tmp_path, body, needle):
    text = ("" if "[[scenarios]]" in body else "scenarios = []\n") + S3 + body
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert str(p) in str(e.value) and needle in str(e.value), str(e.value)


def test_a_network_is_for_s3_targets_only(tmp_path):
    body = S3.replace('"s3"', '"ipfs"') + ('[[scenarios]]\nname="a"\ntarget="t"\nfixture={kind="random",size="1M"}\n'
                                           'steps=[{name="x",command="true",network="region"}]')
    with pytest.raises(ConfigError, match=r"steps\[0\].network: expected no network: profiles shape S3 traffic"):
        load_config(write(tmp_path, body))


# ---- which steps run, and under what ----------------------------------------------------------------
def test_an_opt_in_scenario_runs_only_when_named():
    s5 = [s.with_network() for s in BUNDLED.scenarios_for("s5cmd")]
    everyday, _ = pipeline.select_scenarios(s5, [])
    assert "sync, 1M objects" not in {s.name for s in everyday} and "many objects" in {s.name for s in everyday}
    chosen, keep = pipeline.select_scenarios(s5, ["sync up"])  # a step name alone: the everyday ones
    assert {s.name for s in chosen} == {"many objects"}
    for only in (["sync, 1M objects"], ["sync, 1M objects/sync down"]):
        chosen, keep = pipeline.select_scenarios(s5, only)
        assert [s.name for s in chosen] == ["sync, 1M objects"]
    assert [st.name for st in chosen[0].steps if keep(chosen[0], st)] == ["sync down"]


def test_the_run_asks_for_the_shaper_only_for_the_profiles_its_steps_use():
    s5 = [s.with_network() for s in BUNDLED.scenarios_for("s5cmd")]
    chosen, keep = pipeline.select_scenarios(s5, ["small files"])
    assert list(pipeline.run_networks(BUNDLED, chosen, keep)) == ["loopback"]
    chosen, keep = pipeline.select_scenarios(s5, ["many objects"])
    assert list(pipeline.run_networks(BUNDLED, chosen, keep)) == ["loopback", "region"]


def test_a_bucket_over_a_real_network_is_not_shaped():
    req = pipeline.RunRequest(refs=("a", "b"), bucket="mine", endpoint_url="https://s3.example.com")
    assert not pipeline.shaping_reaches(req)
    assert pipeline.shaping_reaches(req.replace(endpoint_url="http://127.0.0.1:9000"))
    assert pipeline.shaping_reaches(req.replace(bucket=None))
    s5 = [s.with_network() for s in BUNDLED.scenarios_for("s5cmd")]
    warned = []
    reporter = type("R", (), {"warn": lambda self, m: warned.append(m)})()
    plain = pipeline.unshaped_where_unreachable(s5, req, reporter)
    assert {st.network for s in plain for st in s.steps} == {None}
    assert "s3://mine is reached over its own network" in warned[0] and "large object, region / cat" in warned[0]
    with pytest.raises(RefbenchError, match="--network region: a profile shapes the traffic to a server on loopback"):
        pipeline.unshaped_where_unreachable(s5, req.replace(network="region"), reporter)


# ---- the command line --------------------------------------------------------------------------------
def test_list_shows_every_bundled_step_with_its_profile():
    proc = run_cli("--list")
    assert proc.returncode == 0, proc.stderr
    s5 = proc.stdout.split("target s5cmd:", 1)[1].split("\ntarget ", 1)[0]
    lines = {ln.split(":")[0].strip(): ln for ln in s5.splitlines() if ln.startswith("  ")}
    for s in BUNDLED.scenarios_for("s5cmd"):
        for st in s.with_network().steps:
            assert f"{st.name} [{st.network}]" in lines[s.name], (s.name, st.name)
    assert "ls, region [region]" in lines["many objects"] and "cat [loopback]" in lines["large file"]
    assert "opt-in: runs with --only 'sync, 1M objects'" in lines["sync, 1M objects"]
    # --network fills in where a step names none
    assert "upload [lan]" in run_cli("--list", "--network", "lan").stdout


def test_an_unknown_network_is_one_line_naming_the_known_profiles(tmp_path):
    proc = run_cli("-s", "v1.0.0", "v1.1.0", "-t", "s5cmd", "--repo", str(tmp_path), "--network", "nosuch",
                   cwd=tmp_path)
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("refbench: error:")]
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr
    assert "unknown network profile 'nosuch' (known: loopback, lan, region)" in errors[0]
    proc = run_cli("-s", "a", "b", "-t", "kubo", "--repo", str(tmp_path), "--network", "lan", cwd=tmp_path)
    assert "--network applies to S3 targets; 'kubo' uses the ipfs backend" in proc.stderr


def test_a_dry_run_shows_each_step_under_its_profile_with_its_proxy():
    from refbench import dryrun
    from test_dryrun import CACHE, planned

    t = BUNDLED.targets["s5cmd"]
    out = dryrun.render_plan(t, t.repo, [s.for_quick(True).with_network() for s in BUNDLED.scenarios_for("s5cmd")],
                             None, planned("s5cmd", "v1.0.0", "v1.1.0"), bucket=None, prefix="refbench",
                             endpoint=None, sampling=Sampling(runs=10, warmup=2, rounds=5), cache_dir=CACHE,
                             networks={name: BUNDLED.networks[name] for name in ("loopback", "region")})
    region = out.split("scenario large object, region:", 1)[1].split("\nscenario ", 1)[0]
    assert "  step cat [network region]: export S3_ENDPOINT_URL='http://127.0.0.1:<region-port>'; " in region
    assert "  setup: " in region and "export" not in region.split("  setup: ", 1)[1].splitlines()[0]  # direct
    assert "  step ls [network loopback]: /cache/builds/s5cmd/" in out  # loopback: the command as it always was


# ---- the record and the summary ------------------------------------------------------------------
def test_results_and_the_summary_say_which_profile_each_step_ran_under():
    doc = fx.basic_doc()
    steps = doc["scenarios"][0]["steps"]
    steps[0]["network"] = steps[1]["network"] = "region"
    steps[2]["network"] = "loopback"
    doc["backend"]["networks"] = {"region": nw.BUNDLED["region"].record(), "loopback": nw.BUNDLED["loopback"].record()}
    r = fx.rs.Results.from_json(doc, "test")
    assert r.networks() == {"region": ("small files / upload", "small files / download"),
                            "loopback": ("small files / remove",)}
    assert fx.rs.Results.from_json(r.to_json(), "again").networks() == r.networks()  # kept in results.json
    line = ("**Network to the S3 server:** region (10 ms round trip, 40 MB/s per connection each way): "
            "small files / upload, small files / download; loopback (no shaping: MinIO directly on 127.0.0.1): "
            "small files / remove.")
    for flavour in ("md", "github"):
        assert line in markdown.render_markdown(r, flavour), flavour
    # the HTML report says it in the same words; the CSV has it in a column per row
    from refbench import analysis
    from refbench.render import csv as render_csv
    from refbench.render.html import render_html
    page = render_html(r, analysis.analyse(r))
    assert ("<b>Network to the S3 server:</b> region (10 ms round trip, 40 MB/s per connection each way): "
            "small files / upload, small files / download;") in page
    assert {(row["step"], row["network"]) for row in render_csv.csv_rows(r)} == {
        ("upload", "region"), ("download", "region"), ("remove", "loopback")}
    assert "Network to" not in render_html(fx.basic(), analysis.analyse(fx.basic()))
    for st in steps:
        st["network"] = "region"
    assert fx.rs.Results.from_json(doc, "test").networks() == {"region": ("small files",)}  # a whole scenario
    assert "Network to" not in markdown.render_markdown(fx.basic(), "md")  # older files: nothing claimed


# ---- the shaper -------------------------------------------------------------------------------------
@pytest.fixture
def http_server():
    """A tiny HTTP server on loopback answering every GET with 2 bytes, keep-alive."""
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def toxiproxy_binary() -> str:
    found = tools.find_tool("toxiproxy-server")
    if not found:
        need("toxiproxy-server", "the network profiles' shaper (`refbench setup` installs it)")
    return found


def test_the_shaper_adds_the_round_trip_to_every_request_and_stops(tmp_path, http_server):
    import urllib.request

    from refbench.backends.toxiproxy import Toxiproxy

    n = 10
    with Toxiproxy(tmp_path, binary=toxiproxy_binary()) as shaper:
        listen = shaper.add(nw.NetworkProfile("rtt20", rtt_ms=20), http_server)
        assert listen.startswith("127.0.0.1:")
        pid = shaper.pid
        t0 = time.monotonic()
        for _ in range(n):  # one after the other, a new connection each
            assert urllib.request.urlopen(f"http://{listen}/", timeout=5).read() == b"ok"
        elapsed = time.monotonic() - t0
        t0 = time.monotonic()
        urllib.request.urlopen(http_server, timeout=5).read()  # the server itself: no round trip added
        direct = time.monotonic() - t0
        with pytest.raises(RunError, match="loopback addresses only"):
            shaper.add(nw.NetworkProfile("away", rtt_ms=1), "http://192.0.2.1:9000")
    assert elapsed >= n * 0.020, elapsed
    assert direct < 0.020
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
    assert list(tmp_path.iterdir()) == []  # its config and log dir removed
