// The worker: one claim loop that waits in the server (jobs_claim(wait => ...)) for up to as
// many jobs as it has free slots, a lease keeper per running job that heartbeats every
// lease/3, and the settle calls that turn a handler's outcome into jobs_complete, jobs_fail or
// jobs_release. A steady worker completes what finished and claims what comes next in one
// call (jobs_complete_and_claim): one commit per job. Every call is one autocommit statement
// with untyped parameters and no session state, so the worker runs unchanged behind
// PgBouncer in transaction pooling mode.

import { EventEmitter } from 'node:events';
import net from 'node:net';
import os from 'node:os';
import { randomBytes } from 'node:crypto';
import type { Pool, PoolClient } from 'pg';

import { interval, json } from './enqueue.js';

/** A claimed job as a handler sees it. */
export interface Job<P = any> {
  /** The job id as a decimal string: bigint values do not fit a JS number (see README "Ids"). */
  id: string;
  queue: string;
  kind: string;
  payload: P;
  headers: Record<string, unknown> | null;
  /** This attempt's number, from 1; attempts count at claim. */
  attempt: number;
  maxAttempts: number;
  priority: number;
  /** The lease token of this claim: every heartbeat and settle call presents it. */
  lease: string;
  createdAt: Date;
  runAt: Date;
  /**
   * The signal this run was woken by, when an earlier run of the job awaited one
   * (`awaitSignal`): its name, the payload `jobs_signal` sent, and whether the await timed out
   * instead (then the payload is null). Null on every other run.
   */
  signal: JobSignal | null;
}

/** The signal a job was woken by (`jobs.claimed.signal`). */
export interface JobSignal<P = any> {
  name: string;
  payload: P | null;
  /** The await's timeout passed before the signal came. */
  timedOut: boolean;
}

/** What `awaitSignal` answers: see {@link JobContext.awaitSignal}. */
export type AwaitOutcome = 'waiting' | 'queued' | 'cancelled' | 'lost';

/** Options of `awaitSignal`. */
export interface AwaitOptions {
  /** How long to wait for the signal, in milliseconds (default: the server's, a day); then the job runs again with `signal.timedOut`. */
  timeoutMs?: number;
}

/** What a handler gets beside the job. */
export interface JobContext {
  /** Fires when the job is cancelled, its lease is lost, it times out, or the worker shuts down. */
  signal: AbortSignal;
  /**
   * Stores progress on the job (and renews its lease). Resolves to the heartbeat's outcome:
   * `'running'`, or `'cancelled'`/`'lost'` (then `signal` has fired too).
   */
  progress(value: unknown): Promise<string>;
  /**
   * Ends this run to wait for the signal `name` (`jobs_await`) without spending the attempt:
   * the job is `waiting`, holding no lease and no slot, until a `jobs_signal` of that name
   * commits (or `timeoutMs` passes), and then runs again with `job.signal` set. Resolves to
   * `'waiting'`, `'queued'` (the signal was recorded already: the job is queued at once),
   * `'cancelled'` or `'lost'` (nothing was recorded). Return from the handler right after:
   * the run has ended (`signal` has fired), and what the handler returns is ignored. An await
   * the server refuses (a name out of range) rejects, and the attempt fails with that error.
   */
  awaitSignal(name: string, options?: AwaitOptions): Promise<AwaitOutcome>;
}

/** A handler function: its return value becomes the job's result. */
export type HandlerFunction<P = any> = (job: Job<P>, ctx: JobContext) => unknown;

/** A handler with options. */
export interface HandlerSpec<P = any> {
  run: HandlerFunction<P>;
  /** Returns false for a malformed job: it then fails at once, without retries. */
  accepts?: (job: Job<P>) => boolean;
  /** Overrides the worker's `timeoutMs` for this kind. */
  timeoutMs?: number;
}

/** A handler: a function, or a function with options. */
export type Handler<P = any> = HandlerFunction<P> | HandlerSpec<P>;

/** Thrown by a handler for a failure that retrying cannot fix: the job fails at once. */
export class PermanentError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'PermanentError';
  }
}

/** The reason a job's signal fires with when its handler ran past its time limit. */
export class JobTimeoutError extends Error {
  constructor(ms: number) {
    super(`the handler ran longer than its time limit of ${ms} ms`);
    this.name = 'JobTimeoutError';
  }
}

/**
 * The error a job of a kind without a handler fails with: at once with `unknownKind: 'fail'`,
 * or once the job is older than `unknownKindMaxAgeMs` (no deploy takes that long to bring
 * its handler).
 */
export class UnknownKindError extends Error {
  /** The job's kind. */
  readonly kind: string;
  /** The kinds this worker has handlers for. */
  readonly handled: string[];
  constructor(kind: string, worker: string, handled: string[], detail?: string) {
    const list = handled.length ? handled.map((k) => JSON.stringify(k)).join(', ') : 'no kinds';
    super(`no handler for kind ${JSON.stringify(kind)} in worker ${worker}, which handles ${list}${detail ? `; ${detail}` : ''}`);
    this.name = 'UnknownKindError';
    this.kind = kind;
    this.handled = handled;
  }
}

/**
 * An error as both libraries report it: `message` is the first line (`Name: message`), `stack`
 * in a field of its own: the frames, then each error it was caused by (`cause`) with its own
 * frames (null when there is none of that).
 */
export function describeError(error: unknown): { message: string; stack: string | null } {
  const parts: string[] = [];
  const seen = new Set<unknown>([error]);
  let cause = error instanceof Error ? error.cause : undefined;
  parts.push(frames(error));
  while (cause !== undefined && cause !== null && !seen.has(cause)) {
    seen.add(cause);
    parts.push(`caused by ${firstLine(cause)}`, frames(cause));
    cause = cause instanceof Error ? cause.cause : undefined;
  }
  const stack = parts.filter((part) => part !== '').join('\n');
  return { message: firstLine(error), stack: stack || null };
}

