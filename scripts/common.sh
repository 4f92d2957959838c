#!/usr/bin/env bash
# Shared by scripts/up and scripts/test: idempotent set-up of everything pg_jobs needs on a
# Debian machine (PostgreSQL 15, clang, cargo-pgrx, pgrx init), skipping what is already there.
set -euo pipefail

PG_MAJOR=15
PG_BIN=/usr/lib/postgresql/$PG_MAJOR/bin
PG_CONFIG=$PG_BIN/pg_config
PGRX_VERSION=0.18.1
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="$HOME/.cargo/bin:$PATH"

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

ensure_packages() {
  local missing=()
  [ -x "$PG_BIN/postgres" ] || missing+=("postgresql-$PG_MAJOR")
  [ -x "$PG_CONFIG" ] || missing+=("postgresql-server-dev-$PG_MAJOR")
  dpkg -s libclang-dev >/dev/null 2>&1 || missing+=(libclang-dev)
  command -v clang >/dev/null 2>&1 || missing+=(clang)
  command -v sudo >/dev/null 2>&1 || missing+=(sudo)   # cargo pgrx test --runas uses it
  if ((${#missing[@]})); then
    step "installing Debian packages: ${missing[*]}"
    command -v apt-get >/dev/null 2>&1 || die "apt-get not found: install ${missing[*]} by hand"
    as_root apt-get update -qq || die "apt-get update failed"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null \
      || die "could not install ${missing[*]}"
  else
    step "Debian packages: PostgreSQL $PG_MAJOR, its server headers, clang and sudo are present"
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
  if is_root; then chown postgres:postgres "$1"; fi
}
