// pg-jobs: a worker and producer library for pg_jobs (the job queue inside PostgreSQL) on
// node-postgres. Every rule of the queue is in the server's jobs_* functions; this library
// runs the worker loop around them.
export {
  Worker,
  PermanentError,
  JobTimeoutError,
  UnknownKindError,
  describeError,
  errorText,
  isConnectionError,
  type Job,
  type JobContext,
  type Handler,
  type HandlerFunction,
  type HandlerSpec,
  type WorkerOptions,
  type WorkerEvents,
  type WorkerEvent,
  type PickedEvent,
  type CompletedEvent,
  type FailedEvent,
  type ReleasedEvent,
  type AwaitingEvent,
  type AwaitOutcome,
  type AwaitOptions,
  type JobSignal,
  type LostEvent,
  type RetryingEvent,
  type ErrorEvent,
  type StoppedEvent,
  type LostOutcome,
} from './worker.js';
export { enqueue, enqueueBatch, interval, json, type EnqueueOptions, type Enqueued, type JobId, type Queryable } from './enqueue.js';
export { FINISHED_STATES, results, signal, STATES, wait, type JobResult, type JobState, type SignalOptions } from './workflows.js';
