// What the tests share: pools on the test cluster (direct and through PgBouncer), fresh
// queues, waiting for a condition, and a worker that records its events.
import pg from 'pg';

import { Worker, type WorkerOptions } from '../src/index.js';

function env(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run the tests through clients/test, which starts the servers`);
  return value;
}

/** Set-up and checks: the superuser, directly. */
export const DSN = () => env('PG_JOBS_TEST_DSN');
export const PGCTL = () => env('PG_JOBS_TEST_PGCTL');

/** Who connects: workers as a login role granted jobs_worker, producers as one granted jobs_client. */
export type Who = 'worker' | 'producer';
/** Where to: the server, or one of PgBouncer's pools (40, 2 or 3 server connections). */
export type Via = 'direct' | 'bouncer' | 'bouncer2' | 'bouncer3';

export function url(who: Who, via: Via = 'direct'): string {
  const user = env(who === 'worker' ? 'PG_JOBS_TEST_WORKER_ROLE' : 'PG_JOBS_TEST_PRODUCER_ROLE');
  if (via === 'direct') return `postgresql://${user}@127.0.0.1:${env('PG_JOBS_TEST_PORT')}/postgres`;
  const database = { bouncer: 'pgjobs', bouncer2: 'pgjobs_small', bouncer3: 'pgjobs_three' }[via];
  return `postgresql://${user}@127.0.0.1:${env('PG_JOBS_TEST_BOUNCER_PORT')}/${database}`;
}

const pools: pg.Pool[] = [];

/** A pool that every test file closes at the end (see closePools). */
export function pool(connectionString = DSN(), max = 20): pg.Pool {
  const p = new pg.Pool({ connectionString, max });
  p.on('error', () => undefined); // idle connections dropped by a server restart
  pools.push(p);
  return p;
}

export async function closePools(): Promise<void> {
  await Promise.all(pools.splice(0).map((p) => p.end().catch(() => undefined)));
}

let counter = 0;

/** Creates a queue no other test uses; `settings` are named SQL arguments of jobs_create_queue. */
export async function newQueue(db: pg.Pool, settings = ''): Promise<string> {
  const name = `node-${process.pid}-${++counter}`;
  await db.query(`SELECT jobs_create_queue('${name}'${settings ? `, ${settings}` : ''})`);
  return name;
}

/** The job's row as jobs_get returns it. */
export async function jobRow(db: pg.Pool, id: string): Promise<any> {
  const { rows } = await db.query('SELECT (jobs_get($1)).*', [id]);
  return rows[0];
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Polls `check` until it returns a truthy value, or fails after `timeoutMs`. */
export async function eventually<T>(what: string, check: () => Promise<T> | T, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value) return value;
      last = value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last: ${String(last)})`);
    await sleep(25);
  }
}

/** A started worker and the events it emitted, in order. */
export function recordingWorker(options: WorkerOptions): { worker: Worker; events: Array<[string, any]> } {
  const worker = new Worker({ signals: [], ...options });
  const events: Array<[string, any]> = [];
  for (const name of ['picked', 'completed', 'failed', 'released', 'awaiting', 'lost', 'retrying', 'error', 'stopped'] as const) {
    worker.on(name, (event: any) => events.push([name, event]));
  }
  worker.start();
  return { worker, events };
}

/** A statement a spied pool sent: its text and its parameters. */
export interface Sent {
  text: string;
  values: unknown[];
}

/**
 * A pool whose clients record every statement sent through them, in `sent` (what the worker
 * sends, as it sends it): pool.query() runs on a client of connect() too.
 */
export function spyPool(connectionString: string, max = 20): { pool: pg.Pool; sent: Sent[] } {
  const sent: Sent[] = [];
  const spy = pool(connectionString, max);
  const record = (client: any) => {
    if (client.__spied) return client;
    client.__spied = true;
    const query = client.query.bind(client);
    client.query = (...args: any[]) => {
      const [text, values] = args;
      sent.push({ text: typeof text === 'string' ? text : text.text, values: Array.isArray(values) ? values : [] });
      return query(...args);
    };
    return client;
  };
  const connect = spy.connect.bind(spy) as any;
  (spy as any).connect = (callback?: (err: Error | undefined, client: any, done: any) => void) =>
    callback
      ? connect((err: Error | undefined, client: any, done: any) => callback(err, client && record(client), done))
      : connect().then(record);
  return { pool: spy, sent };
}

/** How many statements of `sent` call the function `name`. */
export function calls(sent: Sent[], name: string): number {
  return sent.filter((s) => new RegExp(`\\b${name}\\(`).test(s.text)).length;
}

/**
 * A database of its own with pg_jobs, for counting commits: nothing else runs there (the
 * background worker serves only `postgres`), so its `pg_stat_database.xact_commit` counts the
 * transactions of the worker under test. Dropped at the end of `body`.
 */
export async function withOwnDatabase<T>(name: string, body: (dsn: (who: Who | 'admin') => string) => Promise<T>): Promise<T> {
  const admin = new pg.Client({ connectionString: DSN() });
  await admin.connect();
  const dsn = (who: Who | 'admin') => {
    const base = who === 'admin' ? DSN() : url(who);
    return base.replace(/\/postgres$/, `/${name}`);
  };
  try {
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.query(`CREATE DATABASE ${name}`);
    const setup = new pg.Client({ connectionString: dsn('admin') });
    await setup.connect();
    await setup.query('CREATE EXTENSION pg_jobs');
    await setup.end();
    return await body(dsn);
  } finally {
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => undefined);
    await admin.end();
  }
}

/**
 * The database's committed transactions so far, once no client is connected to it: a backend
 * sends its counts to the statistics when it exits (an idle one only every ten seconds).
 */
export async function commitsOf(name: string): Promise<number> {
  const db = pool(DSN(), 1);
  await eventually(`no client connected to ${name}`, async () => {
    const { rows } = await db.query(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend'",
      [name],
    );
    return rows[0].n === 0;
  });
  const { rows } = await db.query('SELECT xact_commit::int AS n FROM pg_stat_database WHERE datname = $1', [name]);
  return rows[0].n;
}