function firstLine(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  // An error the server raised (pg's DatabaseError, named 'error'): its SQLSTATE and hint too,
  // as the Python library writes psycopg's.
  const server = error as { code?: unknown; severity?: unknown; hint?: unknown };
  if (typeof server.code === 'string' && /^[0-9A-Z]{5}$/.test(server.code) && typeof server.severity === 'string') {
    const hint = typeof server.hint === 'string' && server.hint ? `; hint: ${server.hint}` : '';
    return `${error.constructor.name}: ${error.message} (SQLSTATE ${server.code}${hint})`;
  }
  return error.message ? `${error.name}: ${error.message}` : error.name;
}

function frames(error: unknown): string {
  // V8's stack is the header (the name and message, possibly several lines) and then one
  // "    at ..." line per frame: keep the frames.
  const stack = error instanceof Error && typeof error.stack === 'string' ? error.stack : '';
  const start = stack.search(/^\s+at /m);
  return start >= 0 ? stack.slice(start).trimEnd() : '';
}

/** The text stored in the job's error history: the message first, then the stack. */
export function errorText(error: unknown): string {
  const { message, stack } = describeError(error);
  return stack ? `${message}\n${stack}` : message;
}

/** Settings of a worker. */
export interface WorkerOptions {
  /** Connections: the claim loop holds one for the worker's life, heartbeats and settles borrow one per call. */
  pool: Pool;
  queue: string;
  /** Handlers by job kind. */
  handlers: Record<string, Handler>;
  /** Handlers running at once (default 8). */
  concurrency?: number;
  /** Lease of each claim in milliseconds (default: the queue's lease). */
  lease?: number;
  /** How long one claim waits in the server for work, in milliseconds (default 30,000). */
  waitMs?: number;
  /**
   * The worker name stored on each job. Passed on every claim: behind a pooler the server's
   * default (application_name or the backend pid) is whatever connection the pooler lends.
   * Default: `<hostname>-<pid>-<random>`.
   */
  name?: string;
  /**
   * A job of a kind without a handler: `'release'` it with a delay (default: a deploy in
   * progress may bring its handler; the attempt is given back) while the job is younger than
   * `unknownKindMaxAgeMs`, or `'fail'` it at once (for good).
   */
  unknownKind?: 'release' | 'fail';
  /** The delay of such a release, in milliseconds (default 60,000). */
  unknownKindDelayMs?: number;
  /**
   * How old (since its `created_at`, on the server's clock) a job of a kind without a handler
   * may be and still be released, in milliseconds (default 3,600,000: an hour). An older one
   * fails with an {@link UnknownKindError}, spending its attempts with the queue's backoff
   * until it ends `failed`, with the error in its history.
   */
  unknownKindMaxAgeMs?: number;
  /** Claim every kind (`'all'`, the default) or only kinds that have a handler (`'handled'`). */
  kinds?: 'all' | 'handled';
  /** Time limit of one handler run in milliseconds (default: none). Past it the job fails (and is retried). */
  timeoutMs?: number;
  /** Signals that stop the worker gracefully (default SIGTERM and SIGINT; `[]` for none). */
  signals?: NodeJS.Signals[];
  /** The grace a signal-initiated stop gives running handlers, in milliseconds (default 10,000). */
  graceMs?: number;
  /**
   * One commit per job (default true): a job that succeeded is completed in the same call,
   * and the same transaction, that claims the worker's next jobs (`jobs_complete_and_claim`),
   * rather than by a `jobs_complete` of its own beside the claim. `false`: the settles and the
   * claims are separate calls, as before 0.3.0.
   */
  oneCommitPerJob?: boolean;
}

/** Outcome of a heartbeat or settle call that means "this job is no longer ours". */
export type LostOutcome = 'lost' | 'cancelled';

/** A claim returned the job. */
export interface PickedEvent {
  type: 'picked';
  job: Job;
}
/** The job's result was recorded: it `succeeded`. */
export interface CompletedEvent {
  type: 'completed';
  job: Job;
  durationMs: number;
  outcome: 'succeeded';
  result: unknown;
}
/** The attempt failed: `outcome` is `'queued'` (a retry is scheduled) or `'failed'` (for good). */
export interface FailedEvent {
  type: 'failed';
  job: Job;
  durationMs: number;
  outcome: 'queued' | 'failed';
  /** The failure was permanent (no retry was asked for). */
  permanent: boolean;
  /** What the handler threw (or the library's own error: a time limit, an unknown kind). */
  error: unknown;
  /** The error's first line, `Name: message`, as the job's error history starts with it. */
  message: string;
  /** The error's stack frames, or null. */
  stack: string | null;
}
/** The job was handed back without spending its attempt. */
export interface ReleasedEvent {
  type: 'released';
  job: Job;
  durationMs: number;
  outcome: 'queued';
  reason: string;
}
/**
 * The handler awaited a signal: the job waits for it (`outcome` `'waiting'`), or was queued
 * at once because the signal was recorded already (`'queued'`); its attempt was given back.
 */
export interface AwaitingEvent {
  type: 'awaiting';
  job: Job;
  durationMs: number;
  outcome: 'waiting' | 'queued';
  /** The signal's name. */
  signal: string;
}
/** The job was cancelled or its lease lost: nothing was recorded. */
export interface LostEvent {
  type: 'lost';
  job: Job;
  durationMs: number;
  outcome: LostOutcome;
  during: 'heartbeat' | 'settle';
}
/** A database call failed in transit (connection lost, server restarting): it is retried. */
export interface RetryingEvent {
  type: 'retrying';
  /** The job the call was about, or null (a claim, an idle connection). */
  job: Job | null;
  /** `'claim'`, `'heartbeat'`, `'complete'`, `'fail'`, `'release'`, `'await'` or `'idle'`. */
  during: string;
  error: unknown;
  message: string;
}
/**
 * A database call failed for a reason retrying soon will not fix (an unknown queue, a missing
 * privilege, a settle the server refused). A claim is tried again every 5 s.
 */
