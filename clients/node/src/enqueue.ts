// Producing jobs on the caller's own client or transaction: jobs_enqueue and
// jobs_enqueue_batch, with every option passed as a named argument and every parameter
// untyped (node-postgres sends them all with type OID 0; no jobs_* function is overloaded, so
// the server resolves each call by name).

/** Anything that runs a query: a `pg.Pool`, a `pg.Client` or a `PoolClient` inside a transaction. */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<{ rows: any[] }>;
}

/** Options of an enqueue; each one left out takes the server's default (see SPEC.md). */
export interface EnqueueOptions {
  /** The job's kind (default `'default'`): selects the worker's handler. */
  kind?: string;
  /** When the job becomes due (default: now, on the server's clock). */
  runAt?: Date | string;
  /** Lower runs first (default 0). */
  priority?: number;
  /** Attempts before the job ends `failed` (default: the queue's). */
  maxAttempts?: number;
  /** Carried untouched to every attempt (request id, traceparent, ...). */
  headers?: Record<string, unknown>;
  /** Unique jobs: while a job of this queue and key is queued or running, no second one is inserted. */
  uniqueKey?: string;
  /** With `uniqueKey`: also while one succeeded within this many milliseconds. */
  uniqueForMs?: number;
  /** With `uniqueKey`: `'skip'` (default), `'replace'` or `'error'`. */
  onConflict?: 'skip' | 'replace' | 'error';
  /** The tenant the job belongs to. */
  tenant?: string;
  /** Jobs sharing a group key run at most the queue's group_concurrency at a time. */
  groupKey?: string;
  /**
   * Dependencies: the job is `waiting` until every job listed here has ended `succeeded`, then
   * `queued`; a parent that ends `failed` or `cancelled` cancels it (see README "Workflows").
   */
  after?: JobId[];
}

/** A job id as the library takes it: the decimal string it returns, or a number or bigint. */
export type JobId = string | number | bigint;

/** Ids as a parameter: an array of decimal strings, which node-postgres sends untyped. */
export function ids(values: JobId[]): string[] {
  if (!Array.isArray(values)) throw new TypeError(`job ids must be an array, not ${JSON.stringify(values)}`);
  return values.map((v) => String(v));
}

/** One row of a batch enqueue: the job's id, and whether it was inserted or a unique duplicate found. */
export interface Enqueued {
  /** The job id, as a decimal string (bigint; see README "Ids"). */
  id: string;
  inserted: boolean;
}

/** Milliseconds as an interval literal the server parses exactly. */
export function interval(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) {
    throw new RangeError(`an interval must be a finite, non-negative number of milliseconds, not ${ms}`);
  }
  return `${ms} milliseconds`;
}

/** JSON text of a value for a jsonb parameter (node-postgres would turn a JS array into a Postgres array literal). */
export function json(value: unknown): string | null {
  if (value === undefined || value === null) return null;
  return JSON.stringify(value);
}

const NAMES: Array<[keyof EnqueueOptions, string, (v: any) => unknown]> = [
  ['kind', 'kind', (v) => v],
  ['runAt', 'run_at', (v) => (v instanceof Date ? v.toISOString() : v)],
  ['priority', 'priority', (v) => v],
  ['maxAttempts', 'max_attempts', (v) => v],
  ['headers', 'headers', json],
  ['uniqueKey', 'unique_key', (v) => v],
  ['uniqueForMs', 'unique_for', interval],
  ['onConflict', 'on_conflict', (v) => v],
  ['tenant', 'tenant', (v) => v],
  ['groupKey', 'group_key', (v) => v],
  ['after', 'after', ids],
];

function namedArguments(options: EnqueueOptions, values: unknown[]): string {
  let sql = '';
  for (const [key, name, convert] of NAMES) {
    if (options[key] === undefined) continue;
    values.push(convert(options[key]));
    sql += `, ${name} => $${values.length}`;
  }
  return sql;
}

/**
 * Enqueues one job on `client` (so inside the caller's transaction, if one is open) and returns
 * its id as a decimal string; for a unique duplicate, the existing job's id.
 */
export async function enqueue(
  client: Queryable,
  queue: string,
  payload: unknown = {},
  options: EnqueueOptions = {},
): Promise<string> {
  const values: unknown[] = [queue, json(payload) ?? 'null'];
  const sql = `SELECT jobs_enqueue($1, $2${namedArguments(options, values)}) AS id`;
  const { rows } = await client.query(sql, values);
  return String(rows[0].id);
}

/**
 * Enqueues one job per payload in one statement (with the same options for all) and returns,
 * in payload order, each job's id and whether it was inserted.
 */
export async function enqueueBatch(
  client: Queryable,
  queue: string,
  payloads: unknown[],
  options: EnqueueOptions = {},
): Promise<Enqueued[]> {
  const values: unknown[] = [queue, payloads.map((p) => json(p) ?? 'null')];
  const sql = `SELECT * FROM jobs_enqueue_batch($1, $2${namedArguments(options, values)}) AS e`;
  const { rows } = await client.query(sql, values);
  // Servers before unique jobs return a bare bigint column named after the function.
  return rows.map((r) => ({
    id: String(r.id ?? r.e ?? r.jobs_enqueue_batch),
    inserted: r.inserted ?? true,
  }));
}
