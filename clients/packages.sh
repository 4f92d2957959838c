#!/usr/bin/env bash
# The client libraries as a user gets them: runs each README's install commands into scratch
# projects outside the tree (the Node package as the tarball npm pack makes and as a linked
# directory, from this tree and from a fresh copy of its files; the Python package as a wheel
# and straight from its directory), checks what the packages hold, type-checks the README's
# Node examples against the installed declarations, and runs every README example (workers,
# producers and the workflow example) against the test server. Run by clients/test while its servers are up (the
# PG_JOBS_TEST_* variables); npm and pip fetch from their registries or caches.
#
# The source tree must be left as it was found: `git status` of clients/, listing untracked
# files and, collapsed to directories, ignored ones (build/, *.egg-info, a tarball, a new
# node_modules), is the same before and after.
source "$(dirname "$0")/../scripts/common.sh"
source "$REPO/clients/cluster.sh"

for name in PG_JOBS_TEST_DSN PG_JOBS_TEST_PORT PG_JOBS_TEST_WORKER_ROLE PG_JOBS_TEST_PRODUCER_ROLE; do
  [ -n "${!name:-}" ] || die "$name is not set: run clients/test, which starts the test servers"
done
VERSION=0.3.0
WORKER_URL="postgresql://$PG_JOBS_TEST_WORKER_ROLE@127.0.0.1:$PG_JOBS_TEST_PORT/postgres"
PRODUCER_URL="postgresql://$PG_JOBS_TEST_PRODUCER_ROLE@127.0.0.1:$PG_JOBS_TEST_PORT/postgres"
PSQL=("$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -d "$PG_JOBS_TEST_DSN")

SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/pg_jobs-packages.XXXXXX")
case "$SCRATCH/" in "$REPO"/*) die "the scratch directory $SCRATCH is inside the source tree" ;; esac
WORKER_PID=
cleanup() {
  [ -z "$WORKER_PID" ] || kill "$WORKER_PID" 2>/dev/null || true
  rm -rf "$SCRATCH"
}
trap cleanup EXIT

tree_state() { git -C "$REPO" status --porcelain=v1 --untracked-files=normal --ignored=traditional -- clients/; }
BEFORE=$(tree_state)

# The fenced blocks of README $1 whose first line names a file ("// worker.mjs: ...",
# "# worker.py: ...") are written into directory $2; prints their names. With $3 = sh, prints
# the README's first sh block instead.
readme_blocks() {
  python3 - "$@" <<'PY'
import pathlib, re, sys
text = pathlib.Path(sys.argv[1]).read_text()
blocks = re.findall(r"^```(\w+)\n(.*?)^```", text, re.S | re.M)
if len(sys.argv) > 3:
    print(next(body for lang, body in blocks if lang == "sh"), end="")
    sys.exit()
names = []
for lang, body in blocks:
    match = re.match(r"(?://|#) (\w+\.(?:mjs|py)):", body)
    if match:
        (pathlib.Path(sys.argv[2]) / match[1]).write_text(body)
        names.append(match[1])
print(" ".join(names))
PY
}

# Runs the README's install commands (the part before "# or" with $3 = first, after it with
# $3 = second) in directory $2, with /path/to/pg_jobs meaning $4 and /tmp meaning $SCRATCH/packs.
run_install_block() {
  local readme=$1 dir=$2 part=$3 root=$4 block
  block=$(readme_blocks "$readme" - sh | awk -v part="$part" '/^# or/ { second = 1; next } (part == "first") != second')
  block=${block//\/tmp/$SCRATCH\/packs}
  block=${block//\/path\/to\/pg_jobs/$root}
  mkdir -p "$SCRATCH/packs"
  note "in ${dir#"$SCRATCH"/}: $(echo "$block" | tr '\n' ';')"
  (cd "$dir" && eval "$block") >"$dir.install.log" 2>&1 || { cat "$dir.install.log"; die "the README's install commands failed in $dir"; }
}

# A fresh copy of the files git knows in clients/ (tracked, or untracked and not ignored): a
# checkout without node_modules, dist or a virtualenv.
fresh_copy() {
  mkdir -p "$SCRATCH/checkout"
  (cd "$REPO" && git ls-files -z --cached --others --exclude-standard -- clients/node clients/python \
    | xargs -0 cp --parents -t "$SCRATCH/checkout")
}

# Runs the worker command $2 and then the producer command $3 of example set $1 (in the
# current directory) against a fresh queue "emails": the producer's three jobs must succeed
# on the worker, which SIGTERM must then stop gracefully.
run_examples() {
  local label=$1 worker=$2 producer=$3 i out
  "${PSQL[@]}" -c "SELECT jobs_drop_queue('emails', force => true) FROM jobs.queue WHERE name = 'emails'" \
    -c "SELECT jobs_create_queue('emails')" >/dev/null || die "could not create the queue emails"
  DATABASE_URL=$WORKER_URL $worker >worker.out 2>&1 &
  WORKER_PID=$!
  DATABASE_URL=$PRODUCER_URL $producer ada@example.com >producer.out 2>&1 \
    || { cat producer.out; die "$label: the README's producer failed"; }
  grep -q "^enqueued job [0-9]*$" producer.out || { cat producer.out; die "$label: the producer printed no job id"; }
  for i in $(seq 300); do
    out=$("${PSQL[@]}" -c "SELECT count(*) FILTER (WHERE state = 'succeeded') || '/' || count(*) FROM jobs.job WHERE queue = 'emails'")
    [ "$out" = 3/3 ] && break
    kill -0 "$WORKER_PID" 2>/dev/null || { cat worker.out; die "$label: the README's worker exited early"; }
    sleep 0.1
  done
  [ "$out" = 3/3 ] || { cat worker.out; die "$label: the README's worker finished $out of the producer's jobs"; }
  kill -TERM "$WORKER_PID"
  local status=0
  wait "$WORKER_PID" || status=$?
  WORKER_PID=
  # Node re-raises the signal once stopped (status 143); Python's run() returns.
  [ "$status" = 0 ] || [ "$status" = 143 ] || { cat worker.out; die "$label: the worker ended with status $status after SIGTERM"; }
  grep -q stopped worker.out || { cat worker.out; die "$label: the worker did not report that it stopped"; }
  note "$label: 3 jobs produced and run, worker stopped by SIGTERM"
}

# Runs the workflow example command $2 (example set $1) against a fresh queue "orders": it
# must finish by itself, printing the invoice (the parts' weights summed) and the shipment
# (woken by the payment's signal).
run_workflow_example() {
  local label=$1 command=$2
  "${PSQL[@]}" -c "SELECT jobs_drop_queue('orders', force => true) FROM jobs.queue WHERE name = 'orders'" \
    -c "SELECT jobs_create_queue('orders')" >/dev/null || die "could not create the queue orders"
  DATABASE_URL=$WORKER_URL timeout 120 $command >workflow.out 2>&1 \
    || { cat workflow.out; die "$label: the README's workflow example failed"; }
  grep -Eq '^job [0-9]+ succeeded: \{"weight": ?5\}$' workflow.out \
    || { cat workflow.out; die "$label: the workflow example printed no invoice of weight 5"; }
  grep -Eq '^job [0-9]+ succeeded: \{"paid": ?59.9, ?"shipped": ?true\}$' workflow.out \
    || { cat workflow.out; die "$label: the workflow example printed no shipment woken by the payment"; }
  note "$label: the workflow example fanned out and in, and its awaiting job was woken by the signal"
}

fresh_copy

step "Node: what npm pack puts in the package"
(cd "$NODE_LIB" && npm pack --pack-destination "$SCRATCH" --silent >/dev/null 2>"$SCRATCH/pack.log") \
  || { cat "$SCRATCH/pack.log"; die "npm pack failed in clients/node"; }
TARBALL=$SCRATCH/pg-jobs-$VERSION.tgz
[ -f "$TARBALL" ] || die "npm pack made no $TARBALL"
tar -tzf "$TARBALL" | sort >"$SCRATCH/contents"
for want in package/package.json package/README.md package/dist/src/index.js package/dist/src/index.d.ts \
  package/dist/src/worker.d.ts package/src/worker.ts; do
  grep -qx "$want" "$SCRATCH/contents" || die "the Node package lacks $want"
done
! grep -E '^package/(test|bench|dist/test|dist/bench|node_modules)/' "$SCRATCH/contents" \
  || die "the Node package holds tests, benchmarks or dependencies"
node -e '
  const p = require(process.argv[1]);
  const want = { name: "pg-jobs", version: process.argv[2], license: "PostgreSQL" };
  for (const [k, v] of Object.entries(want)) if (p[k] !== v) throw new Error(`package.json ${k} is ${p[k]}, not ${v}`);
  for (const k of ["description", "repository", "keywords", "engines", "exports", "types"]) if (!p[k]) throw new Error(`package.json has no ${k}`);
' "$NODE_LIB/package.json" "$VERSION" || die "clients/node/package.json lacks registry metadata"
note "$(wc -l <"$SCRATCH/contents") files; package.json has the registry metadata"

for from in checkout tree; do
  root=$SCRATCH/checkout
  [ $from = tree ] && root=$REPO
  # The linked directory first: in the fresh copy it has no compiler yet.
  for part in second first; do
    app=$SCRATCH/node-$from-$part
    step "Node: the README's install commands ($part way, from the $from) in ${app#"$SCRATCH"/}"
    mkdir -p "$app"
    (cd "$app" && npm init -y >/dev/null && npm pkg set type=module) || die "npm init failed"
    run_install_block "$NODE_LIB/README.md" "$app" $part "$root"
    if [ $part = first ]; then
      [ -f "$app/node_modules/pg-jobs/package.json" ] && [ ! -L "$app/node_modules/pg-jobs" ] \
        || die "the tarball did not install a copy of pg-jobs into $app"
    else
      [ -L "$app/node_modules/pg-jobs" ] && [ -f "$app/node_modules/pg-jobs/dist/src/index.js" ] \
        || die "installing the directory did not link a built pg-jobs into $app"
    fi
  done
done

step "Node: the README's examples type-check against the installed declarations and run"
app=$SCRATCH/node-checkout-first
examples=$(readme_blocks "$NODE_LIB/README.md" "$app")
[ "$examples" = "worker.mjs producer.mjs workflow.mjs" ] \
  || die "the Node README's examples are '$examples', not worker.mjs, producer.mjs and workflow.mjs"
(cd "$app" && npm install --no-audit --no-fund --loglevel=error @types/pg@8 @types/node@20 >/dev/null 2>&1) \
  || die "npm could not install @types/pg and @types/node for the type check"
cat >"$app/check.ts" <<'TS'
// What a TypeScript user writes: the package's types resolve through its exports.
import pg from 'pg';
import { Worker, enqueue, type FailedEvent, type Job } from 'pg-jobs';

const pool = new pg.Pool();
const worker = new Worker({ pool, queue: 'emails', handlers: { welcome: (job: Job<{ to: string }>) => job.payload.to } });
worker.on('failed', (event: FailedEvent) => console.log(event.message, event.stack ?? ''));
// @ts-expect-error: the options are checked
new Worker({ pool, queue: 'emails', handlers: {}, concurrency: 'eight' });
export const id: Promise<string> = enqueue(pool, 'emails', {});
TS
cat >"$app/tsconfig.json" <<'JSON'
{ "compilerOptions": { "module": "nodenext", "moduleResolution": "nodenext", "target": "es2022", "strict": true,
    "noEmit": true, "allowJs": true, "checkJs": true, "skipLibCheck": false, "types": ["node"] },
  "files": ["check.ts", "worker.mjs", "producer.mjs", "workflow.mjs"] }
JSON
(cd "$app" && "$NODE_LIB/node_modules/.bin/tsc" -p tsconfig.json) || die "the Node README's examples or check.ts do not type-check against the installed package"
note "check.ts, worker.mjs, producer.mjs and workflow.mjs type-check"
(cd "$app" && run_examples "Node (tarball)" "node worker.mjs" "node producer.mjs")
(cd "$app" && run_workflow_example "Node (tarball)" "node workflow.mjs")
app=$SCRATCH/node-checkout-second
readme_blocks "$NODE_LIB/README.md" "$app" >/dev/null
(cd "$app" && run_examples "Node (linked directory)" "node worker.mjs" "node producer.mjs")
(cd "$app" && run_workflow_example "Node (linked directory)" "node workflow.mjs")

step "Python: what pip wheel puts in the package"
"$PY_VENV/bin/pip" wheel --quiet --disable-pip-version-check --no-deps --wheel-dir "$SCRATCH/wheel" "$PY_LIB" \
  >"$SCRATCH/wheel.log" 2>&1 || { cat "$SCRATCH/wheel.log"; die "pip wheel failed for clients/python"; }
WHEEL=$SCRATCH/wheel/pg_jobs-$VERSION-py3-none-any.whl
[ -f "$WHEEL" ] || die "pip wheel made no $WHEEL"
python3 - "$WHEEL" "$VERSION" <<'PY' || die "the Python wheel lacks files or registry metadata"
import sys, zipfile
wheel, version = sys.argv[1], sys.argv[2]
names = zipfile.ZipFile(wheel).namelist()
for want in ("pg_jobs/__init__.py", "pg_jobs/worker.py", "pg_jobs/aio.py", "pg_jobs/py.typed"):
    assert want in names, f"the wheel lacks {want}"
assert not [n for n in names if n.startswith("tests/")], "the wheel holds the tests"
meta = zipfile.ZipFile(wheel).read(f"pg_jobs-{version}.dist-info/METADATA").decode()
for want in ("Name: pg-jobs", f"Version: {version}", "License-Expression: PostgreSQL", "Requires-Python: >=3.11",
             "Project-URL: Repository, ", "Keywords: ", "Summary: ", "Requires-Dist: psycopg"):
    assert any(line.startswith(want) for line in meta.splitlines()), f"METADATA has no {want!r}"
print(f"    {len(names)} files; METADATA has the registry metadata")
PY

for part in first second; do
  venv=$SCRATCH/py-$part
  step "Python: the README's install commands ($part way) in ${venv#"$SCRATCH"/}"
  python3 -m venv "$venv" || die "python3 -m venv failed"
  mkdir -p "$venv/app"
  PATH=$venv/bin:$PATH run_install_block "$PY_LIB/README.md" "$venv/app" $part "$REPO"
  location=$("$venv/bin/python" -c 'import pg_jobs, sys; print(pg_jobs.__file__)')
  case $location in "$venv"/*) ;; *) die "pg_jobs imports from $location, not from the virtualenv $venv" ;; esac
  examples=$(readme_blocks "$PY_LIB/README.md" "$venv/app")
  [ "$examples" = "worker.py async_worker.py producer.py workflow.py" ] \
    || die "the Python README's examples are '$examples', not worker.py, async_worker.py, producer.py and workflow.py"
  (cd "$venv/app" && run_examples "Python threads ($part way)" "$venv/bin/python worker.py" "$venv/bin/python producer.py")
  (cd "$venv/app" && run_examples "Python asyncio ($part way)" "$venv/bin/python async_worker.py" "$venv/bin/python producer.py")
  (cd "$venv/app" && run_workflow_example "Python ($part way)" "$venv/bin/python workflow.py")
done

step "the source tree is as it was"
AFTER=$(tree_state)
if [ "$BEFORE" != "$AFTER" ]; then
  diff <(echo "$BEFORE") <(echo "$AFTER") >&2
  die "building and installing the packages changed clients/ (above: < before, > after)"
fi
note "git status of clients/, with untracked and ignored files, is unchanged"