export interface ErrorEvent {
  type: 'error';
  job: Job | null;
  during: string;
  error: unknown;
  message: string;
}
/** The worker has stopped: no lease is left held. */
export interface StoppedEvent {
  type: 'stopped';
}
/** Any event a worker emits. */
export type WorkerEvent =
  | PickedEvent
  | CompletedEvent
  | FailedEvent
  | ReleasedEvent
  | AwaitingEvent
  | LostEvent
  | RetryingEvent
  | ErrorEvent
  | StoppedEvent;

/**
 * The events a worker emits, for metrics and logs: each listener gets one event object, whose
 * `type` is the event's name. The Python library's events have the same names and fields
 * (see README.md, "Events").
 */
export interface WorkerEvents {
  picked: [PickedEvent];
  completed: [CompletedEvent];
  failed: [FailedEvent];
  released: [ReleasedEvent];
  awaiting: [AwaitingEvent];
  lost: [LostEvent];
  retrying: [RetryingEvent];
  /** Without a listener a claim's error throws, as Node's 'error' events do. */
  error: [ErrorEvent];
  stopped: [StoppedEvent];
}

interface Running {
  job: Job;
  controller: AbortController;
  started: number;
  leaseMs: number;
  timer?: NodeJS.Timeout;
  timeout?: NodeJS.Timeout;
  /** Set once the job's fate is decided: later outcomes of its handler are ignored. */
  done: boolean;
  /** Why the job is no longer ours, once a heartbeat or settle said so. */
  gone?: LostOutcome;
  /** Resolves when the job is settled, released or given up. */
  finished: Promise<void>;
  finish: () => void;
  /**
   * A jobs_complete_and_claim carrying its completion failed in transit, so it may have
   * committed: a `lost` from the completion sent again is checked, as a retried one is.
   */
  uncertain?: boolean;
}

/** A job that succeeded, waiting for the claim loop to complete it in its next claim. */
interface Finished {
  r: Running;
  result: unknown;
}

// The claim is the bare call, nothing in its select list: in autocommit that is the form whose
// wait holds no snapshot (the server stops advertising its xmin while it sleeps), so waiting
// workers never hold back vacuum. What the worker needs beside the rows it works out from them.
const CLAIM_SQL = 'SELECT * FROM jobs_claim($1, worker => $2, n => $3, lease => $4, kinds => $5, wait => $6)';
// The queue's lease, for a worker without a lease of its own: it then passes it on every claim,
// so it knows each claim's lease length exactly (heartbeats every third of it; the claim's
// time on the server's clock is lease_until minus it).
const QUEUE_LEASE_SQL = 'SELECT extract(epoch FROM lease)::float8 * 1000 AS ms FROM jobs.queue WHERE name = $1';
/** How long a worker uses the queue's lease it read before reading it again, in milliseconds. */
const QUEUE_LEASE_READ_EVERY_MS = 60_000;
const HEARTBEAT_SQL = 'SELECT jobs_heartbeat($1, $2, progress => $3) AS outcome';
const COMPLETE_SQL = 'SELECT jobs_complete($1, $2, $3) AS outcome';
const COMPLETE_BATCH_SQL = 'SELECT id, outcome FROM jobs_complete_batch($1, $2)';
const FAIL_SQL = 'SELECT jobs_fail($1, $2, $3, retry => $4) AS outcome';
const RELEASE_SQL = 'SELECT jobs_release($1, $2, $3, retry_in => $4) AS outcome';
const SUCCEEDED_UNDER_SQL = "SELECT (j).state::text = 'succeeded' AND (j).lease = $2 AS ours FROM jobs_get($1) AS j";
const AWAIT_SQL = 'SELECT jobs_await($1, $2, $3) AS outcome';
const AWAIT_TIMEOUT_SQL = 'SELECT jobs_await($1, $2, $3, timeout => $4) AS outcome';
// A retried jobs_await answers lost when the first attempt did commit (the await clears the
// lease): the job then waits for our signal, or was queued with it, under no lease.
const AWAITED_SQL =
  "SELECT (j).state::text AS state FROM jobs_get($1) AS j WHERE (j).state::text IN ('waiting', 'queued') AND (j).lease IS NULL AND (j).signal->>'name' = $2";
// One commit per job: completes the jobs that succeeded (each with its result) and claims the
// next ones, never waiting. Rows: one per settled job (settled, outcome), then one per claimed
// job (settled NULL, the claim's columns).
const COMPLETE_AND_CLAIM_SQL =
  'SELECT settled, outcome, (claimed).* FROM jobs_complete_and_claim($1, $2, $3, $4, worker => $5, n => $6, lease => $7, kinds => $8)';
/**
 * How long a job that succeeded may wait for the claim loop to complete it with its next claim
 * (the loop is busy with a claim, a reconnect or a retry's backoff) before it is completed on
 * its own, in milliseconds.
 */
const COMPLETE_WITH_CLAIM_WITHIN_MS = 100;

/**
 * Whether an error is a transport or availability failure (the call may be retried) rather
 * than an SQL error the server raised for the statement itself.
 */
export function isConnectionError(error: unknown): boolean {
  const code = (error as { code?: unknown })?.code;
  if (typeof code !== 'string' || !/^[0-9A-Z]{5}$/.test(code)) return true; // socket errors: ECONNREFUSED, ...
  return code.startsWith('08') || ['57P01', '57P02', '57P03', '53300', '57014'].includes(code);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref?.());
}

function defaultName(): string {
  return `${os.hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`;
}

function toJob(row: any): Job {
  return {
    id: String(row.id),
    queue: row.queue,
    kind: row.kind,
    payload: row.payload,
    headers: row.headers ?? null,
    attempt: row.attempt,
    maxAttempts: row.max_attempts,
    priority: row.priority,
    lease: row.lease,
    createdAt: row.created_at,
    runAt: row.run_at,
    // Servers before workflows have no signal column.
    signal: row.signal ? { name: row.signal.name, payload: row.signal.payload ?? null, timedOut: row.signal.timed_out === true } : null,
  };
}

