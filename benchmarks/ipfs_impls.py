#!/usr/bin/env python3
"""kubo beside Helia (issue 37): the bundled `ipfs implementations` scenario at --quick, and Helia's
addDir shape on directories you give (a Helia checkout's benchmarks/add-dir/src, say), one run of
bench.py each, then each step's mean time per side and the root CIDs.

Helia's published addDir table (benchmarks/add-dir in ipfs/helia): Helia's own `src`, helia-fs
2.28 ms/op against kubo 72.56 ms/op; `dist`, 12.25 against 400.71; the roots differ
(bafybeifaymu... against bafybeihumrx... for `src`). That table times addDir inside one running
Node process (tinybench: the node started once, then many adds), against kubo through its RPC
API. refbench times what a user runs: `ipfs add` (the CLI talking to its daemon) against one Node
process per add (refbench's Helia program: start-up, libp2p and the repo opened, the add, the pin).

    .venv/bin/python benchmarks/ipfs_impls.py [--ref v0.40.1] [--dir src=PATH ...] [--runs 5]

A --dir is never copied into refbench: the scenario reads it where it is. Writes its runs' files
under a temporary directory (printed), and tables to stdout.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from refbench import results as rs  # noqa: E402

PUBLISHED = {"src": (2.28, 72.56), "dist": (12.25, 400.71)}  # ms/op: helia-fs, kubo (Helia's README table)
PIN = "{{ bin }} pin ls --type=recursive -q | xargs -r {{ bin }} pin rm >/dev/null && {{ bin }} repo gc -q >/dev/null"
EMPTY = "rm -rf {{ ipfs_path ~ '/blocks' }} {{ ipfs_path ~ '/datastore' }}"


def add_dir_scenarios(dirs: dict[str, Path]) -> str:
    """A scenarios file: the kubo target, one `helia addDir` scenario adding each directory where it
    is (kubo: `ipfs add -r`, Helia: its program's `add -r`, each into an empty repo), and Helia's
    table pointing at refbench's own pins."""
    import tomllib
    kubo = tomllib.loads((ROOT / "refbench" / "scenarios.toml").read_text())["targets"]["kubo"]
    impl = (ROOT / "refbench" / "implementations.toml").read_text()
    helia = impl[impl.index("[implementations.helia]"):].split("\n  [", 1)[0]
    helia = helia.replace('"impl_src/', f'"{ROOT}/refbench/impl_src/').replace('"impl_pins/', f'"{ROOT}/refbench/impl_pins/')
    out = ["[targets.kubo]", *(f"{k} = {json_value(v)}" for k, v in kubo.items()), "",
           "[[scenarios]]", 'name = "helia addDir"', 'target = "kubo"', "opt_in = true",
           'fixture = { kind = "sparse", size = "1K", count = 1 }', ""]
    steps = []
    for name, path in dirs.items():
        out += ["  [[scenarios.steps]]", f'  name = "add {name}"', f"  prepare = {json_value(PIN)}",
                f"  command = {json_value('{{ bin }} add -r -Q ' + str(path) + ' > {{ work ~ ' + repr('/' + name + '.cid') + ' }}')}",
                f"  check = {json_value('cat {{ work ~ ' + repr('/' + name + '.cid') + ' }}')}", ""]
        steps += [f'  [implementations.helia.scenarios."helia addDir".steps."add {name}"]',
                  f"  prepare = {json_value(EMPTY)}",
                  f"  command = {json_value('{{ bin }} add -r ' + str(path) + ' > {{ work ~ ' + repr('/' + name + '.cid') + ' }}')}"]
    return "\n".join(out + [helia.rstrip(), ""] + steps) + "\n"


def json_value(v) -> str:
    import json
    return json.dumps(v)


def bench(args, out: Path, extra: list[str]) -> tuple[rs.Results, float]:
    argv = [sys.executable, str(ROOT / "bench.py"), "-t", "kubo", "-s", args.ref, "--source", "module",
            "--impl", "helia", "--quick", "-r", args.runs, "-w", "1", "--rounds", args.runs, "--budget", "none",
            "--no-profile", "-o", str(out / "summary.md"), "--json", str(out / "results.json"), *extra]
    t0 = time.monotonic()
    proc = subprocess.run(argv, cwd=out, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        sys.exit(f"bench.py exited {proc.returncode}: {proc.stderr[-2000:]}")
    return rs.load(out / "results.json"), time.monotonic() - t0


def table(res: rs.Results, title: str) -> None:
    labels = [b.label for b in res.builds]
    print(f"\n## {title}")
    print(f"| step | {' | '.join(labels)} | root CIDs |")
    print("| --- |" + " --- |" * (len(labels) + 1))
    for sc, st in res.steps():
        cells = []
        for lab in labels:
            s = st.builds.get(lab)
            cells.append(f"{1000 * sum(s.times) / len(s.times):.1f} ms" if s and s.times else "not supported")
        roots = {lab: str(st.builds[lab].check) for lab in labels if lab in st.builds}
        same = "identical" if len(set(roots.values())) == 1 else "differ: " + ", ".join(
            f"{lab} {v[:14]}…" for lab, v in roots.items())
        print(f"| {sc.name} / {st.name} | {' | '.join(cells)} | {same} |")
    for note in res.explain_notes or ():
        print(f"\n> {note}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ref", default="v0.40.1", help="the kubo release (from the Go module proxy)")
    p.add_argument("--dir", action="append", default=[], help="NAME=PATH: a directory to add as Helia's addDir does")
    p.add_argument("--runs", default="5", help="-r and --rounds per build and step")
    args = p.parse_args()
    base = Path(tempfile.mkdtemp(prefix="ipfs-impls-"))
    print(f"# kubo {args.ref} beside Helia ({base})")
    (base / "tree").mkdir()
    res, wall = bench(args, base / "tree", [])
    table(res, f"ipfs implementations at --quick ({wall / 60:.1f} min including installs)")
    if args.dir:
        dirs = {k: Path(v).resolve() for k, _, v in (d.partition("=") for d in args.dir)}
        (base / "dirs").mkdir()
        (base / "dirs" / "scenarios.toml").write_text(add_dir_scenarios(dirs))
        res, wall = bench(args, base / "dirs", ["--scenarios", str(base / "dirs" / "scenarios.toml"),
                                                 "--only", "helia addDir"])
        table(res, f"Helia's addDir shape ({wall / 60:.1f} min)")
        print("\n| dir | files | published helia-fs / kubo (ms/op) |")
        print("| --- | --- | --- |")
        for name, path in dirs.items():
            pub = PUBLISHED.get(name)
            print(f"| {name} | {sum(1 for f in path.rglob('*') if f.is_file())} | "
                  f"{f'{pub[0]} / {pub[1]}' if pub else '-'} |")


if __name__ == "__main__":
    main()
