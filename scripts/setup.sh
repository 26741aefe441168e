#!/usr/bin/env bash
# Install what refbench needs, idempotently: hyperfine, Go (if absent), MinIO, and the Python venv.
# Needs only the package registries (Debian, PyPI, the Go module proxy, crates.io); never GitHub.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MINIO_VERSION="${MINIO_VERSION:-v0.0.0-20260212201848-7aac2a2c5b7c}"
GO_TOOLCHAIN="${GO_TOOLCHAIN:-go1.24.6}"   # used only when no Go is installed
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/refbench"
mkdir -p tools/bin "$CACHE"
say() { printf 'setup: %s\n' "$*" >&2; }

# ---- Go -------------------------------------------------------------------------------------
if ! command -v go >/dev/null 2>&1 && [ ! -x tools/go/bin/go ]; then
  say "Go not found: fetching the $GO_TOOLCHAIN toolchain from the Go module proxy"
  arch=$(uname -m); case "$arch" in x86_64) arch=amd64;; aarch64) arch=arm64;; esac
  proxy="${GOPROXY:-https://proxy.golang.org}"; proxy="${proxy%%,*}"
  python3 - "$proxy" "$GO_TOOLCHAIN" "$arch" <<'PY'
import io, sys, urllib.request, zipfile, os, stat
proxy, ver, arch = sys.argv[1:]
url = f"{proxy}/golang.org/toolchain/@v/v0.0.1-{ver}.linux-{arch}.zip"
data = urllib.request.urlopen(url, timeout=300).read()
prefix = f"golang.org/toolchain@v0.0.1-{ver}.linux-{arch}/"
with zipfile.ZipFile(io.BytesIO(data)) as z:
    for info in z.infolist():
        if not info.filename.startswith(prefix) or info.is_dir():
            continue
        dest = os.path.join("tools/go", info.filename[len(prefix):])
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with z.open(info) as src, open(dest, "wb") as out:
            out.write(src.read())
        mode = (info.external_attr >> 16) & 0o777
        if mode & 0o111 or "/bin/" in dest or "/tool/" in dest:
            os.chmod(dest, 0o755)
PY
fi
if [ -x tools/go/bin/go ]; then ln -sf ../go/bin/go tools/bin/go; ln -sf ../go/bin/gofmt tools/bin/gofmt; fi
export PATH="$ROOT/tools/bin:$PATH"
say "$(go version)"

# ---- hyperfine ------------------------------------------------------------------------------
if ! command -v hyperfine >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing hyperfine (Debian package)"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq hyperfine >/dev/null
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null && command -v apt-get >/dev/null 2>&1; then
    sudo apt-get update -qq >/dev/null && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq hyperfine >/dev/null
  elif command -v cargo >/dev/null 2>&1; then
    say "installing hyperfine with cargo"
    cargo install --locked --root "$ROOT/tools" hyperfine
  else
    say "cannot install hyperfine: no apt-get (as root) and no cargo"; exit 2
  fi
fi
say "$(hyperfine --version)"
# GNU time measures peak RSS (optional: without it RSS is reported as n/a)
if [ ! -x /usr/bin/time ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  apt-get install -y -qq time >/dev/null 2>&1 || { apt-get update -qq >/dev/null && apt-get install -y -qq time >/dev/null; } || say "GNU time not installed: peak RSS will be n/a"
fi

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

# ---- MinIO (built from the Go module proxy once per machine, then reused) --------------------
minio_cached="$CACHE/minio-$MINIO_VERSION"
if [ ! -x "$minio_cached" ]; then
  say "building MinIO $MINIO_VERSION from the Go module proxy (a few minutes, once per machine)"
  tmp=$(mktemp -d)
  GOBIN="$tmp" GOFLAGS=-buildvcs=false go install "github.com/minio/minio@$MINIO_VERSION"
  mv "$tmp/minio" "$minio_cached.tmp" && mv "$minio_cached.tmp" "$minio_cached"
  rm -rf "$tmp"
fi
ln -sf "$minio_cached" tools/bin/minio

# ---- refbench-s3restore: our own small Go tool (tools-src/s3restore), cached by its source hash --
restore_hash=$(cat tools-src/s3restore/go.mod tools-src/s3restore/go.sum tools-src/s3restore/*.go | sha256sum | cut -c1-16)
restore_cached="$CACHE/s3restore-$restore_hash"
if [ ! -x "$restore_cached" ]; then
  say "building refbench-s3restore"
  (cd tools-src/s3restore && GOFLAGS=-buildvcs=false go build -o "$restore_cached.tmp" . && mv "$restore_cached.tmp" "$restore_cached")
fi
ln -sf "$restore_cached" tools/bin/refbench-s3restore

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
# ---- actionlint (lints .github/workflows; from the Go module proxy, pinned) ------------------
ACTIONLINT_VERSION="${ACTIONLINT_VERSION:-v1.7.12}"
if [ ! -x tools/bin/actionlint ]; then
  say "installing actionlint $ACTIONLINT_VERSION from the Go module proxy"
  GOBIN="$ROOT/tools/bin" GOFLAGS=-buildvcs=false go install "github.com/rhysd/actionlint/cmd/actionlint@$ACTIONLINT_VERSION"
fi
say "ready"