/**
 * Sends a CancelRequest for the statement `client` is running, over a connection of its own to
 * the same server (or pooler: PgBouncer forwards it to the server connection it lent). Like
 * libpq, it then waits for the other end to close that connection: PgBouncer 1.18 exits with
 * "bad client state" when a cancelling client hangs up before it has forwarded the request.
 */
function cancelStatement(client: PoolClient): Promise<void> {
  const c = client as unknown as { processID: number | null; secretKey: number | null; host: string; port: number };
  if (c.processID == null || c.secretKey == null) return Promise.resolve();
  return new Promise((resolve) => {
    const socket = c.host?.startsWith('/')
      ? net.connect(`${c.host}/.s.PGSQL.${c.port}`)
      : net.connect(c.port, c.host || 'localhost');
    const timer = setTimeout(() => socket.destroy(), 5_000);
    const done = () => {
      clearTimeout(timer);
      socket.destroy();
      resolve();
    };
    socket.on('connect', () => {
      const message = Buffer.alloc(16);
      message.writeInt32BE(16, 0);
      message.writeInt32BE(80877102, 4); // the CancelRequest code
      message.writeInt32BE(c.processID!, 8);
      message.writeInt32BE(c.secretKey!, 12);
      socket.write(message);
    });
    socket.on('data', () => undefined);
    socket.on('close', done);
    socket.on('error', done);
  });
}

/** A pg_jobs worker for one queue; see README.md for the model. */
export class Worker extends EventEmitter<WorkerEvents> {
  readonly name: string;
  readonly queue: string;
  private readonly pool: Pool;
  private readonly handlers: Record<string, HandlerSpec>;
  private readonly concurrency: number;
  private readonly leaseMs?: number;
  private readonly waitMs: number;
  private readonly unknownKind: 'release' | 'fail';
  private readonly unknownKindDelayMs: number;
  private readonly unknownKindMaxAgeMs: number;
  private readonly kinds: string[] | null;
  private readonly timeoutMs?: number;
  private readonly signals: NodeJS.Signals[];
  private readonly graceMs: number;
  /** One commit per job: off by the option, or for good once the server lacks the function. */
  private oneCommitPerJob: boolean;

  private readonly running = new Map<string, Running>();
  /** Jobs done without a result, waiting for the next jobs_complete_batch. */
  private completions: Running[] = [];
  /** Jobs whose handlers are done and whose completion is on its way: they hold no slot. */
  private readonly settling = new Set<Running>();
  private flushing = false;
  private claimClient: PoolClient | null = null;
  private claiming = false;
  /** The CancelRequest stop() is sending for the claim, if one is on its way. */
  private claimCancel: Promise<void> | null = null;
  private stopping = false;
  private loop: Promise<void> | null = null;
  private slotFreed: (() => void) | null = null;
  private stopPromise: Promise<void> | null = null;
  private readonly onSignal = (signal: NodeJS.Signals) => this.stopOnSignal(signal);
  /** The queue's lease (for a worker without `lease`) and when it was read (performance.now()). */
  private queueLease: { ms: number; readAt: number } | null = null;
  private readonly onPoolError = (error: Error) => this.retrying(null, 'idle', error);
  /** Jobs that succeeded, for the claim loop's next jobs_complete_and_claim. */
  private finishedJobs: Finished[] = [];
  /** Completes finishedJobs on their own once they have waited COMPLETE_WITH_CLAIM_WITHIN_MS. */
  private finishedTimer: NodeJS.Timeout | null = null;
  /** The claim loop is in a waiting jobs_claim: completions go out on their own meanwhile. */
  private claimWaits = false;
  /** The last jobs_complete_and_claim claimed nothing: the next claim waits (jobs_claim). */
  private claimedNothing = false;
  /** The last jobs_complete_and_claim was refused: the next claim is a jobs_claim, which says why. */
  private plainClaimNext = false;

  constructor(options: WorkerOptions) {
    super();
    if (!options.pool) throw new TypeError('Worker needs a pg.Pool as options.pool');
    if (!options.queue) throw new TypeError('Worker needs a queue name as options.queue');
    this.pool = options.pool;
    this.queue = options.queue;
    this.handlers = {};
    for (const [kind, handler] of Object.entries(options.handlers ?? {})) {
      this.handlers[kind] = typeof handler === 'function' ? { run: handler } : handler;
      if (typeof this.handlers[kind].run !== 'function') {
        throw new TypeError(`the handler for kind ${JSON.stringify(kind)} must be a function or { run: function }`);
      }
    }
    this.concurrency = options.concurrency ?? 8;
    if (!Number.isInteger(this.concurrency) || this.concurrency < 1 || this.concurrency > 1000) {
      throw new RangeError(`concurrency must be an integer from 1 to 1000, not ${options.concurrency}`);
    }
    this.leaseMs = options.lease;
    this.waitMs = options.waitMs ?? 30_000;
    this.name = options.name ?? defaultName();
    this.unknownKind = options.unknownKind ?? 'release';
    this.unknownKindDelayMs = options.unknownKindDelayMs ?? 60_000;
    this.unknownKindMaxAgeMs = options.unknownKindMaxAgeMs ?? 3_600_000;
    for (const [name, value] of [
      ['unknownKindDelayMs', this.unknownKindDelayMs],
      ['unknownKindMaxAgeMs', this.unknownKindMaxAgeMs],
    ] as const) {
      if (!Number.isFinite(value) || value < 0) {
        throw new RangeError(`${name} must be a finite, non-negative number of milliseconds, not ${value}`);
      }
    }
    if (this.unknownKind !== 'release' && this.unknownKind !== 'fail') {
      throw new TypeError(`unknownKind must be 'release' or 'fail', not ${JSON.stringify(this.unknownKind)}`);
    }
    this.kinds = options.kinds === 'handled' ? Object.keys(this.handlers) : null;
    this.timeoutMs = options.timeoutMs;
    this.signals = options.signals ?? ['SIGTERM', 'SIGINT'];
    this.graceMs = options.graceMs ?? 10_000;
    this.oneCommitPerJob = options.oneCommitPerJob ?? true;
    if (typeof this.oneCommitPerJob !== 'boolean') {
      throw new TypeError(`oneCommitPerJob must be true or false, not ${JSON.stringify(options.oneCommitPerJob)}`);
    }
  }

