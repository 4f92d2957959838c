//! The pages and the actions. Every value goes into the HTML through maud, which escapes it:
//! a payload holding `<script>` shows as text.

use std::collections::HashMap;

use axum::extract::{Form, Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{html, Markup, DOCTYPE};
use serde::Deserialize;

use crate::charts;
use crate::db::{Action, DbError, Identity, JobFilter, JobLine, STATES};
use crate::security::same_secret;
use crate::Shared;

/// Jobs on one page of a queue's jobs.
const PAGE: i32 = 50;
/// Job ids one page searches at most (newest first, from where the last page ended): a filter
/// that matches few jobs shows what it found in them and a link to search on, instead of
/// reading the whole history for one page.
const WINDOW: i64 = 50_000;

/// An error page: a status and what to say.
pub struct PageError {
    status: StatusCode,
    title: String,
    error: DbError,
}

impl PageError {
    fn new(status: StatusCode, title: &str, message: impl Into<String>) -> PageError {
        PageError {
            status,
            title: title.to_owned(),
            error: DbError {
                code: None,
                message: message.into(),
                hint: None,
            },
        }
    }
}

impl From<DbError> for PageError {
    fn from(error: DbError) -> PageError {
        // The database's refusals keep their meaning: no privilege is 403, a bad value 400.
        let status = match error.code.as_deref() {
            Some("42501") => StatusCode::FORBIDDEN,
            Some("P0002") => StatusCode::NOT_FOUND,
            Some(code) if code.starts_with("22") || code.starts_with("55") => {
                StatusCode::BAD_REQUEST
            }
            Some(_) => StatusCode::UNPROCESSABLE_ENTITY,
            None => StatusCode::SERVICE_UNAVAILABLE,
        };
        PageError {
            status,
            title: "The database refused".to_owned(),
            error,
        }
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let body = layout(
            &self.title,
            None,
            html! {
                h1 { (self.title) }
                div.error role="alert" {
                    p.message { (self.error.message) }
                    @if let Some(code) = &self.error.code { p { "SQLSTATE " code { (code) } } }
                    @if let Some(hint) = &self.error.hint { p.hint { (hint) } }
                }
                p { a href="/" { "Back to the queues" } }
            },
        );
        (self.status, html_response(body)).into_response()
    }
}

type PageResult = Result<Response, PageError>;

fn html_response(markup: Markup) -> Response {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        markup.into_string(),
    )
        .into_response()
}

/// The frame of every page: navigation, who the dashboard is, and the page.
fn layout(title: &str, who: Option<&Identity>, body: Markup) -> Markup {
    layout_with(title, who, None, body)
}

