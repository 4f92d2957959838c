#!/usr/bin/env bash
# Shared by scripts/up, scripts/test and benchmarks/run: idempotent set-up of everything pg_jobs
# needs on a Debian machine (PostgreSQL with its server headers, libclang, clang, sudo,
# cargo-pgrx, pgrx init), skipping what is already there.
#
# Each package is decided by a file that only that package ships (never by a file another
# package also provides: pg_config comes with the client package, so its presence says nothing
# about the server headers), and checked again after the install, so a package that did not
# bring what we need is named in the error instead of failing a build minutes later.
set -euo pipefail

# The PostgreSQL major version pg_jobs is built and tested against: the one setting for it in
# the scripts (the test harness reads PG_JOBS_PG_BIN, which is derived from it below).
# PG_JOBS_PG_BIN may point at another installation of that major (its bin/ directory).
PG_MAJOR=${PG_JOBS_PG_MAJOR:-15}
PG_BIN=${PG_JOBS_PG_BIN:-/usr/lib/postgresql/$PG_MAJOR/bin}
PG_CONFIG=$PG_BIN/pg_config
PGRX_VERSION=0.18.1
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="$HOME/.cargo/bin:$PATH"
export PG_JOBS_PG_BIN=$PG_BIN PG_JOBS_PG_MAJOR=$PG_MAJOR

step() { printf '\n==> %s\n' "$*"; }
note() { printf '    %s\n' "$*"; }
die() { printf '\nerror: %s\n' "$*" >&2; exit 1; }

is_root() { [ "$(id -u)" = 0 ]; }

# Runs a command as root: directly when we are root, else through sudo.
as_root() {
  if is_root; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else die "this step needs root and sudo is not installed: $*"
  fi
}

# Runs a PostgreSQL program as the user that owns our clusters: initdb refuses to run as root,
# so root runs them as 'postgres'.
as_pg_user() {
  if is_root; then runuser -u postgres -- "$@"; else "$@"; fi
}

# The server headers pgrx's bindgen reads: only postgresql-server-dev-N ships postgres.h.
server_header() {
  local includedir
  includedir=$("$PG_CONFIG" --includedir-server 2>/dev/null) || includedir=/usr/include/postgresql/$PG_MAJOR/server
  printf '%s/postgres.h' "$includedir"
}

# The isolation tester driver the integration tests run.
isolation_regress() {
  local pkglibdir
  pkglibdir=$("$PG_CONFIG" --pkglibdir 2>/dev/null) || pkglibdir=/usr/lib/postgresql/$PG_MAJOR/lib
  printf '%s/pgxs/src/test/isolation/pg_isolation_regress' "$pkglibdir"
}

# libclang for bindgen (libclang-dev ships the unversioned libclang.so in the LLVM tree).
has_libclang() {
  compgen -G '/usr/lib/llvm-*/lib/libclang.so' >/dev/null
}

# Prints the Debian packages whose marker file is missing, one per line.
missing_packages() {
  [ -x "$PG_BIN/postgres" ] || echo "postgresql-$PG_MAJOR"
  [ -x "$PG_CONFIG" ] || echo "postgresql-client-$PG_MAJOR"
  [ -f "$(server_header)" ] || echo "postgresql-server-dev-$PG_MAJOR"
  # postgresql-server-dev-N depends on the client package of the same version, which carries
  # the isolation tester in current Debian releases (older ones shipped it in server-dev).
  [ -x "$(isolation_regress)" ] || echo "postgresql-server-dev-$PG_MAJOR"
  has_libclang || echo libclang-dev
  [ -x /usr/bin/clang ] || echo clang
  [ -x /usr/bin/sudo ] || echo sudo   # cargo pgrx test --runas uses it
  [ -x /usr/sbin/pgbouncer ] || echo pgbouncer   # the client libraries are tested through it
}

