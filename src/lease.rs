//! `jobs_heartbeat`: keeping a lease alive and reporting progress.

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::datum::Jsonb;
use crate::errors::required;
use crate::queue::check_lease;
use crate::settle::run_held;
use crate::spi::{server_now, timestamptz_arg, with_client, Statement};

static HEARTBEAT: Statement = Statement {
    sql: include_str!("../sql/heartbeat.sql"),
    args: &[
        pg_sys::INT8OID,
        pg_sys::UUIDOID,
        pg_sys::INTERVALOID,
        pg_sys::JSONBOID,
        pg_sys::TIMESTAMPTZOID,
        pg_sys::TEXTOID,
    ],
};

/// Extends the lease of a held job (by the claim's lease length unless `extend`) and stores
/// `progress`: `running`, `cancelled` or `lost`.
#[pg_extern(volatile, parallel_unsafe)]
fn jobs_heartbeat(
    id: Option<i64>,
    lease: Option<pgrx::Uuid>,
    extend: default!(Option<Interval>, "NULL"),
    progress: default!(Option<Jsonb>, "NULL"),
) -> &'static str {
    let id = required(id, "id");
    let lease = required(lease, "lease");
    if let Some(extend) = &extend {
        check_lease(extend, "extend");
    }
    with_client(|client| {
        let args = vec![
            id.into(),
            lease.into(),
            extend.into(),
            progress.into(),
            timestamptz_arg(server_now()),
        ];
        match run_held(client, &HEARTBEAT, id, lease, args) {
            Ok(_) => "running",
            Err(answer) => answer,
        }
    })
}
