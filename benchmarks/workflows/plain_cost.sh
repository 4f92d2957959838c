#!/usr/bin/env bash
# What a queue that uses none of the workflow features pays per job, in counts that do not
# drift with the machine's load (two cores shared by other work make rates useless here):
#   * WAL bytes and records per enqueue + claim + complete: pgbench runs plain_cycle.sql JOBS
#     times in one session (each statement its own transaction) on a throwaway cluster;
#   * the server's instructions for the same cycle: a single-user backend runs a procedure that
#     does the cycles (one transaction each statement) under valgrind's callgrind, once with
#     SMALL and once with LARGE cycles, and the difference divided by the cycles is one cycle's
#     instructions (start-up and the procedure's set-up cancel out).
# Run it once with each build installed in PG_BIN, with the same arguments, and compare.
#
# Usage: [INSTRUCTIONS=0] plain_cost.sh PG_BIN WORK_DIR PORT [JOBS [SMALL LARGE]]
set -euo pipefail
trap '"${as_pg[@]}" "$bin/pg_ctl" -D "$data" -m immediate -w stop >/dev/null 2>&1 || true' EXIT
bin=$1 work=$2 port=$3 jobs=${4:-5000} small=${5:-500} large=${6:-2500}
here=$(cd "$(dirname "$0")" && pwd)
data=$work/data
as_pg=()
[ "$(id -u)" = 0 ] && as_pg=(runuser -u postgres --)
rm -rf "$work" && mkdir -p "$work"
[ "$(id -u)" = 0 ] && chown postgres "$work"
"${as_pg[@]}" "$bin/initdb" -A trust -U postgres --no-sync -D "$data" >/dev/null
cat >>"$data/postgresql.conf" <<CONF
shared_preload_libraries = 'pg_jobs'
pg_jobs.databases = ''
port = $port
listen_addresses = 'localhost'
unix_socket_directories = '$work'
fsync = off
synchronous_commit = off
full_page_writes = off
autovacuum = off
checkpoint_timeout = '1h'
max_wal_size = '10GB'
CONF
"${as_pg[@]}" "$bin/pg_ctl" -D "$data" -l "$work/log" -w start >/dev/null
psql=("$bin/psql" -X -q -h localhost -p "$port" -U postgres -At)
"${psql[@]}" -c "CREATE DATABASE plain_cost"
"${psql[@]}" -d plain_cost -f - >/dev/null <<'SQL'
CREATE EXTENSION pg_jobs;
SELECT jobs_create_queue('plain');
-- The cycle of plain_cycle.sql, n times, each statement committed on its own.
CREATE PROCEDURE plain_cycles(n integer) LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1..n LOOP
    PERFORM jobs_enqueue('plain', '{"n": 1}');
    COMMIT;
    PERFORM jobs_complete(c.id, c.lease) FROM jobs_claim('plain') c;
    COMMIT;
  END LOOP;
END $$;
SQL
# Warm up: plans kept, pages touched.
"$bin/pgbench" -n -h localhost -p "$port" -U postgres -c 1 -t 500 -f "$here/plain_cycle.sql" plain_cost >/dev/null
"${psql[@]}" -d plain_cost -c "CHECKPOINT"
start=$("${psql[@]}" -d plain_cost -c "SELECT pg_current_wal_insert_lsn()")
"$bin/pgbench" -n -h localhost -p "$port" -U postgres -c 1 -t "$jobs" -f "$here/plain_cycle.sql" plain_cost >/dev/null
end=$("${psql[@]}" -d plain_cost -c "SELECT pg_current_wal_insert_lsn()")
bytes=$("${psql[@]}" -d plain_cost -c "SELECT pg_wal_lsn_diff('$end', '$start')")
records=$("$bin/pg_waldump" -p "$data/pg_wal" -s "$start" -e "$end" --stats 2>/dev/null | awk '/^Total/ { print $2 }' || true)
echo "WAL per job: $(awk "BEGIN { printf \"%.1f bytes, %.2f records\", $bytes / $jobs, $records / $jobs }") ($jobs jobs)"
"${as_pg[@]}" "$bin/pg_ctl" -D "$data" -w stop >/dev/null

[ "${INSTRUCTIONS:-1}" = 1 ] || exit 0
# Instructions: a single-user backend (no other process interferes) under callgrind.
instructions() {
  local n=$1 out=$work/callgrind.$1
  echo "CALL plain_cycles($n);" | "${as_pg[@]}" valgrind --tool=callgrind --callgrind-out-file="$out" \
    "$bin/postgres" --single -D "$data" plain_cost >/dev/null 2>"$work/valgrind.$n.log"
  awk '/^summary:/ { print $2 }' "$out"
}
few=$(instructions "$small")
many=$(instructions "$large")
echo "server instructions per job: $(( (many - few) / (large - small) )) (callgrind, single-user backend, $small and $large cycles)"