/// [`layout`], with the CSRF token in a meta tag when given (so a page's own script could
/// post; the read-only pages carry it too, which lets the tests show that the database, not
/// the dashboard, refuses a read-only role's forged action).
fn layout_with(title: &str, who: Option<&Identity>, csrf: Option<&str>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                @if let Some(csrf) = csrf { meta name="csrf-token" content=(csrf); }
                title { (title) " · pg_jobs" }
                link rel="stylesheet" href="/static/app.css";
                script src="/static/app.js" defer {}
            }
            body {
                header {
                    nav {
                        strong { "pg_jobs" }
                        a href="/" { "Queues" }
                        a href="/schedules" { "Schedules" }
                        a href="/workers" { "Workers" }
                    }
                    @if let Some(who) = who {
                        span.who {
                            "database " (who.database) " · role " (who.role)
                            @if let Some(tenant) = &who.tenant { " · tenant " (tenant) }
                            @if !who.admin { " · " span.readonly { "read-only" } }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// The hidden CSRF field of every form that changes something.
fn csrf_field(app: &Shared) -> Markup {
    html! { input type="hidden" name="csrf" value=(app.csrf); }
}

/// A button that runs `action` on `target` (a job id or a queue), returning to `back`.
fn action_button(app: &Shared, action: Action, target: &str, back: &str) -> Markup {
    html! {
        form.action method="post" action="/action" {
            (csrf_field(app))
            input type="hidden" name="action" value=(action.name());
            input type="hidden" name="target" value=(target);
            input type="hidden" name="back" value=(back);
            button type="submit" data-action=(action.name()) { (action.label()) }
        }
    }
}

fn seconds(value: f64) -> String {
    let value = value.max(0.0);
    if value < 1.0 {
        "now".to_owned()
    } else if value < 120.0 {
        format!("{value:.0} s")
    } else if value < 7200.0 {
        format!("{:.0} min", value / 60.0)
    } else if value < 172_800.0 {
        format!("{:.1} h", value / 3600.0)
    } else {
        format!("{:.1} d", value / 86400.0)
    }
}

fn now_epoch() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// `/`: every queue, its counts (live) and throughput charts.
pub async fn queues(State(app): State<Shared>) -> PageResult {
    let who = app.db.identity().await?;
    let queues = app.db.live(app.options.count_limit as i32).await?;
    let finished = app
        .live
        .finished(
            &app,
            std::time::Duration::from_secs(app.options.finished_every),
        )
        .await;
    let history = app.db.throughput(24 * 3600).await?;
    let now = now_epoch();
    let all = |width: i64, buckets: usize| {
        charts::bucketize(
            history.iter().map(|m| (m.minute, m.counts)),
            now,
            width,
            buckets,
        )
    };
    let (hour, day) = (all(60, 60), all(900, 96));
    let mut per_queue: HashMap<&str, i64> = HashMap::new();
    for minute in history.iter().filter(|m| m.minute >= now - 3600) {
        *per_queue.entry(minute.queue.as_str()).or_default() += minute.counts[1];
    }
    let finished_counts = |queue: &str, i: usize| -> String {
        match &finished {
            Some((counts, _)) => counts.get(queue).map_or(0, |c| c[i]).to_string(),
            None => "…".to_owned(),
        }
    };
    let body = html! {
        h1 { "Queues" }
        section.charts {
            (charts::chart("Last hour, per minute", &hour, "−60 min", "now", "chart-hour"))
            (charts::chart("Last 24 hours, per 15 minutes", &day, "−24 h", "now", "chart-day"))
        }
        table #queues.grid {
            thead {
                tr {
                    th { "Queue" } th { "State" } th.n { "Ready" } th.n { "Scheduled" }
                    th.n { "Running" } th.n { "Succeeded" } th.n { "Failed" } th.n { "Cancelled" }
                    th.n { "Oldest ready" } th.n { "Completed, last hour" } th { "Dead letters" }
                    @if who.admin { th { "Actions" } }
                }
            }
            tbody {
                @for q in &queues {
                    tr data-queue=(q.queue) {
                        td { a href=(format!("/queues/{}", urlencode(&q.queue))) { (q.queue) } }
                        td data-live="paused" { @if q.paused { span.paused { "paused" } } @else { "active" } }
                        td.n data-live="ready" { (q.ready) @if q.capped { "+" } }
                        td.n data-live="scheduled" { (q.scheduled) @if q.capped { "+" } }
                        td.n data-live="running" { (q.running) }
                        td.n data-live="succeeded" { (finished_counts(&q.queue, 0)) }
                        td.n data-live="failed" {
                            a href=(format!("/queues/{}?state=failed", urlencode(&q.queue))) { (finished_counts(&q.queue, 1)) }
                        }
                        td.n data-live="cancelled" { (finished_counts(&q.queue, 2)) }
                        td.n data-live="oldest" { (seconds(q.oldest_ready_seconds)) }
                        td.n { (per_queue.get(q.queue.as_str()).copied().unwrap_or(0)) }
                        td {
                            @if let Some(dl) = &q.dead_letter {
                                a href=(format!("/queues/{}", urlencode(dl))) { (dl) }
                            }
                        }
                        @if who.admin {
                            td {
                                @if q.paused { (action_button(&app, Action::Resume, &q.queue, "/")) }
                                @else { (action_button(&app, Action::Pause, &q.queue, "/")) }
                            }
                        }
                    }
                }
            }
        }
        p.note #finished-note {
            "Ready, scheduled and running refresh every "
            (app.options.refresh_ms) " ms (queued jobs are counted up to " (app.options.count_limit)
            " a queue: \"+\" marks more); succeeded, failed and cancelled (the jobs the table still holds) every "
            (app.options.finished_every) " s"
            @if let Some((_, age)) = &finished { " (taken " (age) " s ago)" }
            "."
        }
    };
    Ok(html_response(layout_with(
        "Queues",
        Some(&who),
        Some(&app.csrf),
        body,
    )))
}

/// What `/queues/{queue}` reads from its query string.
#[derive(Deserialize, Default)]
pub struct JobsQuery {
    #[serde(flatten)]
    filter: JobFilter,
    before: Option<String>,
}

fn urlencode(text: &str) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(byte as char)
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// The filter as a query string (for links that keep it).
fn filter_query(filter: &JobFilter) -> String {
    let mut parts = Vec::new();
    for (name, value) in [
        ("state", &filter.state),
        ("kind", &filter.kind),
        ("tenant", &filter.tenant),
        ("group", &filter.group),
        ("from", &filter.from),
        ("to", &filter.to),
    ] {
        if let Some(value) = value {
            parts.push(format!("{name}={}", urlencode(value)));
        }
    }
    parts.join("&")
}

fn check_state(filter: &JobFilter) -> Result<(), PageError> {
    match &filter.state {
        Some(state) if !STATES.contains(&state.as_str()) => Err(PageError::new(
            StatusCode::BAD_REQUEST,
            "Unknown state",
            format!("state must be one of {}", STATES.join(", ")),
        )),
        _ => Ok(()),
    }
}

fn job_row(job: &JobLine) -> Markup {
    html! {
        tr data-job=(job.id) {
            td.n { a href=(format!("/jobs/{}", job.id)) { (job.id) } }
            td { (job.kind) }
            td { span class=(format!("state {}", job.state)) { (job.state) } @if job.later && job.state == "queued" { " (scheduled)" } }
            td.n { (job.attempt) "/" (job.max_attempts) }
            td.n { (job.priority) }
            td { (job.tenant.as_deref().unwrap_or("")) }
            td { (job.group_key.as_deref().unwrap_or("")) }
            td { (job.created) }
            td { (job.run_at) }
            td { (job.worker.as_deref().unwrap_or("")) }
            td.payload { code { (job.payload) } }
        }
    }
}

/// `/queues/{queue}`: the queue's jobs, filtered, newest first, in keyset pages.
pub async fn jobs(
    State(app): State<Shared>,
    Path(queue): Path<String>,
    Query(query): Query<JobsQuery>,
) -> PageResult {
    let filter = query.filter.cleaned();
    check_state(&filter)?;
    let before = match query
        .before
        .as_deref()
        .map(str::trim)
        .filter(|b| !b.is_empty())
    {
        Some(before) => Some(before.parse::<i64>().map_err(|_| {
            PageError::new(
                StatusCode::BAD_REQUEST,
                "Bad page",
                "before must be a job id",
            )
        })?),
        None => None,
    };
    let who = app.db.identity().await?;
    let top = match before {
        Some(before) => before,
        None => app.db.max_id().await? + 1,
    };
    let lowest = (top - WINDOW).max(0);
    let mut jobs = app
        .db
        .jobs(&queue, &filter, before, lowest, PAGE + 1)
        .await?;
    let full = jobs.len() > PAGE as usize;
    jobs.truncate(PAGE as usize);
    // Where the next page starts: after the last job shown, or, when the window ran out before
    // the page filled, below the window.
    let next = if full {
        jobs.last().map(|job| job.id)
    } else if lowest > 0 {
        Some(lowest)
    } else {
        None
    };
    let kept = filter_query(&filter);
    let base = format!("/queues/{}", urlencode(&queue));
    let with = |extra: &str| {
        let query = [kept.as_str(), extra]
            .iter()
            .filter(|p| !p.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join("&");
        if query.is_empty() {
            base.clone()
        } else {
            format!("{base}?{query}")
        }
    };
    let value = |v: &Option<String>| v.clone().unwrap_or_default();
    let body = html! {
        h1 { "Queue " (queue) }
        form #filter.filter method="get" action=(base) {
            label { "State "
                select name="state" {
                    option value="" { "any" }
                    @for state in STATES {
                        option value=(state) selected[filter.state.as_deref() == Some(state)] { (state) }
                    }
                }
            }
            label { "Kind " input name="kind" value=(value(&filter.kind)); }
            label { "Tenant " input name="tenant" value=(value(&filter.tenant)); }
            label { "Group " input name="group" value=(value(&filter.group)); }
            label { "Created from " input name="from" placeholder="2026-12-01 00:00" value=(value(&filter.from)); }
            label { "before " input name="to" placeholder="2026-12-02" value=(value(&filter.to)); }
            button type="submit" { "Filter" }
            " " a href=(base) { "Clear" }
        }
        @if who.admin {
            form #bulk.bulk method="get" action=(format!("{base}/bulk")) {
                @for (name, v) in [("state", &filter.state), ("kind", &filter.kind), ("tenant", &filter.tenant), ("group", &filter.group), ("from", &filter.from), ("to", &filter.to)] {
                    @if let Some(v) = v { input type="hidden" name=(name) value=(v); }
                }
                "Every job the filter selects (at most " (app.options.bulk_limit) "): "
                @for action in [Action::Retry, Action::Cancel, Action::RunNow] {
                    button type="submit" name="action" value=(action.name()) { (action.label()) "…" }
                }
            }
        }
        table #jobs.grid {
            thead { tr { th.n { "Id" } th { "Kind" } th { "State" } th.n { "Attempt" } th.n { "Priority" } th { "Tenant" } th { "Group" } th { "Created" } th { "Run at" } th { "Worker" } th { "Payload" } } }
            tbody {
                @for job in &jobs { (job_row(job)) }
            }
        }
        @if !full {
            p.empty #window {
                @if jobs.is_empty() { "No jobs match" } @else { "No more jobs match" }
                " among ids " (lowest) " to " (top - 1)
                @if next.is_some() { "; older jobs are not searched yet." } @else { "." }
            }
        }
        nav.pages {
            @if before.is_some() { a #newest href=(with("")) { "« Newest" } " " }
            @if let Some(next) = next {
                a #older href=(with(&format!("before={next}"))) { @if full { "Older »" } @else { "Search older »" } }
            }
        }
    };
    Ok(html_response(layout_with(
        &format!("Queue {queue}"),
        Some(&who),
        Some(&app.csrf),
        body,
    )))
}

