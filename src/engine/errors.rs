//! The SQLSTATEs of pg_jobs's own conditions, each documented in the reference so a client can
//! branch on the condition rather than on the text (`pg::errors` raises them).

use pgrx::PgSqlErrorCode;

/// The named queue does not exist (42704).
pub const UNKNOWN_QUEUE: PgSqlErrorCode = PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT;
/// A unique job's key is held by another job and `on_conflict => 'error'` (23505).
pub const UNIQUE_VIOLATION: PgSqlErrorCode = PgSqlErrorCode::ERRCODE_UNIQUE_VIOLATION;
/// The named role does not exist (42704).
pub const UNKNOWN_ROLE: PgSqlErrorCode = PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT;
/// A payload is larger than `pg_jobs.max_payload_bytes` (54000).
pub const PAYLOAD_TOO_LARGE: PgSqlErrorCode = PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED;
/// A waiting claim ran under REPEATABLE READ or SERIALIZABLE (25000).
pub const WAIT_NEEDS_READ_COMMITTED: PgSqlErrorCode =
    PgSqlErrorCode::ERRCODE_INVALID_TRANSACTION_STATE;
/// A queue's claims_by_kind was turned on under REPEATABLE READ or SERIALIZABLE (25000).
pub const KINDS_INDEX_NEEDS_READ_COMMITTED: PgSqlErrorCode =
    PgSqlErrorCode::ERRCODE_INVALID_TRANSACTION_STATE;
/// No job has the given id (P0002).
pub const UNKNOWN_JOB: PgSqlErrorCode = PgSqlErrorCode::ERRCODE_NO_DATA_FOUND;
/// The job or queue is not in a state that allows the operation (55000).
pub const WRONG_STATE: PgSqlErrorCode = PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE;
/// The library and the SQL definitions installed in the database are of different versions,
/// between an upgrade's restart and its `ALTER EXTENSION pg_jobs UPDATE` (55000).
pub const VERSION_MISMATCH: PgSqlErrorCode =
    PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE;
/// The queue still has work, or another queue depends on it (55006).
pub const QUEUE_IN_USE: PgSqlErrorCode = PgSqlErrorCode::ERRCODE_OBJECT_IN_USE;
/// An idempotency key is held by a pending record whose request is still in flight (55P03).
pub const IDEMPOTENCY_CONFLICT: PgSqlErrorCode = PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE;
/// An idempotency key was saved again for a different request: its finished record has
/// another fingerprint (23000).
pub const IDEMPOTENCY_MISMATCH: PgSqlErrorCode =
    PgSqlErrorCode::ERRCODE_INTEGRITY_CONSTRAINT_VIOLATION;
