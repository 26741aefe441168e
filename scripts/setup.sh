#!/usr/bin/env bash
# Install what refbench needs, idempotently, for a checkout: the Python venv, then `refbench setup`
# (Go if absent, the pinned hyperfine, GNU time if needed; the one implementation, in
# refbench/commands/setup.py). MinIO, toxiproxy and refbench-s3restore, minutes of Go build on a
# new machine, are left to the first run that needs them, which builds them while the refs build
# (refbench/firstuse.py; issue 53). With --test (make test), also everything the test suite uses:
# the test extras, MinIO and toxiproxy now, the Debian packages and actionlint.
# Needs only the package registries (Debian, PyPI, the Go module proxy, crates.io); never GitHub.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
for_tests=
[ "${1:-}" = --test ] && for_tests=1
UV_VERSION=0.13.10
mkdir -p tools/bin
say() { printf 'setup: %s\n' "$*" >&2; }

# ---- Python ---------------------------------------------------------------------------------
if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  python3 -m venv .venv
fi
extras=${for_tests:+[test]}
stamp=.venv/.refbench-deps${for_tests:+-test}
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  say "installing Python dependencies${for_tests:+ (and the test extras)}"
  # uv (a pinned release from PyPI) installs the same packages as pip, in ~11 s against pip's ~45 s
  # on a new machine (issue 53); pip does it where uv cannot be had or cannot fetch (uv trusts its
  # own certificate roots plus SSL_CERT_FILE, pip the ones pip is configured with: a proxy's CA)
  # pip itself first: the pip a venv starts with (23.2 here) has no truststore, so it trusts no
  # system CA (a TLS proxy's), and refbench runs this pip for the PyPI implementations' installs
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  if ! { .venv/bin/python -m pip install -q --disable-pip-version-check "uv==$UV_VERSION" >/dev/null 2>&1 &&
         .venv/bin/uv pip install -q --python .venv/bin/python -e ".$extras"; }; then
    .venv/bin/python -m pip install -q -e ".$extras"
  fi
  touch "$stamp"
fi
# ---- tools: refbench setup (links them into tools/bin; built ones cached in ~/.cache/refbench) --
if [ -n "$for_tests" ]; then
  .venv/bin/python -m refbench setup --bin-dir "$ROOT/tools/bin"
else
  .venv/bin/python -m refbench setup --bin-dir "$ROOT/tools/bin" --servers-on-first-use
  exit 0
fi
export PATH="$ROOT/tools/bin:$PATH"

# ---- only for the test suite ----------------------------------------------------------------
# Debian packages, as root or through password-less sudo (GitHub's hosted runners are not root).
# Under CI=true a test whose tool is missing fails and names it, so a failed install shows there.
APT=()
if command -v apt-get >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then APT=(env DEBIAN_FRONTEND=noninteractive apt-get)
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then APT=(sudo -n env DEBIAN_FRONTEND=noninteractive apt-get)
  fi
fi
apt_updated=
apt_install() {  # apt_install WHAT PACKAGE...: install, updating the package lists once if needed
  local what=$1; shift
  if [ ${#APT[@]} -eq 0 ]; then say "$what: cannot install $* (neither root nor password-less sudo); its tests fail under CI=true"; return 0; fi
  say "installing $* (Debian packages) for $what"
  "${APT[@]}" install -y -qq --no-install-recommends "$@" >/dev/null 2>&1 && return 0
  if [ -z "$apt_updated" ]; then "${APT[@]}" update -qq >/dev/null 2>&1 || true; apt_updated=1; fi
  "${APT[@]}" install -y -qq --no-install-recommends "$@" >/dev/null || say "$what: $* not installed; its tests fail under CI=true"
}

# ip (iproute2), unshare and nsenter (util-linux): kubo's online daemon runs in a network namespace
# of the run's own with only loopback up (refbench/backends/sandbox.py)
PATH="$PATH:/usr/sbin:/sbin" command -v ip >/dev/null 2>&1 || apt_install "kubo's online daemon (a loopback-only network namespace)" iproute2
{ command -v unshare >/dev/null 2>&1 && command -v nsenter >/dev/null 2>&1; } ||
  apt_install "kubo's online daemon (a loopback-only network namespace)" util-linux

# curl with --parallel (7.66+) drives kubo's concurrent HTTP API fetches
command -v curl >/dev/null 2>&1 || apt_install "kubo's concurrent HTTP API scenario" curl
# Node >= 20 and npm: Helia, the ipfs implementations comparison (--impl helia; tests/test_helia.py)
node_major() { node --version 2>/dev/null | sed 's/^v\([0-9]*\).*/\1/'; }
{ command -v npm >/dev/null 2>&1 && [ "$(node_major)" -ge 20 ] 2>/dev/null; } || apt_install "Helia (--impl helia)" nodejs npm

# Chromium + chromedriver: the headless-browser test of the HTML report (tests/test_html_browser.py)
{ command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; } ||
  apt_install "the HTML report's browser test" chromium chromium-driver

# perf (Debian linux-perf): the differential CPU profiles of steps that move (refbench/profile.py)
command -v perf >/dev/null 2>&1 || apt_install "CPU profiles (perf record)" linux-perf

# actionlint runs shellcheck on every run: script
command -v shellcheck >/dev/null 2>&1 || apt_install "actionlint's check of run: scripts" shellcheck

# PostgreSQL server: the shared-history tests (tests/test_history_pg.py) start a throw-away cluster
# with initdb on a free loopback port. The Debian package puts initdb/pg_ctl in /usr/lib/postgresql/<v>/bin.
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  apt_install "the PostgreSQL history tests" postgresql
fi

# ---- actionlint (lints .github/workflows and action.yml; from the Go module proxy, pinned) ---
ACTIONLINT_VERSION="${ACTIONLINT_VERSION:-v1.7.12}"
if [ ! -x tools/bin/actionlint ]; then
  say "installing actionlint $ACTIONLINT_VERSION from the Go module proxy"
  # in refbench's own Go caches (toolchain.own_caches: its data directory, which no cache step
  # restores) and without go's settings file: go compiles a module as it finds it unpacked, and
  # ~/go/pkg/mod or ~/.cache/go-build may be a restored cache (review35m M2)
  { read -r gomod; read -r gocache; } < <(.venv/bin/python -c 'import os; from refbench import paths, toolchain
paths.use(lambda: paths.Layout.from_environ(os.environ))  # as the command line reads it: XDG_DATA_HOME
c = toolchain.own_caches(os.environ); print(c["GOMODCACHE"], c["GOCACHE"], sep="\n")')  # a path may hold a space
  GOMODCACHE="$gomod" GOCACHE="$gocache" GOENV=off GOWORK=off GOBIN="$ROOT/tools/bin" GOFLAGS=-buildvcs=false \
    go install "github.com/rhysd/actionlint/cmd/actionlint@$ACTIONLINT_VERSION"
fi
say "ready"