ensure_packages() {
  local missing
  mapfile -t missing < <(missing_packages | sort -u)
  if ((${#missing[@]} == 0)); then
    step "Debian packages: PostgreSQL $PG_MAJOR with its server headers, libclang, clang, sudo and pgbouncer are present"
    return
  fi
  step "installing Debian packages: ${missing[*]}"
  command -v apt-get >/dev/null 2>&1 || die "apt-get not found: install ${missing[*]} by hand"
  as_root apt-get update -qq || die "apt-get update failed (is the Debian mirror reachable?)"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null \
    || die "apt-get install ${missing[*]} failed (see above)"
  # Check again by the same files: an install that did not bring them is named here.
  local still
  mapfile -t still < <(missing_packages | sort -u)
  if ((${#still[@]})); then
    local package what=()
    for package in "${still[@]}"; do
      case $package in
        postgresql-server-dev-*) what+=("$package (expected $(server_header) and $(isolation_regress))") ;;
        libclang-dev) what+=("libclang-dev (expected /usr/lib/llvm-*/lib/libclang.so)") ;;
        *) what+=("$package") ;;
      esac
    done
    die "installed, but still missing what these packages should provide: ${what[*]}"
  fi
}

ensure_cargo_pgrx() {
  command -v cargo >/dev/null 2>&1 || die "cargo not found: install Rust (rustup) first"
  if cargo pgrx --version 2>/dev/null | grep -q " $PGRX_VERSION\$"; then
    step "cargo-pgrx $PGRX_VERSION is installed"
  else
    step "installing cargo-pgrx $PGRX_VERSION (a few minutes)"
    cargo install cargo-pgrx --version "$PGRX_VERSION" --locked || die "cargo install cargo-pgrx failed"
  fi
}

ensure_pgrx_init() {
  local config="${PGRX_HOME:-$HOME/.pgrx}/config.toml"
  if [ -f "$config" ] && grep -q "pg$PG_MAJOR = \"$PG_CONFIG\"" "$config"; then
    step "pgrx is initialised for PostgreSQL $PG_MAJOR"
  else
    step "initialising pgrx for the system PostgreSQL $PG_MAJOR (no download)"
    cargo pgrx init --pg$PG_MAJOR "$PG_CONFIG" || die "cargo pgrx init failed"
  fi
}

# pgspot (PyPI), which lints the extension's install and upgrade scripts in the test suite, in
# a virtualenv of its own; exports PG_JOBS_PGSPOT for the tests.
PGSPOT_VERSION=0.9.4
ensure_pgspot() {
  local venv=${PG_JOBS_TOOLS:-$HOME/.cache/pg_jobs}/pgspot-$PGSPOT_VERSION
  if [ -x "$venv/bin/pgspot" ]; then
    step "pgspot $PGSPOT_VERSION is installed"
  else
    step "installing pgspot $PGSPOT_VERSION from PyPI into $venv"
    python3 -m venv "$venv" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
    "$venv/bin/pip" install -q "pgspot==$PGSPOT_VERSION" || die "pip install pgspot failed (is PyPI reachable?)"
  fi
  export PG_JOBS_PGSPOT=$venv/bin/pgspot
}

ensure_toolchain() {
  ensure_packages
  ensure_cargo_pgrx
  ensure_pgrx_init
}

# Builds pg_jobs and installs it into the system PostgreSQL; extra arguments go to cargo pgrx.
install_extension() {
  step "building and installing pg_jobs into PostgreSQL $PG_MAJOR $*"
  local sudo=()
  is_root || sudo=(--sudo)
  (cd "$REPO" && cargo pgrx install --pg-config "$PG_CONFIG" "${sudo[@]}" "$@") \
    || die "building or installing pg_jobs failed (see above)"
}

# Makes a directory owned by the user that runs our clusters.
make_pg_dir() {
  mkdir -p "$1" 2>/dev/null || as_root mkdir -p "$1"
  if is_root; then
    chown postgres:postgres "$1"
    # The server runs as postgres: it must be able to pass through every directory above its
    # own (a private temporary directory, made with mode 700, is not passable).
    local dir
    dir=$(dirname "$(realpath "$1")")
    while [ "$dir" != / ]; do
      if ! runuser -u postgres -- test -x "$dir" 2>/dev/null; then
        echo "    letting postgres pass through $dir (chmod o+x)"
        chmod o+x "$dir" || die "postgres cannot reach $1: $dir is closed to it and chmod o+x failed"
      fi
      dir=$(dirname "$dir")
    done
  fi
}