/// What the bulk pages read: the filter and the action.
#[derive(Deserialize)]
pub struct BulkQuery {
    #[serde(flatten)]
    filter: JobFilter,
    action: String,
    csrf: Option<String>,
}

fn bulk_action(name: &str) -> Result<Action, PageError> {
    match Action::parse(name) {
        Some(action) if action.on_job() => Ok(action),
        _ => Err(PageError::new(
            StatusCode::BAD_REQUEST,
            "Unknown action",
            "action must be retry, cancel or run_now",
        )),
    }
}

/// `GET /queues/{queue}/bulk`: how many jobs the action would act on, and a button to confirm.
pub async fn bulk_confirm(
    State(app): State<Shared>,
    Path(queue): Path<String>,
    Query(query): Query<BulkQuery>,
) -> PageResult {
    let action = bulk_action(&query.action)?;
    let filter = query.filter.cleaned();
    check_state(&filter)?;
    let who = app.db.identity().await?;
    let limit = app.options.bulk_limit as i32;
    let ids = app.db.bulk_ids(&queue, &filter, limit + 1).await?;
    let capped = ids.len() > limit as usize;
    let count = ids.len().min(limit as usize);
    let back = match filter_query(&filter).as_str() {
        "" => format!("/queues/{}", urlencode(&queue)),
        query => format!("/queues/{}?{query}", urlencode(&queue)),
    };
    let body = html! {
        h1 { (action.label()) " jobs of " (queue) }
        p #bulk-count {
            (action.label()) " " strong { (count) } " job" @if count != 1 { "s" }
            @if capped { " (the newest " (limit) "; more match the filter: run it again for the rest)" }
            "?"
        }
        @if count > 0 {
            form #bulk-confirm method="post" action=(format!("/queues/{}/bulk", urlencode(&queue))) {
                (csrf_field(&app))
                input type="hidden" name="action" value=(action.name());
                @for (name, v) in [("state", &filter.state), ("kind", &filter.kind), ("tenant", &filter.tenant), ("group", &filter.group), ("from", &filter.from), ("to", &filter.to)] {
                    @if let Some(v) = v { input type="hidden" name=(name) value=(v); }
                }
                button type="submit" { (action.label()) " " (count) " jobs" }
            }
        }
        p { a href=(back) { "Back" } }
    };
    Ok(html_response(layout("Confirm", Some(&who), body)))
}

