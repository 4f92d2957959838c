//! pg_jobs's own configuration: the `pg_jobs.*` settings. Below everything that runs jobs and
//! above `pg`, which knows PostgreSQL and nothing of jobs.

pub mod settings;
