//! pg_jobs_dashboard: a web dashboard of a pg_jobs database.
//!
//! It connects with a connection string, as whatever role it is given, and shows what that
//! role may see: queues with their counts and throughput, a queue's jobs (filtered, in keyset
//! pages), one job, schedules, and the workers (the background worker and the client workers
//! of `jobs.workers`). Counts refresh in the browser without a reload (server-sent events).
//! Actions (retry, cancel, run now, pause, resume, and the first three on a filtered set) call
//! the `jobs_*` functions as that role, so the database decides what is allowed: a role
//! without `jobs_admin` gets no action controls, and a forged request is refused by the
//! database with its own error.
//!
//! Security: it listens on 127.0.0.1 unless told otherwise; `--token` asks every request for a
//! token (HTTP basic auth with the token as password, or a bearer token); every state-changing
//! request carries a CSRF token; every value is escaped where it is inserted into HTML (the
//! templates do it), and a content security policy lets only the dashboard's own script run;
//! SQL is fixed text with bound parameters, never composed from a request.

mod charts;
mod db;
mod live;
mod pages;
mod security;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::{get, post};
use axum::Router;
use clap::Parser;

/// The dashboard's command line.
#[derive(Parser, Debug, Clone)]
#[command(name = "pg_jobs_dashboard", version, about)]
pub struct Options {
    /// The database to show, as a libpq connection string or URL
    /// ("host=/var/run/postgresql dbname=app user=ops" or "postgres://ops@localhost/app").
    /// The dashboard acts as this role: grant it jobs_admin for actions, jobs_client or
    /// jobs_worker for a read-only dashboard; set pg_jobs.tenant in it (options=-c...) to
    /// limit it to tenants.
    #[arg(long, env = "PG_JOBS_DASHBOARD_DATABASE")]
    pub database: String,

    /// The address to listen on. Anything other than a loopback address exposes the
    /// dashboard to the network: set --token then.
    #[arg(
        long,
        env = "PG_JOBS_DASHBOARD_LISTEN",
        default_value = "127.0.0.1:8484"
    )]
    pub listen: SocketAddr,

    /// A secret every request must carry: as the password of HTTP basic auth (any user name;
    /// browsers ask for it) or as "Authorization: Bearer <token>".
    #[arg(long, env = "PG_JOBS_DASHBOARD_TOKEN")]
    pub token: Option<String>,

    /// How often the open pages' counts refresh, in milliseconds.
    #[arg(long, env = "PG_JOBS_DASHBOARD_REFRESH_MS", default_value_t = 5000)]
    pub refresh_ms: u64,

    /// How often the counts of finished jobs (a read of the whole table) are taken again while
    /// someone watches, in seconds.
    #[arg(long, env = "PG_JOBS_DASHBOARD_FINISHED_EVERY", default_value_t = 300)]
    pub finished_every: u64,

    /// Queued jobs counted at most per queue each refresh; a larger backlog shows as "at
    /// least" this many, so a refresh costs the same however long the backlog grows.
    #[arg(long, env = "PG_JOBS_DASHBOARD_COUNT_LIMIT", default_value_t = 10000)]
    pub count_limit: u32,

    /// Most jobs a bulk action (on a filtered set) acts on.
    #[arg(long, env = "PG_JOBS_DASHBOARD_BULK_LIMIT", default_value_t = 1000)]
    pub bulk_limit: u32,

    /// Database connections the dashboard keeps at most.
    #[arg(long, env = "PG_JOBS_DASHBOARD_CONNECTIONS", default_value_t = 4)]
    pub connections: usize,
}

/// What every request handler shares.
pub struct App {
    /// The command line.
    pub options: Options,
    /// The database connections.
    pub db: db::Db,
    /// The CSRF token of this process, in every form; a state-changing request without it
    /// is refused.
    pub csrf: String,
    /// The live counts and their subscribers.
    pub live: live::Live,
}

/// The shared state as handlers receive it.
pub type Shared = Arc<App>;

fn router(app: Shared) -> Router {
    Router::new()
        .route("/", get(pages::queues))
        .route("/queues/{queue}", get(pages::jobs))
        .route(
            "/queues/{queue}/bulk",
            get(pages::bulk_confirm).post(pages::bulk_run),
        )
        .route("/jobs/{id}", get(pages::job))
        .route("/schedules", get(pages::schedules))
        .route("/workers", get(pages::workers))
        .route("/action", post(pages::action))
        .route("/events", get(live::events))
        .route("/static/app.js", get(pages::script))
        .route("/static/app.css", get(pages::style))
        .route(
            "/favicon.ico",
            get(|| async { axum::http::StatusCode::NO_CONTENT }),
        )
        .fallback(pages::not_found)
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            security::guard,
        ))
        .with_state(app)
}

#[tokio::main]
async fn main() {
    let options = Options::parse();
    let db = match db::Db::connect(&options.database, options.connections).await {
        Ok(db) => db,
        Err(error) => {
            eprintln!("pg_jobs_dashboard: cannot use the database: {error}");
            std::process::exit(2);
        }
    };
    if !options.listen.ip().is_loopback() && options.token.is_none() {
        eprintln!(
            "pg_jobs_dashboard: warning: listening on {} without --token: anyone who reaches it acts as the database role",
            options.listen
        );
    }
    let app = Arc::new(App {
        csrf: security::new_token(),
        live: live::Live::new(),
        db,
        options: options.clone(),
    });
    live::spawn_refresher(
        app.clone(),
        Duration::from_millis(options.refresh_ms.max(200)),
    );
    let listener = match tokio::net::TcpListener::bind(options.listen).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!(
                "pg_jobs_dashboard: cannot listen on {}: {error} (choose another with --listen)",
                options.listen
            );
            std::process::exit(2);
        }
    };
    println!(
        "pg_jobs_dashboard: serving http://{} (database role {})",
        listener.local_addr().unwrap_or(options.listen),
        app.db.identity().await.map(|i| i.role).unwrap_or_default()
    );
    let served = axum::serve(listener, router(app))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await;
    if let Err(error) = served {
        eprintln!("pg_jobs_dashboard: {error}");
        std::process::exit(1);
    }
}