/// `POST /queues/{queue}/bulk`: runs the action on the jobs the filter selects now (at most
/// the bulk limit), in one transaction.
pub async fn bulk_run(
    State(app): State<Shared>,
    Path(queue): Path<String>,
    Form(form): Form<BulkQuery>,
) -> PageResult {
    check_csrf(&app, form.csrf.as_deref())?;
    let action = bulk_action(&form.action)?;
    let filter = form.filter.cleaned();
    check_state(&filter)?;
    let who = app.db.identity().await?;
    let ids = app
        .db
        .bulk_ids(&queue, &filter, app.options.bulk_limit as i32)
        .await?;
    let outcomes = app.db.act_on_many(action, &ids).await?;
    let body = html! {
        h1 { (action.label()) ": done" }
        p #bulk-done { (ids.len()) " jobs of " (queue) ":" }
        ul { @for (state, n) in &outcomes { li { (n) " now " (state) } } }
        p { a href=(format!("/queues/{}", urlencode(&queue))) { "Back to the queue" } }
    };
    Ok(html_response(layout("Done", Some(&who), body)))
}

fn pretty(value: Option<&serde_json::Value>) -> String {
    match value {
        None | Some(serde_json::Value::Null) => String::new(),
        Some(value) => serde_json::to_string_pretty(value).unwrap_or_default(),
    }
}

