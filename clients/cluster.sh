#!/usr/bin/env bash
# Shared by clients/test and the benchmark's client programs: installs the client libraries'
# dependencies idempotently, and starts or stops a throwaway PostgreSQL cluster (pg_jobs
# preloaded) with a PgBouncer 1.18 in transaction pooling mode in front of it.
#
# Sourced after scripts/common.sh, which provides step, note, die, as_pg_user, make_pg_dir,
# PG_BIN and REPO.

CLIENTS=$REPO/clients
NODE_LIB=$CLIENTS/node
PY_LIB=$CLIENTS/python
PY_VENV=$PY_LIB/.venv
PGBOUNCER=${PG_JOBS_PGBOUNCER:-/usr/sbin/pgbouncer}

# Node dependencies (versions pinned in package.json; npm's lock file stays local), then the
# TypeScript build into dist/ (not committed).
ensure_node_lib() {
  command -v node >/dev/null 2>&1 || die "node not found: install Node.js 20 (Debian: apt-get install nodejs npm)"
  command -v npm >/dev/null 2>&1 || die "npm not found: install npm (Debian: apt-get install npm)"
  local major
  major=$(node -p 'process.versions.node.split(".")[0]')
  [ "$major" -ge 20 ] || die "clients/node needs Node.js 20 or later; this machine has $(node --version)"
  local stamp=$NODE_LIB/node_modules/.pg-jobs-installed want
  want=$(cksum <"$NODE_LIB/package.json")
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    step "Node dependencies of clients/node are installed"
  else
    step "installing the Node dependencies of clients/node from npm"
    (cd "$NODE_LIB" && npm install --no-audit --no-fund --loglevel=error) \
      || die "npm install in $NODE_LIB failed (is the npm registry reachable?)"
    echo "$want" >"$stamp"
  fi
  step "compiling clients/node (TypeScript)"
  (cd "$NODE_LIB" && npm run --silent build) || die "the TypeScript build of clients/node failed (see above)"
}

# A virtualenv in clients/python/.venv (not committed) with the library and its test
# dependencies (versions pinned in pyproject.toml).
ensure_python_lib() {
  command -v python3 >/dev/null 2>&1 || die "python3 not found: install Python 3.11 with venv"
  if [ ! -x "$PY_VENV/bin/python" ]; then
    step "creating the virtualenv clients/python/.venv"
    python3 -m venv "$PY_VENV" \
      || die "python3 -m venv failed: install the venv module (Debian: apt-get install python3-venv)"
  fi
  local stamp=$PY_VENV/.pg-jobs-installed want
  want=$(cksum <"$PY_LIB/pyproject.toml")
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    step "Python dependencies of clients/python are installed"
  else
    step "installing clients/python and its test dependencies from PyPI into the virtualenv"
    "$PY_VENV/bin/pip" install --quiet --disable-pip-version-check -e "$PY_LIB[test]" \
      || die "pip install of clients/python failed (is PyPI reachable?)"
    echo "$want" >"$stamp"
  fi
}

