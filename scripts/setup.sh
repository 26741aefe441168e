#!/usr/bin/env bash
# Install what refbench needs, idempotently, for a checkout: the Python venv, then `refbench setup`
# (Go if absent, hyperfine 1.20 from crates.io, MinIO, refbench-s3restore, GNU time if needed; the
# one implementation, in refbench/commands/setup.py), then what only the test suite uses.
# Needs only the package registries (Debian, PyPI, the Go module proxy, crates.io); never GitHub.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
mkdir -p tools/bin
say() { printf 'setup: %s\n' "$*" >&2; }

# ---- Python ---------------------------------------------------------------------------------
if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  python3 -m venv .venv
fi
stamp=.venv/.refbench-deps
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  say "installing Python dependencies"
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e '.[test]'
  touch "$stamp"
fi
# ---- tools: refbench setup (links them into tools/bin; built ones cached in ~/.cache/refbench) --
.venv/bin/python -m refbench setup --bin-dir "$ROOT/tools/bin"
export PATH="$ROOT/tools/bin:$PATH"

# ---- only for the test suite ----------------------------------------------------------------
# curl with --parallel (7.66+) drives kubo's concurrent HTTP API fetches
if ! command -v curl >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl >/dev/null 2>&1 || { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl >/dev/null; }
fi

# ---- Chromium + chromedriver: only for the headless-browser test of the HTML report ----------
# (tests/test_html_browser.py; it skips, saying why, where they cannot be installed)
if ! { command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; }; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing chromium and chromium-driver (Debian packages) for the HTML report test"
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null 2>&1 ||
      { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null; }; } ||
      say "chromium not installed: the browser test of the HTML report will skip"
  else
    say "chromium/chromedriver missing and not root: the browser test of the HTML report will skip"
  fi
fi

# ---- shellcheck: actionlint checks every run: script with it (Debian package) ----------------
if ! command -v shellcheck >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck >/dev/null; } ||
    say "shellcheck not installed: actionlint will not check the run: scripts"
fi

# ---- PostgreSQL server: only for the shared-history tests (tests/test_history_pg.py) -----------
# They start a throw-away cluster with initdb on a free loopback port and skip, saying why, where
# the server is missing. The Debian package puts initdb/pg_ctl in /usr/lib/postgresql/<v>/bin.
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing postgresql (Debian package) for the shared-history tests"
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null 2>&1 ||
      { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null; }; } ||
      say "postgresql not installed: the PostgreSQL history tests will skip"
  else
    say "PostgreSQL server missing and not root: the PostgreSQL history tests will skip"
  fi
fi

# ---- actionlint (lints .github/workflows and action.yml; from the Go module proxy, pinned) ---
ACTIONLINT_VERSION="${ACTIONLINT_VERSION:-v1.7.12}"
if [ ! -x tools/bin/actionlint ]; then
  say "installing actionlint $ACTIONLINT_VERSION from the Go module proxy"
  GOBIN="$ROOT/tools/bin" GOFLAGS=-buildvcs=false go install "github.com/rhysd/actionlint/cmd/actionlint@$ACTIONLINT_VERSION"
fi
say "ready"
