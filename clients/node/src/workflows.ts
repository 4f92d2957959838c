// Workflows on the caller's own client or transaction: the outcome of jobs (jobs_results), a
// wait until jobs have finished (jobs_wait) and a signal that wakes jobs awaiting it
// (jobs_signal). Every parameter is untyped, as in enqueue.ts. Dependencies are enqueue's
// `after` option; a handler awaits a signal through its context (worker.ts).

import { ids, interval, json, type JobId, type Queryable } from './enqueue.js';

/** A job's state (`waiting`: for its dependencies or a signal, holding no lease and no attempt). */
export type JobState = 'queued' | 'running' | 'waiting' | 'succeeded' | 'failed' | 'cancelled';

/** Every state a job can be in. */
export const STATES: readonly JobState[] = ['queued', 'running', 'waiting', 'succeeded', 'failed', 'cancelled'];

/** The states a job has ended in: `wait()` returns once every job is in one of them. */
export const FINISHED_STATES: readonly JobState[] = ['succeeded', 'failed', 'cancelled'];

/** The outcome of one job, as `results()` and `wait()` return it. */
export interface JobResult<R = any> {
  /** The job id, as a decimal string. */
  id: string;
  /** Its state when read. */
  state: JobState;
  /** What its handler returned (`jobs_complete`'s result), or null. */
  result: R | null;
  /** Its error history: one `{ attempt, at, error }` per failed attempt, or null. */
  errors: Array<{ attempt: number; at: string; error: string }> | null;
  /** When it finished; null while unfinished. */
  finishedAt: Date | null;
}

/** Options of `signal()`. */
export interface SignalOptions {
  /**
   * How long the signal stays recorded for an await that comes later, in milliseconds
   * (default: the server's, a day; 0: not recorded, only jobs waiting now are woken).
   */
  keepMs?: number;
}

function toResult(row: any): JobResult {
  return {
    id: String(row.id),
    state: row.state,
    result: row.result ?? null,
    errors: row.errors ?? null,
    finishedAt: row.finished_at ?? null,
  };
}

/**
 * The outcome of each listed job the caller may see, in the order given (`jobs_results`): a
 * job that does not exist, was purged, or belongs to another tenant has no row.
 */
export async function results<R = any>(client: Queryable, jobs: JobId[]): Promise<JobResult<R>[]> {
  const { rows } = await client.query('SELECT * FROM jobs_results($1)', [ids(jobs)]);
  return rows.map(toResult);
}

/**
 * Waits until every listed job has finished, or `timeoutMs` has passed, then returns their
 * outcomes as `results()` does (`jobs_wait`): woken by the commits that finish them, not by
 * polling. Run it on a pool or a client outside a transaction: the bare call in autocommit
 * holds no snapshot while it sleeps. The client's connection is busy for the whole wait (a
 * server connection too, behind PgBouncer).
 */
export async function wait<R = any>(client: Queryable, jobs: JobId[], timeoutMs: number): Promise<JobResult<R>[]> {
  // The bare call, nothing in its select list: the form whose wait holds no snapshot.
  const { rows } = await client.query('SELECT * FROM jobs_wait($1, $2)', [ids(jobs), interval(timeoutMs)]);
  return rows.map(toResult);
}

/**
 * Signals `name` (`jobs_signal`) on `client`, so inside the caller's transaction when one is
 * open: when it commits, every job of the session's tenant awaiting the signal is queued and
 * its next claim carries `payload`; the signal stays recorded for `keepMs` so that an await
 * that comes later returns at once. A rolled-back signal wakes nothing. Resolves to the number
 * of jobs it wakes (when the transaction commits).
 */
export async function signal(client: Queryable, name: string, payload: unknown = null, options: SignalOptions = {}): Promise<number> {
  const values: unknown[] = [name, json(payload)];
  let sql = 'SELECT jobs_signal($1, $2';
  if (options.keepMs !== undefined) {
    values.push(interval(options.keepMs));
    sql += ', keep => $3';
  }
  const { rows } = await client.query(`${sql}) AS woken`, values);
  return Number(rows[0].woken);
}