  /** Starts claiming. Returns the worker. */
  start(): this {
    if (this.loop) throw new Error('this worker was already started; create a new Worker to start again');
    for (const signal of this.signals) process.on(signal, this.onSignal);
    // An idle pooled connection that the server closes (a restart) must not crash the process.
    this.pool.on('error', this.onPoolError);
    this.loop = this.claimLoop();
    return this;
  }

  /** Jobs whose handlers are running now. */
  get active(): number {
    return this.running.size;
  }

  /**
   * Stops claiming, gives running handlers `graceMs` (default 10,000) to finish, then aborts
   * the rest and releases their jobs (`'shutting down'`): no lease is left held.
   */
  stop(options: { graceMs?: number } = {}): Promise<void> {
    this.stopPromise ??= this.shutdown(options.graceMs ?? this.graceMs);
    return this.stopPromise;
  }

  private async stopOnSignal(signal: NodeJS.Signals): Promise<void> {
    await this.stop({ graceMs: this.graceMs });
    // With nobody else listening, do what the signal would have done without us.
    if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
  }

  private async shutdown(graceMs: number): Promise<void> {
    this.stopping = true;
    this.slotFreed?.();
    await this.interruptClaim();
    const pending = [...this.running.values()].map((r) => r.finished);
    let graceTimer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.all(pending),
      new Promise<void>((resolve) => (graceTimer = setTimeout(resolve, graceMs))),
    ]);
    clearTimeout(graceTimer);
    await Promise.all(
      [...this.running.values()].filter((r) => !r.done).map((r) => this.release(r, 'shutting down', 0)),
    );
    await Promise.all([...this.running.values(), ...this.settling].map((r) => r.finished));
    for (const signal of this.signals) process.off(signal, this.onSignal);
    this.pool.off('error', this.onPoolError);
    this.emit('stopped', { type: 'stopped' });
  }

  private retrying(job: Job | null, during: string, error: unknown): void {
    this.emit('retrying', { type: 'retrying', job, during, error, message: describeError(error).message });
  }

  /**
   * Reports a call the server refused. A claim's refusal is an 'error' event even without a
   * listener (it throws then, as Node's 'error' events do: a worker that cannot claim should
   * not go unnoticed); a settle's is written as a process warning when nobody listens, so one
   * refused settle does not end the process.
   */
  private failedCall(job: Job | null, during: string, error: unknown): void {
    const event: ErrorEvent = { type: 'error', job, during, error, message: describeError(error).message };
    if (during === 'claim' || this.listenerCount('error') > 0) {
      this.emit('error', event);
    } else {
      process.emitWarning(`pg_jobs worker ${this.name}: ${during} of job ${job?.id ?? '(batch)'} failed: ${event.message}`);
    }
  }

  /**
   * The lease length the next claim asks for, in milliseconds: the worker's own, or the
   * queue's (read again once a minute). Null when the queue does not exist: the claim then
   * says so.
   */
  private async claimLease(client: PoolClient): Promise<number | null> {
    if (this.leaseMs !== undefined) return this.leaseMs;
    const now = performance.now();
    if (this.queueLease && now - this.queueLease.readAt < QUEUE_LEASE_READ_EVERY_MS) return this.queueLease.ms;
    const { rows } = await client.query(QUEUE_LEASE_SQL, [this.queue]);
    if (rows.length === 0) return null;
    this.queueLease = { ms: Number(rows[0].ms), readAt: now };
    return this.queueLease.ms;
  }

  /**
   * Cancels the claim waiting in the server, again every 200 ms until the claim loop has ended:
   * a CancelRequest that reaches the server before the claim's statement does finds the backend
   * idle and is dropped, and the claim would then wait out its whole `waitMs`.
   */
  private async interruptClaim(): Promise<void> {
    if (!this.loop) return;
    let ended = false;
    const loop = this.loop.catch(() => undefined).then(() => {
      ended = true;
    });
    while (!ended) {
      if (this.claimClient && this.claiming) {
        this.claimCancel = cancelStatement(this.claimClient);
        await this.claimCancel;
        this.claimCancel = null;
      }
      await Promise.race([loop, sleep(200)]);
    }
  }

  private async claimLoop(): Promise<void> {
    let backoff = 100;
    while (!this.stopping) {
      const free = this.concurrency - this.running.size;
      if (free <= 0) {
        await new Promise<void>((resolve) => (this.slotFreed = resolve));
        this.slotFreed = null;
        continue;
      }
      let rows: any[];
      let leaseMs: number | null;
      let batch: Finished[] = [];
      try {
        if (!this.claimClient) {
          this.claimClient = await this.pool.connect();
          // A server that goes away between two claims raises 'error' on the client itself.
          this.claimClient.on('error', this.onPoolError);
        }
        leaseMs = await this.claimLease(this.claimClient);
        // From here to the query nothing awaits: a completion arriving meanwhile either joins
        // this batch or, once claimWaits is set, goes out on its own.
        batch = this.takeFinished();
        if (batch.length > 0 && !this.claimedNothing && !this.plainClaimNext && !this.stopping) {
          rows = await this.completeAndClaim(this.claimClient, batch, free, leaseMs);
          this.claimedNothing = rows.length === 0;
        } else {
          // Before a claim that may wait: a settle must not wait with it.
          for (const { r, result } of batch) void this.completeAlone(r, result);
          batch = [];
          this.claimedNothing = false;
          this.plainClaimNext = false;
          this.claimWaits = true;
          this.claiming = true;
          const result = await this.claimClient.query(CLAIM_SQL, [
            this.queue,
            this.name,
            free,
            leaseMs === null ? null : interval(leaseMs),
            this.kinds,
            interval(this.stopping ? 0 : this.waitMs),
          ]);
          rows = result.rows;
        }
        // A queue created between the lease's read and the claim: its claim used its lease.
        this.claiming = false; // what follows must not be cancelled: it would strand the rows
        this.claimWaits = false;
        if (leaseMs === null && rows.length > 0) leaseMs = await this.claimLease(this.claimClient);
        backoff = 100;
      } catch (error) {
        this.claiming = false;
        this.claimWaits = false;
        if (batch.length > 0 && !isConnectionError(error)) {
          // jobs_complete_and_claim refused (a result too large, an unknown queue, a server
          // without it): nothing of it happened. Each job is completed on its own, as without
          // the option, and the next claim is a jobs_claim, whose error says what is wrong.
          for (const { r, result } of batch) void this.completeAlone(r, result);
          if ((error as { code?: unknown }).code === '42883') {
            this.oneCommitPerJob = false;
            process.emitWarning(
              `pg_jobs worker ${this.name}: the server has no jobs_complete_and_claim (pg_jobs before 0.3.0); completing and claiming in separate calls`,
            );
          }
          this.plainClaimNext = true;
          continue;
        }
        // In transit: the call may have committed, so a lost completion sent again is checked.
        for (const { r, result } of batch) void this.completeAlone(r, result, true);
        this.claimClient?.off('error', this.onPoolError);
        this.claimClient?.release(error as Error);
        this.claimClient = null;
        if (this.stopping) break;
        if (isConnectionError(error)) {
          this.retrying(null, 'claim', error);
          await sleep(backoff);
          backoff = Math.min(backoff * 2, 5_000);
        } else {
          this.failedCall(null, 'claim', error);
          await sleep(5_000);
        }
        continue;
      } finally {
        this.claiming = false;
      }
      for (const row of rows) this.begin(toJob(row), leaseMs!, row.lease_until.getTime() - leaseMs!);
    }
    // Stopping: what succeeded since the last claim is completed on its own.
    for (const { r, result } of this.takeFinished()) void this.completeAlone(r, result);
    // A CancelRequest still on its way could cancel whatever statement the pool's next user
    // runs on this connection: wait for it, and then close the connection rather than lend it.
    const cancelled = this.claimCancel !== null;
    await this.claimCancel;
    this.claimClient?.off('error', this.onPoolError);
    this.claimClient?.release(cancelled);
    this.claimClient = null;
  }

  /**
   * One commit per job: completes `batch` (each job with its result) and claims up to `n` jobs
   * in one jobs_complete_and_claim, which never waits (so the stop does not cancel it: a
   * cancel would undo the completions with the claim). Reports each completion as its
   * outcome says and returns the claimed rows.
   */
  private async completeAndClaim(client: PoolClient, batch: Finished[], n: number, leaseMs: number | null): Promise<any[]> {
    const results = batch.some(({ result }) => result !== undefined && result !== null) ? batch.map(({ result }) => json(result)) : null;
    const { rows } = await client.query(COMPLETE_AND_CLAIM_SQL, [
      this.queue,
      batch.map(({ r }) => r.job.id),
      batch.map(({ r }) => r.job.lease),
      results,
      this.name,
      n,
      leaseMs === null ? null : interval(leaseMs),
      this.kinds,
    ]);
    const outcomes = new Map<string, string>();
    const claimed: any[] = [];
    for (const row of rows) {
      if (row.settled === null) claimed.push(row);
      else outcomes.set(String(row.settled), row.outcome);
    }
    for (const { r, result } of batch) {
      const outcome = outcomes.get(r.job.id);
      if (outcome === undefined) {
        void this.completeAlone(r, result); // not answered for (never so): ask on its own
        continue;
      }
      this.completed(r, outcome, result);
      this.forget(r);
    }
    return claimed;
  }

  /** The jobs waiting to be completed with the next claim, taken: the caller completes them. */
  private takeFinished(): Finished[] {
    if (this.finishedTimer) clearTimeout(this.finishedTimer);
    this.finishedTimer = null;
    const taken = this.finishedJobs;
    this.finishedJobs = [];
    return taken;
  }

  /**
   * Runs a claimed job. `leaseMs` is the claim's lease length and `claimedAt` the claim's time
   * on the server's clock (epoch milliseconds), both read from the claim's own row.
   */
  private begin(job: Job, leaseMs: number, claimedAt: number): void {
    let finish!: () => void;
    const finished = new Promise<void>((resolve) => (finish = resolve));
    const r: Running = { job, controller: new AbortController(), started: Date.now(), leaseMs, done: false, finished, finish };
    this.running.set(job.id, r);
    this.emit('picked', { type: 'picked', job });
    if (this.stopping) {
      // Claimed while the stop was cancelling the claim: hand it straight back.
      void this.release(r, 'shutting down', 0);
      return;
    }
    const handler = this.handlers[job.kind];
    if (!handler) {
      this.unknown(r, claimedAt);
      return;
    }
    let accepted: boolean;
    try {
      accepted = handler.accepts ? handler.accepts(job) !== false : true;
    } catch (error) {
      void this.fail(r, error, true);
      return;
    }
    if (!accepted) {
      void this.fail(r, new PermanentError(`the ${JSON.stringify(job.kind)} handler does not accept this job (accepts() returned false)`), true);
      return;
    }
    this.scheduleHeartbeat(r);
    const limit = handler.timeoutMs ?? this.timeoutMs;
    if (limit !== undefined) {
      r.timeout = setTimeout(() => {
        const error = new JobTimeoutError(limit);
        r.controller.abort(error);
        void this.fail(r, error, false);
      }, limit);
    }
    const ctx: JobContext = {
      signal: r.controller.signal,
      progress: (value) => this.heartbeat(r, value),
      awaitSignal: (name, options) => this.awaitSignal(r, name, options),
    };
    Promise.resolve()
      .then(() => handler.run(job, ctx))
      .then(
        (result) => this.complete(r, result),
        (error) => this.fail(r, error, error instanceof PermanentError),
      );
  }

  /**
   * A job of a kind without a handler: released with a delay while it is young enough to be
   * waiting for a deploy that brings its handler, failed once it is older (with the queue's
   * retries and backoff, so it ends `failed` with its error history) or at once with
   * `unknownKind: 'fail'`. Its age is measured on the server's clock: the claim's time, from
   * its lease, against the job's `created_at`.
   */
  private unknown(r: Running, claimedAt: number): void {
    const { kind, createdAt } = r.job;
    const handled = Object.keys(this.handlers);
    if (this.unknownKind === 'fail') {
      void this.fail(r, new UnknownKindError(kind, this.name, handled), true);
      return;
    }
    const ageMs = claimedAt - createdAt.getTime();
    if (ageMs < this.unknownKindMaxAgeMs) {
      void this.release(r, `no handler for kind ${JSON.stringify(kind)}`, this.unknownKindDelayMs);
      return;
    }
    const detail = `the job is ${Math.floor(ageMs / 1000)} s old, past unknownKindMaxAgeMs (${this.unknownKindMaxAgeMs} ms) of releases waiting for a deploy`;
    void this.fail(r, new UnknownKindError(kind, this.name, handled, detail), false);
  }

  private scheduleHeartbeat(r: Running, delay = Math.max(r.leaseMs / 3, 50)): void {
    r.timer = setTimeout(() => void this.heartbeat(r, undefined).catch(() => undefined), delay);
  }

  private async heartbeat(r: Running, progress: unknown): Promise<string> {
    if (r.done) return 'lost';
    clearTimeout(r.timer);
    let outcome: string;
    try {
      outcome = (await this.pool.query(HEARTBEAT_SQL, [r.job.id, r.job.lease, json(progress)])).rows[0].outcome;
    } catch (error) {
      if (r.done) return 'lost';
      this.retrying(r.job, 'heartbeat', error);
      // Try again soon: the lease is still running out.
      this.scheduleHeartbeat(r, Math.min(1_000, r.leaseMs / 6));
      return 'running';
    }
    if (r.done) return outcome;
    if (outcome === 'running') {
      this.scheduleHeartbeat(r);
    } else {
      this.giveUp(r, outcome as LostOutcome, 'heartbeat');
    }
    return outcome;
  }

  /**
   * The handler's awaitSignal: hands the job back to wait for the signal (jobs_await) and ends
   * the run. Its slot is free at once, as for a lost job: the job is out of our hands.
   */
  private async awaitSignal(r: Running, name: string, options: AwaitOptions = {}): Promise<AwaitOutcome> {
    const values: unknown[] = [r.job.id, r.job.lease, name];
    if (options.timeoutMs !== undefined) values.push(interval(options.timeoutMs));
    if (r.done) return r.gone ?? 'lost';
    // Concluded first: no heartbeat, time limit or settle of the handler acts on the job meanwhile.
    this.conclude(r);
    let answer: { outcome: string; retried: boolean } | null;
    try {
      answer = await this.settle(r.job, 'await', values.length > 3 ? AWAIT_TIMEOUT_SQL : AWAIT_SQL, values);
      if (answer && answer.outcome === 'lost' && answer.retried) {
        const { rows } = await this.pool.query(AWAITED_SQL, [r.job.id, name]);
        if (rows.length > 0) answer = { outcome: rows[0].state, retried: true };
      }
    } catch (error) {
      // The server refused the await (a name out of range): the attempt fails with its error.
      r.done = false;
      await this.fail(r, error, false);
      throw error;
    }
    const outcome = (answer?.outcome ?? 'lost') as AwaitOutcome;
    if (outcome === 'waiting' || outcome === 'queued') {
      if (!r.controller.signal.aborted) r.controller.abort(new Error(`the job awaits signal ${JSON.stringify(name)}: this run has ended`));
      this.emit('awaiting', { type: 'awaiting', job: r.job, durationMs: Date.now() - r.started, outcome, signal: name });
      this.forget(r);
    } else {
      this.giveUp(r, outcome, 'settle');
    }
    return outcome;
  }

  /** The job is no longer ours (cancelled or lost): stop its handler, record nothing. */
  private giveUp(r: Running, outcome: LostOutcome, during: 'heartbeat' | 'settle'): void {
    const first = !r.done;
    r.gone ??= outcome;
    this.conclude(r);
    if (!r.controller.signal.aborted) r.controller.abort(new Error(`the job was ${outcome === 'lost' ? 'lost (its lease is no longer ours)' : 'cancelled'}`));
    if (first || during === 'settle') {
      this.emit('lost', { type: 'lost', job: r.job, durationMs: Date.now() - r.started, outcome, during });
    }
    // The slot is free at once: the job is out of our hands, and its handler was told to stop.
    this.forget(r);
  }

  private conclude(r: Running): void {
    r.done = true;
    clearTimeout(r.timer);
    clearTimeout(r.timeout);
  }

  private forget(r: Running): void {
    this.running.delete(r.job.id);
    this.settling.delete(r);
    r.finish();
    this.slotFreed?.();
  }

  /**
   * Runs a settle statement until it gets an answer: transport errors (a restart, a dropped
   * connection) are retried with the same (id, lease), which is safe: a repeated call changes
   * nothing once the first has committed. Returns null when giving up while stopping.
   */
  private async settle(job: Job, during: string, sql: string, values: unknown[]): Promise<{ outcome: string; retried: boolean } | null> {
    let backoff = 100;
    let retried = false;
    for (;;) {
      try {
        return { outcome: (await this.pool.query(sql, values)).rows[0].outcome, retried };
      } catch (error) {
        if (!isConnectionError(error)) throw error;
        this.retrying(job, during, error);
        retried = true;
        await sleep(backoff);
        backoff = Math.min(backoff * 2, 5_000);
      }
    }
  }

  private async complete(r: Running, result: unknown): Promise<void> {
    if (r.done) return;
    if (this.oneCommitPerJob && !this.stopping && !this.claimWaits) {
      // Completed by the claim loop's next claim, in the same call and commit. Its slot is
      // free now: that claim takes the next job for it.
      this.conclude(r);
      this.running.delete(r.job.id);
      this.settling.add(r);
      this.finishedJobs.push({ r, result });
      this.finishedTimer ??= setTimeout(() => {
        for (const f of this.takeFinished()) void this.completeAlone(f.r, f.result);
      }, COMPLETE_WITH_CLAIM_WITHIN_MS);
      this.slotFreed?.();
      return;
    }
    await this.completeAlone(r, result);
  }

  /**
   * Completes a job in a call of its own: jobs_complete with its result, or, without one, in
   * the next jobs_complete_batch. `uncertain`: a call carrying it may have committed.
   */
  private async completeAlone(r: Running, result: unknown, uncertain = false): Promise<void> {
    if (uncertain) r.uncertain = true;
    if (result === undefined || result === null) {
      // No result to store: completed with others in one jobs_complete_batch, sent as soon as
      // the previous batch is answered (one statement and one commit for many jobs).
      // Its slot is free now, so the next claim overlaps this completion's round trip.
      this.conclude(r);
      this.running.delete(r.job.id);
      this.settling.add(r);
      this.slotFreed?.();
      this.completions.push(r);
      if (!this.flushing) void this.flushCompletions();
      return;
    }
    this.conclude(r);
    try {
      let answer = await this.settle(r.job, 'complete', COMPLETE_SQL, [r.job.id, r.job.lease, json(result)]);
      if (answer && answer.outcome === 'lost' && (answer.retried || r.uncertain)) answer = await this.recheck(r, answer);
      this.completed(r, answer?.outcome ?? null, result);
    } catch (error) {
      // The server refused to record the result (too large, not JSON): the attempt fails.
      r.done = false;
      await this.fail(r, new Error(`could not record the result: ${(error as Error).message}`), false);
      return;
    }
    this.forget(r);
  }

  /** A retried complete answers lost when the first attempt did commit: check which. */
  private async recheck(r: Running, answer: { outcome: string; retried: boolean }) {
    const ours = (await this.pool.query(SUCCEEDED_UNDER_SQL, [r.job.id, r.job.lease])).rows[0]?.ours;
    return ours ? { outcome: 'succeeded', retried: true } : answer;
  }

  private completed(r: Running, outcome: string | null, result: unknown): void {
    if (outcome === 'succeeded') {
      this.emit('completed', { type: 'completed', job: r.job, durationMs: Date.now() - r.started, outcome: 'succeeded', result });
    } else if (outcome) {
      this.giveUp(r, outcome as LostOutcome, 'settle');
    }
  }

  private async flushCompletions(): Promise<void> {
    this.flushing = true;
    try {
      while (this.completions.length > 0) {
        const batch = this.completions;
        this.completions = [];
        const outcomes = new Map<string, string>();
        let retried = false;
        let backoff = 100;
        for (;;) {
          try {
            const { rows } = await this.pool.query(COMPLETE_BATCH_SQL, [batch.map((r) => r.job.id), batch.map((r) => r.job.lease)]);
            for (const row of rows) outcomes.set(String(row.id), row.outcome);
            break;
          } catch (error) {
            if (!isConnectionError(error)) {
              this.failedCall(null, 'complete', error);
              break; // left without an outcome: their leases run out and they are retried
            }
            this.retrying(null, 'complete', error);
            retried = true;
            await sleep(backoff);
            backoff = Math.min(backoff * 2, 5_000);
          }
        }
        for (const r of batch) {
          let answer: { outcome: string; retried: boolean } | null = outcomes.has(r.job.id)
            ? { outcome: outcomes.get(r.job.id)!, retried }
            : null;
          if (answer && answer.outcome === 'lost' && (retried || r.uncertain)) answer = await this.recheck(r, answer).catch(() => answer);
          this.completed(r, answer?.outcome ?? null, undefined);
          this.forget(r);
        }
      }
    } finally {
      this.flushing = false;
    }
  }

  private async fail(r: Running, error: unknown, permanent: boolean): Promise<void> {
    if (r.done) return;
    this.conclude(r);
    try {
      const answer = await this.settle(r.job, 'fail', FAIL_SQL, [r.job.id, r.job.lease, errorText(error), !permanent]);
      if (answer?.outcome === 'queued' || answer?.outcome === 'failed') {
        const { message, stack } = describeError(error);
        this.emit('failed', {
          type: 'failed',
          job: r.job,
          durationMs: Date.now() - r.started,
          outcome: answer.outcome,
          permanent,
          error,
          message,
          stack,
        });
      } else if (answer) {
        this.giveUp(r, answer.outcome as LostOutcome, 'settle');
      }
    } catch (sqlError) {
      this.failedCall(r.job, 'fail', sqlError);
    } finally {
      this.forget(r);
    }
  }

  private async release(r: Running, reason: string, delayMs: number): Promise<void> {
    if (r.done) return;
    this.conclude(r);
    if (!r.controller.signal.aborted) r.controller.abort(new Error(`the worker released the job: ${reason}`));
    try {
      const answer = await this.settle(r.job, 'release', RELEASE_SQL, [r.job.id, r.job.lease, reason, interval(delayMs)]);
      if (answer?.outcome === 'queued') {
        this.emit('released', { type: 'released', job: r.job, durationMs: Date.now() - r.started, outcome: 'queued', reason });
      } else if (answer) {
        this.giveUp(r, answer.outcome as LostOutcome, 'settle');
      }
    } catch (error) {
      this.failedCall(r.job, 'release', error);
    } finally {
      this.forget(r);
    }
  }
}
