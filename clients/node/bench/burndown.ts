// The benchmark's Node burn-down (benchmarks/src/scenarios/clients.rs): a Worker with the
// library's defaults and a no-op handler drains a queue of queued jobs.
//   node dist/bench/burndown.js DSN QUEUE JOBS CONCURRENCY
// Prints READY once its connections are open, starts on a line GO on stdin, prints DONE once
// JOBS jobs have completed, then stops.
import { createInterface } from 'node:readline';
import pg from 'pg';

import { Worker } from '../src/index.js';

const [dsn, queue, jobsArg, concurrencyArg] = process.argv.slice(2);
const jobs = Number(jobsArg);
const concurrency = Number(concurrencyArg);
const pool = new pg.Pool({ connectionString: dsn, max: concurrency + 2 });
// Open the connections before the measurement starts.
const clients = await Promise.all(Array.from({ length: concurrency + 2 }, () => pool.connect()));
clients.forEach((c) => c.release());
let done = 0;
const worker = new Worker({ pool, queue, concurrency, handlers: { default: () => undefined } });
worker.on('completed', () => {
  if (++done === jobs) {
    console.log('DONE');
    void worker.stop().then(() => pool.end());
  }
});
for (const event of ['failed', 'lost', 'released'] as const) {
  worker.on(event, (e: any) => console.error(`unexpected ${event} of job ${e.job.id}`));
}
worker.on("error", (e) => console.error(`claim failed: ${e.message}`));
console.log('READY');
const lines = createInterface({ input: process.stdin });
lines.on('line', (line) => {
  if (line.trim() === 'GO') {
    lines.close();
    worker.start();
  }
});
