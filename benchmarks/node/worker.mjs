// Graphile Worker comparator of the pg_jobs benchmark suite: one worker process running a
// no-op task, driven by the Rust load generator through environment variables and stdout.
//
//   node worker.mjs migrate      installs (or upgrades) Graphile Worker's schema, then exits
//   node worker.mjs              runs a worker until SIGTERM / SIGINT
//
// Environment: DATABASE_URL; GW_CONCURRENCY (default 8); GW_LOCAL_QUEUE (localQueue.size,
// -1 = off, the default); GW_COMPLETE_BATCH_DELAY (ms, -1 = off, the default); GW_MARK_EVERY
// (print a MARK line every N completed jobs, 0 = never); GW_STAMP=1 makes the task print a
// PICK line for each job.
//
// Lines on stdout, each one event (times are wall-clock microseconds since the Unix epoch):
//   READY <t>          the runner has started
//   FIRST <t>          the first job started
//   MARK <count> <t>   <count> jobs have succeeded
//   PICK <id> <t>      job <id> is in the task's hands (with GW_STAMP=1: pickup latency)
import { run, runMigrations, Logger } from "graphile-worker";
import { performance } from "node:perf_hooks";

const nowMicros = () => Math.round((performance.timeOrigin + performance.now()) * 1000);
const int = (name, fallback) => {
  const value = process.env[name];
  return value === undefined || value === "" ? fallback : Number.parseInt(value, 10);
};

// Only errors reach stderr; Graphile's info chatter would drown the event lines.
const logger = new Logger(() => (level, message) => {
  if (level === "error") process.stderr.write(`graphile-worker: ${message}\n`);
});

const connectionString = process.env.DATABASE_URL;
if (!connectionString) {
  process.stderr.write("worker.mjs: DATABASE_URL is not set\n");
  process.exit(2);
}

if (process.argv[2] === "migrate") {
  await runMigrations({ connectionString, logger });
  process.exit(0);
}

const concurrency = int("GW_CONCURRENCY", 8);
const localQueueSize = int("GW_LOCAL_QUEUE", -1);
const completeJobBatchDelay = int("GW_COMPLETE_BATCH_DELAY", -1);
const markEvery = int("GW_MARK_EVERY", 0);
const stamp = process.env.GW_STAMP === "1";

const out = [];
let flushScheduled = false;
const emit = (line) => {
  out.push(line);
  if (!flushScheduled) {
    flushScheduled = true;
    setImmediate(() => {
      flushScheduled = false;
      process.stdout.write(out.join("\n") + "\n");
      out.length = 0;
    });
  }
};

const runner = await run({
  connectionString,
  logger,
  concurrency,
  maxPoolSize: Math.max(10, concurrency + 2),
  noHandleSignals: true,
  // Batching settings exist only as preset options.
  preset: {
    worker: {
      ...(localQueueSize > 0 ? { localQueue: { size: localQueueSize } } : {}),
      completeJobBatchDelay,
    },
  },
  taskList: {
    noop: stamp
      ? async (_payload, helpers) => {
          emit(`PICK ${helpers.job.id} ${nowMicros()}`);
        }
      : async () => {},
  },
});

let started = false;
let succeeded = 0;
runner.events.on("job:start", () => {
  if (!started) {
    started = true;
    emit(`FIRST ${nowMicros()}`);
  }
});
runner.events.on("job:success", () => {
  succeeded += 1;
  if (markEvery > 0 && succeeded % markEvery === 0) emit(`MARK ${succeeded} ${nowMicros()}`);
});

emit(`READY ${nowMicros()}`);

let stopping = false;
const stop = async () => {
  if (stopping) return;
  stopping = true;
  await runner.stop();
  process.exit(0);
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
await runner.promise;