fn text_of(job: &serde_json::Value, field: &str) -> String {
    match job.get(field) {
        None | Some(serde_json::Value::Null) => String::new(),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// `/jobs/{id}`: one job.
pub async fn job(State(app): State<Shared>, Path(id): Path<String>) -> PageResult {
    let Ok(id) = id.parse::<i64>() else {
        return Err(PageError::new(
            StatusCode::BAD_REQUEST,
            "Bad job id",
            "a job id is a number",
        ));
    };
    let who = app.db.identity().await?;
    let Some((job, later)) = app.db.job(id).await? else {
        return Err(PageError::new(
            StatusCode::NOT_FOUND,
            "No such job",
            format!("no job has id {id} (or it belongs to a tenant this role may not see)"),
        ));
    };
    let state = text_of(&job, "state");
    let queue = text_of(&job, "queue");
    let back = format!("/jobs/{id}");
    let errors: Vec<serde_json::Value> = job
        .get("errors")
        .and_then(|e| e.as_array())
        .cloned()
        .unwrap_or_default();
    let timeline = [
        ("created", "created_at"),
        ("due", "run_at"),
        ("started (last attempt)", "started_at"),
        ("last heartbeat", "heartbeat_at"),
        ("lease until", "lease_until"),
        ("finished", "finished_at"),
    ];
    let body = html! {
        h1 { "Job " (id) " " span #job-state class=(format!("state {state}")) { (state) } @if later && state == "queued" { " (scheduled)" } }
        @if who.admin {
            div.actions {
                @if state == "failed" || state == "cancelled" { (action_button(&app, Action::Retry, &id.to_string(), &back)) }
                @if state == "queued" || state == "running" { (action_button(&app, Action::Cancel, &id.to_string(), &back)) }
                @if state == "queued" && later { (action_button(&app, Action::RunNow, &id.to_string(), &back)) }
            }
        }
        dl.fields {
            dt { "Queue" } dd { a href=(format!("/queues/{}", urlencode(&queue))) { (queue) } }
            @for (label, field) in [("Kind", "kind"), ("Priority", "priority"), ("Attempt", "attempt"), ("Max attempts", "max_attempts"), ("Tenant", "tenant"), ("Group", "group_key"), ("Unique key", "unique_key"), ("Worker", "worker"), ("Lease", "lease"), ("Release reason", "release_reason")] {
                dt { (label) } dd { (text_of(&job, field)) }
            }
        }
        h2 { "Timeline" }
        ol #timeline.timeline {
            @for (label, field) in timeline {
                @let at = text_of(&job, field);
                @if !at.is_empty() { li { span.when { (at) } " " (label) } }
            }
        }
        h2 { "Payload" }
        pre #payload { (pretty(job.get("payload"))) }
        h2 { "Headers" }
        pre #headers { (pretty(job.get("headers"))) }
        h2 { "Progress" }
        pre #progress { (pretty(job.get("progress"))) }
        h2 { "Result" }
        pre #result { (pretty(job.get("result"))) }
        @if job.get("origin").is_some_and(|o| !o.is_null()) {
            h2 { "Origin (dead letter of)" }
            pre #origin { (pretty(job.get("origin"))) }
        }
        h2 { "Errors (" (errors.len()) ")" }
        table #errors.grid {
            thead { tr { th.n { "Attempt" } th { "At" } th { "Error" } } }
            tbody {
                @for error in &errors {
                    tr { td.n { (text_of(error, "attempt")) } td { (text_of(error, "at")) } td { pre { (text_of(error, "error")) } } }
                }
            }
        }
    };
    Ok(html_response(layout_with(
        &format!("Job {id}"),
        Some(&who),
        Some(&app.csrf),
        body,
    )))
}

/// `/schedules`: every schedule with its next and last runs.
pub async fn schedules(State(app): State<Shared>) -> PageResult {
    let who = app.db.identity().await?;
    let rows = app
        .db
        .rows_json(include_str!("sql/schedules.sql"), &[])
        .await;
    let body = html! {
        h1 { "Schedules" }
        @match &rows {
            Err(error) if error.code.as_deref() == Some("42501") => {
                p.note { "This role may not read the schedules (they are jobs_admin's): " (error.message) }
            }
            Err(error) => { div.error { p.message { (error.to_string()) } } }
            Ok(rows) => {
                table #schedules.grid {
                    thead { tr { th { "Name" } th { "Cron" } th { "Time zone" } th { "Queue" } th { "Kind" } th { "Enabled" } th { "Next run" } th { "Last run" } th { "Last job" } } }
                    tbody {
                        @for row in rows {
                            @let get = |f: &str| text_of(&serde_json::Value::Object(row.clone()), f);
                            tr {
                                td { (get("name")) } td { code { (get("cron")) } } td { (get("timezone")) }
                                td { (get("queue")) } td { (get("kind")) } td { (get("enabled")) }
                                td { (get("next_slot")) } td { (get("last_slot")) }
                                td { @let job = get("last_job_id"); @if !job.is_empty() { a href=(format!("/jobs/{job}")) { (job) } } }
                            }
                        }
                    }
                }
                @if rows.is_empty() { p.empty { "No schedules." } }
            }
        }
    };
    Ok(html_response(layout("Schedules", Some(&who), body)))
}