# Prints a free TCP port on 127.0.0.1.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Starts a throwaway cluster in $1 (a fresh directory) on port $2 and PgBouncer on port $3.
# Sets CLUSTER_DIR, PG_PORT, BOUNCER_PORT and writes $1/pgctl, a helper that runs pg_ctl on
# the cluster as its owner (tests restart the server through it).
start_test_servers() {
  CLUSTER_DIR=$1 PG_PORT=$2 BOUNCER_PORT=$3
  [ -x "$PGBOUNCER" ] || die "PgBouncer not found at $PGBOUNCER (Debian package pgbouncer; scripts/common.sh installs it)"
  rm -rf "$CLUSTER_DIR"
  make_pg_dir "$CLUSTER_DIR"
  step "starting a throwaway cluster on port $PG_PORT ($CLUSTER_DIR)"
  as_pg_user "$PG_BIN/initdb" -D "$CLUSTER_DIR/data" -U postgres -A trust --no-sync >/dev/null \
    || die "initdb failed"
  as_pg_user tee -a "$CLUSTER_DIR/data/postgresql.conf" >/dev/null <<CONF
port = $PG_PORT
listen_addresses = '127.0.0.1'
unix_socket_directories = '$CLUSTER_DIR'
shared_preload_libraries = 'pg_jobs'
pg_jobs.databases = 'postgres'
pg_jobs.tick = '200ms'
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
log_min_messages = warning
CONF
  cat >"$CLUSTER_DIR/pgctl" <<SH
#!/usr/bin/env bash
# pg_ctl on the clients' test cluster, as the user that owns it: pgctl restart|stop|start
set -e
cmd=\$1; shift
user=\$(stat -c %U "$CLUSTER_DIR/data")
run() { if [ "\$(id -u)" = 0 ]; then runuser -u "\$user" -- "\$@"; else "\$@"; fi; }
run "$PG_BIN/pg_ctl" "\$cmd" -D "$CLUSTER_DIR/data" -l "$CLUSTER_DIR/server.log" -w -t 60 -m fast "\$@" >/dev/null
SH
  chmod +x "$CLUSTER_DIR/pgctl"
  "$CLUSTER_DIR/pgctl" start || die "the test cluster did not start; see $CLUSTER_DIR/server.log"
  "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres \
    -c "CREATE EXTENSION pg_jobs" \
    -c "CREATE ROLE pgjobs_test_worker LOGIN" -c "GRANT jobs_worker TO pgjobs_test_worker" \
    -c "CREATE ROLE pgjobs_test_producer LOGIN" -c "GRANT jobs_client TO pgjobs_test_producer" \
    || die "CREATE EXTENSION pg_jobs, or the test roles granted jobs_worker and jobs_client, failed in the test cluster"

  step "starting PgBouncer (transaction pooling) on port $BOUNCER_PORT in front of it"
  # Three names for the same database: a roomy pool, and pools of 2 and 3 server connections
  # (the tests show what a waiting claim does to a pool that is too small).
  as_pg_user tee "$CLUSTER_DIR/pgbouncer.ini" >/dev/null <<INI
[databases]
pgjobs = host=127.0.0.1 port=$PG_PORT dbname=postgres pool_size=40
pgjobs_small = host=127.0.0.1 port=$PG_PORT dbname=postgres pool_size=2
pgjobs_three = host=127.0.0.1 port=$PG_PORT dbname=postgres pool_size=3

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $BOUNCER_PORT
unix_socket_dir =
auth_type = trust
auth_file = $CLUSTER_DIR/userlist.txt
pool_mode = transaction
max_client_conn = 500
default_pool_size = 20
server_reset_query =
server_check_delay = 0
logfile = $CLUSTER_DIR/pgbouncer.log
pidfile = $CLUSTER_DIR/pgbouncer.pid
INI
  printf '"%s" ""\n' postgres pgjobs_test_worker pgjobs_test_producer | as_pg_user tee "$CLUSTER_DIR/userlist.txt" >/dev/null
  # PgBouncer refuses to run as root; -d daemonises it and writes the pid file.
  as_pg_user "$PGBOUNCER" -d -q "$CLUSTER_DIR/pgbouncer.ini" \
    || die "PgBouncer did not start; see $CLUSTER_DIR/pgbouncer.log"
  local i
  for i in $(seq 50); do
    "$PG_BIN/psql" -X -q -h 127.0.0.1 -p "$BOUNCER_PORT" -U postgres -d pgjobs -c 'SELECT 1' >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  die "PgBouncer on port $BOUNCER_PORT does not answer; see $CLUSTER_DIR/pgbouncer.log"
}

# Stops what start_test_servers started (only those processes, by their pid files).
stop_test_servers() {
  [ -n "${CLUSTER_DIR:-}" ] || return 0
  if [ -f "$CLUSTER_DIR/pgbouncer.pid" ]; then
    kill "$(cat "$CLUSTER_DIR/pgbouncer.pid")" 2>/dev/null || true
  fi
  if [ -f "$CLUSTER_DIR/data/postmaster.pid" ]; then
    "$CLUSTER_DIR/pgctl" stop >/dev/null 2>&1 || true
  fi
}

# The environment the tests read. Workers connect as pgjobs_test_worker (granted jobs_worker),
# producers as pgjobs_test_producer (granted jobs_client), set-up and checks as postgres.
export_test_env() {
  export PG_JOBS_TEST_DSN="postgresql://postgres@127.0.0.1:$PG_PORT/postgres"
  export PG_JOBS_TEST_PORT=$PG_PORT PG_JOBS_TEST_BOUNCER_PORT=$BOUNCER_PORT
  export PG_JOBS_TEST_WORKER_ROLE=pgjobs_test_worker PG_JOBS_TEST_PRODUCER_ROLE=pgjobs_test_producer
  export PG_JOBS_TEST_PGCTL="$CLUSTER_DIR/pgctl"
}