fn age(row: &serde_json::Map<String, serde_json::Value>, field: &str) -> String {
    row.get(field)
        .and_then(|v| v.as_f64())
        .map(seconds)
        .unwrap_or_default()
}

fn list(row: &serde_json::Map<String, serde_json::Value>, field: &str) -> Vec<String> {
    row.get(field)
        .and_then(|v| v.as_array())
        .map(|a| {
            a.iter()
                .map(|v| match v {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `/workers`: the background workers' health, the client workers, the leases about to end.
pub async fn workers(State(app): State<Shared>) -> PageResult {
    let who = app.db.identity().await?;
    let background = app
        .db
        .rows_json(include_str!("sql/background_workers.sql"), &[])
        .await?;
    let clients = app
        .db
        .rows_json(include_str!("sql/client_workers.sql"), &[])
        .await?;
    let soon = 30.0f64;
    let leases = app
        .db
        .rows_json(include_str!("sql/running_leases.sql"), &[&soon])
        .await?;
    let text = |row: &serde_json::Map<String, serde_json::Value>, f: &str| {
        text_of(&serde_json::Value::Object(row.clone()), f)
    };
    let body = html! {
        h1 { "Workers" }
        h2 { "Background workers" }
        table #background.grid {
            thead { tr { th { "Database" } th.n { "Pid" } th { "Serving" } th { "Started" } th.n { "Last tick" } th.n { "Ticks" } th.n { "Reclaimed" } th.n { "Purged" } th.n { "Scheduled" } th { "Last error" } } }
            tbody {
                @for row in &background {
                    tr {
                        td { (text(row, "database")) } td.n { (text(row, "pid")) } td { (text(row, "serving")) }
                        td { (text(row, "started_at")) } td.n { @let tick = age(row, "last_tick_age"); (tick) @if tick != "now" { " ago" } }
                        td.n { (text(row, "ticks")) } td.n { (text(row, "reclaimed")) } td.n { (text(row, "purged")) } td.n { (text(row, "scheduled")) }
                        td { (text(row, "last_error")) @let at = text(row, "last_error_at"); @if !at.is_empty() { " (" (at) ")" } }
                    }
                }
            }
        }
        @if background.is_empty() { p.note { "No background worker (pg_jobs is not in shared_preload_libraries, or pg_jobs.databases names no database)." } }
        h2 { "Client workers" }
        table #clients.grid {
            thead { tr { th { "Worker" } th { "Queues" } th { "Backends" } th.n { "Waiting" } th.n { "Running" } th { "Running jobs" } th.n { "Last claim" } th.n { "Last heartbeat" } th.n { "Next lease end" } th.n { "Leases expiring" } th.n { "Last seen" } } }
            tbody {
                @for row in &clients {
                    tr data-worker=(text(row, "worker")) {
                        td { (text(row, "worker")) }
                        td { (list(row, "queues").join(", ")) }
                        td { (list(row, "pids").join(", ")) }
                        td.n { (text(row, "waiting")) @let w = age(row, "waiting_for"); @if !w.is_empty() { " (" (w) ")" } }
                        td.n { (text(row, "running")) }
                        td { @for id in list(row, "running_jobs") { a href=(format!("/jobs/{id}")) { (id) } " " } }
                        td.n { (age(row, "last_claim_age")) }
                        td.n { (age(row, "last_heartbeat_age")) }
                        td.n { @if let Some(left) = row.get("next_lease_in").and_then(|v| v.as_f64()) { @if left < 0.0 { span.bad { "passed" } } @else { "in " (seconds(left)) } } }
                        td.n { @let n = text(row, "leases_expiring"); @if n != "0" { span.bad { (n) } } @else { (n) } }
                        td.n { (age(row, "last_seen_age")) }
                    }
                }
            }
        }
        @if clients.is_empty() { p.empty { "No client worker runs a job or waits for one." } }
        h2 { "Leases ending within " (soon as i64) " s" }
        table #leases.grid {
            thead { tr { th.n { "Job" } th { "Queue" } th { "Kind" } th { "Worker" } th.n { "Lease left" } } }
            tbody {
                @for row in &leases {
                    tr {
                        td.n { a href=(format!("/jobs/{}", text(row, "id"))) { (text(row, "id")) } }
                        td { (text(row, "queue")) } td { (text(row, "kind")) } td { (text(row, "worker")) }
                        td.n { @if let Some(left) = row.get("lease_left").and_then(|v| v.as_f64()) { @if left < 0.0 { span.bad { "passed" } } @else { (seconds(left)) } } }
                    }
                }
            }
        }
    };
    Ok(html_response(layout("Workers", Some(&who), body)))
}

/// An action's form.
#[derive(Deserialize)]
pub struct ActionForm {
    csrf: Option<String>,
    action: String,
    target: String,
    back: Option<String>,
}

fn check_csrf(app: &Shared, token: Option<&str>) -> Result<(), PageError> {
    match token {
        Some(token) if same_secret(token, &app.csrf) => Ok(()),
        _ => Err(PageError::new(
            StatusCode::FORBIDDEN,
            "Refused",
            "this request does not carry the dashboard's CSRF token; reload the page and try again",
        )),
    }
}

/// `POST /action`: runs one action as the dashboard's role, then goes back.
pub async fn action(State(app): State<Shared>, Form(form): Form<ActionForm>) -> PageResult {
    check_csrf(&app, form.csrf.as_deref())?;
    let Some(action) = Action::parse(&form.action) else {
        return Err(PageError::new(
            StatusCode::BAD_REQUEST,
            "Unknown action",
            "action must be retry, cancel, run_now, pause or resume",
        ));
    };
    // No privilege check here: the database decides, as the role the dashboard runs as.
    app.db.act(action, &form.target).await?;
    // Only back to a page of this dashboard.
    let back = form
        .back
        .filter(|b| b.starts_with('/') && !b.starts_with("//"))
        .unwrap_or_else(|| "/".to_owned());
    Ok(Redirect::to(&back).into_response())
}

/// Anything else.
pub async fn not_found() -> PageError {
    PageError::new(StatusCode::NOT_FOUND, "Not found", "no such page")
}

/// The dashboard's script.
pub async fn script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("static/app.js"),
    )
        .into_response()
}

/// The dashboard's style.
pub async fn style() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("static/app.css"),
    )
        .into_response()
}
