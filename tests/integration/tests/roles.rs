//! Roles, privileges and tenants (README "Privileges"), over real connections as real login
//! roles: state changes only through the functions, each function checks its caller's role and
//! names the role to grant, tenants see and touch only their own jobs whatever they try, and no
//! object a user creates changes what a function does.

use std::sync::OnceLock;

use pg_jobs_tests::{
    claim, column, enqueue, jobs_in, scalar, settle, Client, Cluster, TEST_SETTINGS,
};
use postgres::types::ToSql;
use serde_json::{json, Value};

/// A cluster of its own (roles are cluster-wide), with these login roles:
/// `app_client`, `app_worker`, `app_admin` (granted the pg_jobs role their name says),
/// `nobody` (no pg_jobs role), and for tenants `acme_worker` / `globex_worker` (workers),
/// `acme_admin` (admin), `acme_client` (client), each granted its tenant.
fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let cluster = Cluster::start("roles", TEST_SETTINGS);
        cluster
            .connect()
            .batch_execute(
                "CREATE EXTENSION pg_jobs;
                 CREATE ROLE app_client LOGIN;  GRANT jobs_client TO app_client;
                 CREATE ROLE app_worker LOGIN;  GRANT jobs_worker TO app_worker;
                 CREATE ROLE app_admin LOGIN;   GRANT jobs_admin TO app_admin;
                 CREATE ROLE nobody LOGIN;
                 CREATE ROLE acme_worker LOGIN;   GRANT jobs_worker TO acme_worker;
                 CREATE ROLE globex_worker LOGIN; GRANT jobs_worker TO globex_worker;
                 CREATE ROLE acme_admin LOGIN;    GRANT jobs_admin TO acme_admin;
                 CREATE ROLE acme_client LOGIN;   GRANT jobs_client TO acme_client;
                 SELECT jobs_grant_tenant('acme_worker', 'acme');
                 SELECT jobs_grant_tenant('acme_admin', 'acme');
                 SELECT jobs_grant_tenant('acme_client', 'acme');
                 SELECT jobs_grant_tenant('globex_worker', 'globex');
                 SELECT jobs_create_queue('shared');",
            )
            .unwrap();
        cluster
    })
}

/// The SQLSTATE, message and hint of the error `sql` raises on `client`.
fn refusal(
    client: &mut Client,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> (String, String, String) {
    let error = client
        .query(sql, params)
        .expect_err(&format!("{sql} must be refused"));
    let db = error
        .as_db_error()
        .unwrap_or_else(|| panic!("{sql}: no server error: {error}"));
    (
        db.code().code().to_owned(),
        db.message().to_owned(),
        db.hint().unwrap_or_default().to_owned(),
    )
}

/// Asserts that `sql` is refused with 42501 and a hint that names `role` to grant.
fn refused_naming(client: &mut Client, sql: &str, role: &str) {
    let (code, message, hint) = refusal(client, sql, &[]);
    assert_eq!(code, "42501", "{sql}: {message}");
    assert!(
        hint.contains(&format!("GRANT {role}")) || hint.contains(role),
        "{sql}: the hint must name {role}: {hint:?} ({message})"
    );
}

/// Every job of `queue`, as the superuser sees it: the snapshot a refused or
/// cross-tenant call must leave unchanged. Scoped to one queue because the
/// other tests of this file enqueue into theirs at the same time.
fn jobs_of_queue(queue: &str) -> Value {
    scalar(
        &mut cluster().connect(),
        "SELECT coalesce(jsonb_agg(to_jsonb(j) ORDER BY j.id), '[]') FROM jobs.job j
          WHERE j.queue = $1",
        &[&queue],
    )
}

#[test]
fn a_worker_works_jobs_but_cannot_write_tables_or_manage_queues() {
    let cluster = cluster();
    let mut admin = cluster.connect_as("app_admin");
    admin
        .batch_execute("SELECT jobs_create_queue('work', lease => '1 minute')")
        .unwrap();
    let mut client = cluster.connect_as("app_client");
    let ids: Vec<i64> = (0..3)
        .map(|_| scalar(&mut client, "SELECT jobs_enqueue('work', '{}')", &[]))
        .collect();

    let mut worker = cluster.connect_as("app_worker");
    let held = claim(&mut worker, "work", 3, ", worker => 'w'");
    assert_eq!(held.len(), 3);
    for (sql, job, answer) in [
        ("SELECT jobs_heartbeat($1, $2)", held[0], "running"),
        ("SELECT jobs_complete($1, $2)", held[0], "succeeded"),
        ("SELECT jobs_fail($1, $2, 'boom')", held[1], "queued"),
        ("SELECT jobs_release($1, $2)", held[2], "queued"),
    ] {
        assert_eq!(
            settle(&mut worker, sql, &job),
            answer,
            "{sql} of job {}",
            job.id
        );
    }

    // Direct writes are refused: the functions are the only way to change state.
    let before = jobs_of_queue("work");
    for sql in [
        format!(
            "UPDATE jobs.job SET state = 'succeeded' WHERE id = {}",
            ids[1]
        ),
        format!("UPDATE jobs.job SET attempt = 0 WHERE id = {}", ids[1]),
        "INSERT INTO jobs.job (queue, max_attempts) VALUES ('work', 5)".to_owned(),
        format!("DELETE FROM jobs.job WHERE id = {}", ids[2]),
        "UPDATE jobs.queue SET paused = true".to_owned(),
        "INSERT INTO jobs.tenant_grant (role_name, tenant) VALUES ('app_worker', 'acme')"
            .to_owned(),
    ] {
        let (code, message, _) = refusal(&mut worker, &sql, &[]);
        assert_eq!(code, "42501", "{sql}: {message}");
    }
    assert_eq!(
        jobs_of_queue("work"),
        before,
        "a refused write changed a job"
    );

    // Queue administration needs jobs_admin, and the refusal says so.
    for sql in [
        "SELECT jobs_create_queue('mine')".to_owned(),
        "SELECT jobs_pause('work')".to_owned(),
        "SELECT jobs_drop_queue('work', true)".to_owned(),
        format!("SELECT jobs_retry({})", ids[0]),
        "SELECT jobs_reclaim()".to_owned(),
        "SELECT jobs_grant_tenant('app_worker', 'acme')".to_owned(),
    ] {
        refused_naming(&mut worker, &sql, "jobs_admin");
    }
}

#[test]
fn a_client_enqueues_reads_and_cancels_but_cannot_claim() {
    let cluster = cluster();
    let mut client = cluster.connect_as("app_client");
    let id = enqueue(&mut client, "shared", json!({"who": "client"}));
    let listed: i64 = scalar(
        &mut client,
        "SELECT count(*) FROM jobs_list('shared') WHERE id = $1",
        &[&id],
    );
    assert_eq!(listed, 1);
    let got: Option<i64> = scalar(&mut client, "SELECT (jobs_get($1)).id", &[&id]);
    assert_eq!(got, Some(id));
    let seen: i64 = scalar(
        &mut client,
        "SELECT count(*) FROM jobs.job WHERE id = $1",
        &[&id],
    );
    assert_eq!(seen, 1, "a client reads its jobs directly too");

    refused_naming(
        &mut client,
        "SELECT * FROM jobs_claim('shared')",
        "jobs_worker",
    );
    refused_naming(
        &mut client,
        &format!("SELECT jobs_complete({id}, gen_random_uuid())"),
        "jobs_worker",
    );
    refused_naming(
        &mut client,
        &format!("SELECT * FROM jobs_complete_batch(ARRAY[{id}], ARRAY[gen_random_uuid()])"),
        "jobs_worker",
    );
    let state: String = scalar(&mut client, "SELECT jobs_cancel($1)", &[&id]);
    assert_eq!(state, "cancelled");
}

#[test]
fn a_role_without_pg_jobs_roles_can_do_nothing_and_is_told_what_to_grant() {
    let mut nobody = cluster().connect_as("nobody");
    for sql in [
        "SELECT jobs_enqueue('shared', '{}')",
        "SELECT * FROM jobs_claim('shared')",
        "SELECT * FROM jobs_list()",
        "SELECT jobs_metrics()",
        "SELECT * FROM jobs.job",
        "SELECT * FROM jobs.queue_stats",
    ] {
        let (code, message, hint) = refusal(&mut nobody, sql, &[]);
        assert_eq!(code, "42501", "{sql}: {message}");
        assert!(
            hint.contains("GRANT jobs_client"),
            "{sql}: the hint must say what to grant: {hint:?} ({message})"
        );
    }
}

#[test]
fn grants_and_revokes_of_roles_take_effect_at_the_next_call_of_an_open_session() {
    // Sessions remember what they found out about their caller's roles: a change made by
    // another session must reach them at once, whichever way the power comes and goes.
    let cluster = cluster();
    let mut superuser = cluster.connect();
    superuser
        .batch_execute(
            "DROP ROLE IF EXISTS changing_roles, changing_roles_group;
             CREATE ROLE changing_roles LOGIN;
             CREATE ROLE changing_roles_group NOLOGIN;
             SELECT jobs_create_queue('role_changes')",
        )
        .unwrap();
    let mut session = cluster.connect_as("changing_roles");
    let enqueue = "SELECT jobs_enqueue('role_changes', '{}')";
    refused_naming(&mut session, enqueue, "jobs_client");

    superuser
        .batch_execute("GRANT jobs_client TO changing_roles")
        .unwrap();
    let _: i64 = scalar(&mut session, enqueue, &[]);
    refused_naming(
        &mut session,
        "SELECT * FROM jobs_claim('role_changes')",
        "jobs_worker",
    );

    superuser
        .batch_execute("REVOKE jobs_client FROM changing_roles")
        .unwrap();
    refused_naming(&mut session, enqueue, "jobs_client");

    // Through a group the role joins and leaves, and as a superuser.
    superuser
        .batch_execute(
            "GRANT jobs_worker TO changing_roles_group; GRANT changing_roles_group TO changing_roles",
        )
        .unwrap();
    let _: i64 = scalar(&mut session, enqueue, &[]);
    superuser
        .batch_execute("REVOKE changing_roles_group FROM changing_roles")
        .unwrap();
    refused_naming(&mut session, enqueue, "jobs_client");
    superuser
        .batch_execute("ALTER ROLE changing_roles SUPERUSER")
        .unwrap();
    let _: i64 = scalar(&mut session, enqueue, &[]);
    superuser
        .batch_execute("ALTER ROLE changing_roles NOSUPERUSER")
        .unwrap();
    refused_naming(&mut session, enqueue, "jobs_client");

    // SET ROLE changes the caller within the session.
    superuser
        .batch_execute("GRANT jobs_client TO changing_roles_group; GRANT changing_roles_group TO changing_roles")
        .unwrap();
    session
        .batch_execute("SET ROLE changing_roles_group")
        .unwrap();
    let _: i64 = scalar(&mut session, enqueue, &[]);
    superuser
        .batch_execute("REVOKE jobs_client FROM changing_roles_group")
        .unwrap();
    let _: i64 = scalar(&mut session, enqueue, &[]);
    superuser
        .batch_execute("REVOKE jobs_worker FROM changing_roles_group")
        .unwrap();
    refused_naming(&mut session, enqueue, "jobs_client");
    session.batch_execute("RESET ROLE").unwrap();
    refused_naming(&mut session, enqueue, "jobs_client");
    drop(session);
    superuser
        .batch_execute(
            "DROP OWNED BY changing_roles, changing_roles_group;
             DROP ROLE changing_roles; DROP ROLE changing_roles_group",
        )
        .unwrap();
}

/// Enqueues one job for the session's tenant and claims it, returning (id, lease).
fn job_of(worker: &mut Client, queue: &str) -> (i64, uuid::Uuid) {
    let id: i64 = scalar(worker, "SELECT jobs_enqueue($1, '{}')", &[&queue]);
    let row = worker
        .query_one(
            "SELECT id, lease FROM jobs_claim($1, worker => 'w') WHERE id = $2",
            &[&queue, &id],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

#[test]
fn tenants_cannot_see_or_touch_each_others_jobs() {
    let cluster = cluster();
    cluster
        .connect()
        .batch_execute("SELECT jobs_create_queue('tenants', lease => '1 hour')")
        .unwrap();
    let mut acme = cluster.connect_as("acme_worker");
    acme.batch_execute("SET pg_jobs.tenant = 'acme'").unwrap();
    let mut globex = cluster.connect_as("globex_worker");
    globex
        .batch_execute("SET pg_jobs.tenant = 'globex'")
        .unwrap();

    let (acme_job, _acme_lease) = job_of(&mut acme, "tenants");
    let (globex_running, globex_lease) = job_of(&mut globex, "tenants");
    let globex_queued: i64 = scalar(&mut globex, "SELECT jobs_enqueue('tenants', '{}')", &[]);
    let tenant: Option<String> = scalar(
        &mut cluster.connect(),
        "SELECT tenant FROM jobs.job WHERE id = $1",
        &[&globex_queued],
    );
    assert_eq!(
        tenant.as_deref(),
        Some("globex"),
        "a job carries its tenant"
    );
    let before = jobs_of_queue("tenants");

    // Every function, pointed at globex's jobs from acme's session.
    let got: Option<i64> = scalar(&mut acme, "SELECT (jobs_get($1)).id", &[&globex_running]);
    assert_eq!(got, None, "jobs_get shows another tenant's job");
    let listed: Vec<i64> = column(&mut acme, "SELECT id FROM jobs_list('tenants')", &[]);
    assert_eq!(listed, [acme_job], "jobs_list shows other tenants' jobs");
    for id in [globex_running, globex_queued] {
        let (code, _, _) = refusal(&mut acme, "SELECT jobs_cancel($1)", &[&id]);
        assert_eq!(code, "P0002", "another tenant's job is no job at all");
    }
    for sql in [
        "SELECT jobs_heartbeat($1, $2)",
        "SELECT jobs_complete($1, $2)",
        "SELECT jobs_fail($1, $2, 'x')",
        "SELECT jobs_release($1, $2)",
    ] {
        // Even with the right lease (leaked), and with a guessed one.
        for lease in [globex_lease, uuid::Uuid::new_v4()] {
            let answer: String = scalar(&mut acme, sql, &[&globex_running, &lease]);
            assert_eq!(answer, "lost", "{sql} acted on another tenant's job");
        }
    }
    let batch: String = scalar(
        &mut acme,
        "SELECT outcome FROM jobs_complete_batch(ARRAY[$1::bigint], ARRAY[$2::uuid])",
        &[&globex_running, &globex_lease],
    );
    assert_eq!(batch, "lost");
    let claimed: i64 = scalar(
        &mut acme,
        "SELECT count(*) FROM jobs_claim('tenants', n => 100)",
        &[],
    );
    assert_eq!(claimed, 0, "acme claimed globex's queued job");
    let mut acme_admin = cluster.connect_as("acme_admin");
    acme_admin
        .batch_execute("SET pg_jobs.tenant = 'acme'")
        .unwrap();
    let (code, _, _) = refusal(&mut acme_admin, "SELECT jobs_retry($1)", &[&globex_running]);
    assert_eq!(code, "P0002");

    // Direct reads of every table and view.
    for (sql, expected) in [
        ("SELECT count(*) FROM jobs.job WHERE tenant IS DISTINCT FROM 'acme'", 0i64),
        ("SELECT count(*) FROM jobs.job WHERE queue = 'tenants'", 1),
        (
            "SELECT coalesce(sum(ready + scheduled + running + succeeded + failed + cancelled), 0)::bigint
               FROM jobs.queue_stats WHERE queue = 'tenants'",
            1,
        ),
    ] {
        let seen: i64 = scalar(&mut acme, sql, &[]);
        assert_eq!(seen, expected, "{sql}");
    }
    let metrics: String = scalar(&mut acme, "SELECT jobs_metrics()", &[]);
    assert!(
        metrics.contains("pg_jobs_queue_jobs{queue=\"tenants\",state=\"running\"} 1"),
        "metrics count other tenants' jobs:\n{metrics}"
    );
    assert_eq!(
        jobs_of_queue("tenants"),
        before,
        "acme changed globex's jobs"
    );

    // A client without a tenant set sees only jobs without a tenant; a worker without one
    // sees every tenant's (the shared pool).
    let mut plain_client = cluster.connect_as("app_client");
    assert_eq!(jobs_in(&mut plain_client, "tenants"), 0);
    let mut pool = cluster.connect_as("app_worker");
    assert_eq!(jobs_in(&mut pool, "tenants"), 3);
}

#[test]
fn a_role_granted_one_tenant_cannot_act_for_another_however_the_setting_is_made() {
    let cluster = cluster();
    let mut superuser = cluster.connect();
    superuser
        .batch_execute(
            "CREATE OR REPLACE FUNCTION public.as_globex() RETURNS bigint
                 LANGUAGE sql SET pg_jobs.tenant = 'globex'
                 AS $$ SELECT jobs_enqueue('shared', '{}') $$;
             GRANT EXECUTE ON FUNCTION public.as_globex() TO acme_client;",
        )
        .unwrap();
    let refused = |client: &mut Client, sql: &str| {
        let (code, message, hint) = refusal(client, sql, &[]);
        assert_eq!(code, "42501", "{sql}: {message}");
        assert!(
            message.contains("tenant 'globex'"),
            "{sql}: the message must name the tenant: {message}"
        );
        assert!(hint.contains("jobs_grant_tenant"), "{sql}: {hint}");
    };

    // SET in the session.
    let mut acme = cluster.connect_as("acme_client");
    acme.batch_execute("SET pg_jobs.tenant = 'globex'").unwrap();
    refused(&mut acme, "SELECT jobs_enqueue('shared', '{}')");
    refused(&mut acme, "SELECT * FROM jobs_list()");
    refused(&mut acme, "SELECT * FROM jobs.job");
    acme.batch_execute("SET pg_jobs.tenant = 'acme, globex'")
        .unwrap();
    refused(
        &mut acme,
        "SELECT jobs_enqueue('shared', '{}', tenant => 'acme')",
    );

    // The explicit argument, with and without a tenant set.
    let mut acme = cluster.connect_as("acme_client");
    refused(
        &mut acme,
        "SELECT jobs_enqueue('shared', '{}', tenant => 'globex')",
    );
    acme.batch_execute("SET pg_jobs.tenant = 'acme'").unwrap();
    let (code, _, _) = refusal(
        &mut acme,
        "SELECT jobs_enqueue('shared', '{}', tenant => 'globex')",
        &[],
    );
    assert_eq!(code, "42501");

    // SET made by a superuser before SET ROLE.
    let mut session = cluster.connect();
    session
        .batch_execute("SET pg_jobs.tenant = 'globex'; SET ROLE acme_client")
        .unwrap();
    refused(&mut session, "SELECT jobs_enqueue('shared', '{}')");

    // SET by a function's SET clause.
    let mut acme = cluster.connect_as("acme_client");
    refused(&mut acme, "SELECT public.as_globex()");

    // ALTER ROLE ... SET, made by a superuser.
    superuser
        .batch_execute("ALTER ROLE acme_client SET pg_jobs.tenant = 'globex'")
        .unwrap();
    let mut acme = cluster.connect_as("acme_client");
    refused(&mut acme, "SELECT jobs_enqueue('shared', '{}')");
    superuser
        .batch_execute("ALTER ROLE acme_client RESET pg_jobs.tenant")
        .unwrap();

    // A revoke takes effect at the next call of a session that already acted for the tenant.
    superuser
        .batch_execute("CREATE ROLE acme_temp LOGIN; GRANT jobs_client TO acme_temp; SELECT jobs_grant_tenant('acme_temp', 'acme')")
        .unwrap();
    let mut temp = cluster.connect_as("acme_temp");
    temp.batch_execute("SET pg_jobs.tenant = 'acme'").unwrap();
    let _: i64 = scalar(&mut temp, "SELECT jobs_enqueue('shared', '{}')", &[]);
    superuser
        .batch_execute("SELECT jobs_revoke_tenant('acme_temp', 'acme')")
        .unwrap();
    let (code, message, _) = refusal(&mut temp, "SELECT jobs_enqueue('shared', '{}')", &[]);
    assert_eq!(code, "42501", "a revoked tenant still works: {message}");
}

#[test]
fn objects_users_create_change_nothing_the_functions_do() {
    let cluster = cluster();
    let mut superuser = cluster.connect();
    superuser
        .batch_execute(
            "CREATE SCHEMA IF NOT EXISTS hostile;
             CREATE OR REPLACE FUNCTION hostile.never(text, text) RETURNS boolean
                 LANGUAGE sql AS 'SELECT false';
             DROP OPERATOR IF EXISTS hostile.= (text, text);
             CREATE OPERATOR hostile.= (LEFTARG = text, RIGHTARG = text, FUNCTION = hostile.never);
             CREATE OR REPLACE FUNCTION public.now() RETURNS timestamptz
                 LANGUAGE sql AS $$ SELECT '2000-01-01 00:00:00+00'::timestamptz $$;
             CREATE TABLE IF NOT EXISTS public.job (id bigint, queue text, state text);
             CREATE TABLE IF NOT EXISTS public.queue (name text);
             GRANT USAGE ON SCHEMA hostile TO app_worker;
             SELECT jobs_create_queue('captured');",
        )
        .unwrap();
    let mut worker = cluster.connect_as("app_worker");
    worker
        .batch_execute(
            "SET search_path = hostile, public, pg_catalog;
             CREATE TEMP TABLE job (id bigint, queue text);
             CREATE TEMP TABLE queue (name text);",
        )
        .unwrap();
    let id: i64 = scalar(
        &mut worker,
        "SELECT public.jobs_enqueue('captured', '{\"n\": 1}')",
        &[],
    );
    let row = worker
        .query_one(
            "SELECT id, lease, run_at > '2001-01-01' FROM public.jobs_claim('captured')",
            &[],
        )
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), id, "the claim found the job");
    assert!(
        row.get::<_, bool>(2),
        "run_at came from a user's now() instead of pg_catalog.now()"
    );
    let lease: uuid::Uuid = row.get(1);
    let answer: String = scalar(
        &mut worker,
        "SELECT public.jobs_complete($1, $2)",
        &[&id, &lease],
    );
    assert_eq!(answer, "succeeded");
    let listed: i64 = scalar(
        &mut worker,
        "SELECT count(*) FROM public.jobs_list(queue => 'captured')",
        &[],
    );
    assert_eq!(listed, 1);
}

#[test]
fn the_install_script_passes_pgspot() {
    let pgspot = std::env::var("PG_JOBS_PGSPOT").unwrap_or_else(|_| "pgspot".to_owned());
    let extension_dir = pg_jobs_tests::pg_config_dir("--sharedir").join("extension");
    let scripts: Vec<_> = std::fs::read_dir(&extension_dir)
        .expect("read the extension directory")
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("pg_jobs--") && n.ends_with(".sql"))
        })
        .collect();
    assert!(
        !scripts.is_empty(),
        "no pg_jobs scripts in {extension_dir:?}"
    );
    let installed: String = scalar(
        &mut cluster().connect(),
        "SELECT extversion FROM pg_extension WHERE extname = 'pg_jobs'",
        &[],
    );
    for script in scripts {
        let name = script.file_name().unwrap().to_string_lossy().into_owned();
        // The released install scripts of earlier versions are kept as they shipped; the
        // current install script and every upgrade script must be clean.
        let install_of_other_version =
            name.matches("--").count() == 1 && name != format!("pg_jobs--{installed}.sql");
        if install_of_other_version {
            continue;
        }
        let output = std::process::Command::new(&pgspot)
            .arg(&script)
            .output()
            .unwrap_or_else(|e| {
                panic!("run {pgspot} (pip install pgspot; scripts/test installs it): {e}")
            });
        let report = String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr);
        assert!(
            report.contains("Errors: 0 Warnings: 0 Unknown: 0"),
            "pgspot finds problems in {name}:\n{report}"
        );
    }
}

#[test]
fn totals_and_metrics_count_only_the_callers_tenants() {
    let cluster = cluster();
    cluster
        .connect()
        .batch_execute("SELECT jobs_create_queue('counted', lease => '1 hour')")
        .unwrap();
    let settle = |role: &str, tenant: &str, jobs: usize| {
        let mut worker = cluster.connect_as(role);
        worker
            .batch_execute(&format!("SET pg_jobs.tenant = '{tenant}'"))
            .unwrap();
        for _ in 0..jobs {
            let (id, lease) = job_of(&mut worker, "counted");
            let answer: String =
                scalar(&mut worker, "SELECT jobs_complete($1, $2)", &[&id, &lease]);
            assert_eq!(answer, "succeeded");
        }
    };
    settle("acme_worker", "acme", 2);
    settle("globex_worker", "globex", 1);
    let completed = |client: &mut Client| -> i64 {
        scalar(
            client,
            "SELECT coalesce(sum(completed), 0)::bigint FROM jobs_totals() WHERE queue = 'counted'",
            &[],
        )
    };
    let mut acme = cluster.connect_as("acme_worker");
    acme.batch_execute("SET pg_jobs.tenant = 'acme'").unwrap();
    assert_eq!(completed(&mut acme), 2, "acme's totals");
    let mut globex = cluster.connect_as("globex_worker");
    globex
        .batch_execute("SET pg_jobs.tenant = 'globex'")
        .unwrap();
    assert_eq!(completed(&mut globex), 1, "globex's totals");
    assert_eq!(
        completed(&mut cluster.connect_as("app_worker")),
        3,
        "a worker without a tenant sees every tenant's"
    );
    assert_eq!(
        completed(&mut cluster.connect_as("app_client")),
        0,
        "a client without a tenant sees only jobs without one"
    );

    let metrics: String = scalar(&mut acme, "SELECT jobs_metrics()", &[]);
    assert!(
        metrics.contains("pg_jobs_completed_total{queue=\"counted\"} 2\n"),
        "acme's metrics count other tenants' jobs:\n{metrics}"
    );
    assert!(
        !metrics.contains("pg_jobs_worker_"),
        "a tenant's session is shown the shared worker's health:\n{metrics}"
    );
    let all: String = scalar(
        &mut cluster.connect_as("app_worker"),
        "SELECT jobs_metrics()",
        &[],
    );
    assert!(
        all.contains("pg_jobs_completed_total{queue=\"counted\"} 3\n")
            && all.contains("pg_jobs_worker_up{database=\"postgres\"} 1\n"),
        "{all}"
    );
}

/// A queue served only by tenants' workers: their claims take only their tenant's jobs, so
/// they cannot raise the claim floor past what they pass over, and without more the floor
/// stayed at the queue's first job while every claim walked the dead index entries of all the
/// jobs claimed since (benchmark scenario r: 111 buffers a job after 20,000 claims). Each such
/// claim moves the floor to the first due job of any tenant (each session once per 16 jobs its
/// claims took, so the floor lags by at most 16 jobs per session); two tenants' jobs
/// interleaved, both served, in claim order, none passed over.
#[test]
fn tenants_workers_move_the_claim_floor_and_pass_over_nothing() {
    let cluster = cluster();
    let mut owner = cluster.connect();
    owner
        .batch_execute("SELECT jobs_create_queue('tenant-floor')")
        .unwrap();
    let mut acme = cluster.connect_as("acme_worker");
    acme.batch_execute("SET pg_jobs.tenant = 'acme'").unwrap();
    let mut globex = cluster.connect_as("globex_worker");
    globex
        .batch_execute("SET pg_jobs.tenant = 'globex'")
        .unwrap();
    let mut ids = Vec::new();
    for _ in 0..100 {
        for session in [&mut acme, &mut globex] {
            let id: i64 = scalar(session, "SELECT jobs_enqueue('tenant-floor', '{}')", &[]);
            ids.push(id);
        }
    }
    let mut claimed = Vec::new();
    for _ in 0..80 {
        for session in [&mut acme, &mut globex] {
            let row = session
                .query_one(
                    "SELECT id, jobs_complete(id, lease) FROM jobs_claim('tenant-floor')",
                    &[],
                )
                .unwrap();
            claimed.push(row.get::<_, i64>(0));
        }
    }
    assert_eq!(
        claimed,
        ids[..160],
        "each tenant's jobs in claim order, none passed over"
    );
    let floor: Option<i64> = scalar(
        &mut owner,
        "SELECT floor_id FROM jobs.runtime_state('tenant-floor')",
        &[],
    );
    let floor = floor.expect("the queue has a claim floor");
    // Two sessions, each advancing the floor once per 16 jobs it claimed.
    let lag = 2 * 16;
    assert!(
        floor >= ids[160 - lag],
        "the claim floor stayed at job {floor}, below the {}th of the 160 jobs claimed ({})",
        160 - lag,
        ids[160 - lag]
    );
    assert!(
        floor <= ids[160],
        "the claim floor ({floor}) passed the first unclaimed job ({})",
        ids[160]
    );
}

/// Claims scoped to one tenant start past the jobs that tenant's claims in flight hold (the
/// tenant's reach), as claims of every tenant do past theirs; another tenant's claims and
/// claims of every tenant are not moved by it, a job enqueued before it in claim order is
/// claimed first, and the jobs of such a claim that rolls back are claimed next.
#[test]
fn a_tenants_reach_moves_only_its_own_claims() {
    let cluster = cluster();
    let mut owner = cluster.connect();
    owner
        .batch_execute("SELECT jobs_create_queue('tenant-reach')")
        .unwrap();
    let acme_session = || {
        let mut session = cluster.connect_as("acme_worker");
        session
            .batch_execute("SET pg_jobs.tenant = 'acme'")
            .unwrap();
        session
    };
    let mut acme = acme_session();
    let mut holder = acme_session();
    let mut globex = cluster.connect_as("globex_worker");
    globex
        .batch_execute("SET pg_jobs.tenant = 'globex'")
        .unwrap();
    let (mut acme_ids, mut globex_ids) = (Vec::new(), Vec::new());
    for _ in 0..10 {
        acme_ids.push(scalar::<i64>(
            &mut acme,
            "SELECT jobs_enqueue('tenant-reach', '{}')",
            &[],
        ));
        globex_ids.push(scalar::<i64>(
            &mut globex,
            "SELECT jobs_enqueue('tenant-reach', '{}')",
            &[],
        ));
    }
    let claim = |client: &mut Client, n: i32| -> Vec<i64> {
        column(
            client,
            "SELECT id FROM jobs_claim('tenant-reach', n => $1) ORDER BY id",
            &[&n],
        )
    };
    // Committed claims put a floor on the queue.
    assert_eq!(claim(&mut acme, 2), acme_ids[0..2]);

    let mut tx = holder.transaction().unwrap();
    let held: Vec<i64> = column(
        &mut tx,
        "SELECT id FROM jobs_claim('tenant-reach', n => 3) ORDER BY id",
        &[],
    );
    assert_eq!(held, acme_ids[2..5]);
    assert_eq!(
        claim(&mut acme, 2),
        acme_ids[5..7],
        "a claim of the tenant while another holds its head"
    );
    assert_eq!(
        claim(&mut globex, 2),
        globex_ids[0..2],
        "another tenant's claim started past the first tenant's reach"
    );
    assert_eq!(
        claim(&mut owner, 1),
        globex_ids[2..3],
        "a claim of every tenant started past one tenant's reach"
    );
    // A job that comes before the jobs claims in flight hold is claimed first.
    let urgent: i64 = scalar(
        &mut acme,
        "SELECT jobs_enqueue('tenant-reach', '{}', priority => -1)",
        &[],
    );
    assert_eq!(claim(&mut acme, 1), [urgent]);
    tx.rollback().unwrap();
    assert_eq!(
        claim(&mut acme, 3),
        acme_ids[2..5],
        "the rolled-back claim's jobs were not claimed next"
    );
    assert_eq!(claim(&mut acme, 10), acme_ids[7..10]);
    assert_eq!(claim(&mut globex, 10), globex_ids[3..10]);
}

#[test]
fn dead_letter_copies_keep_their_tenant() {
    let cluster = cluster();
    let mut admin = cluster.connect();
    admin
        .batch_execute(
            "SELECT jobs_create_queue('tenant-dead');
             SELECT jobs_create_queue('tenant-source', max_attempts => 1,
                                      dead_letter => 'tenant-dead');",
        )
        .unwrap();
    let mut acme = cluster.connect_as("acme_worker");
    acme.batch_execute("SET pg_jobs.tenant = 'acme'").unwrap();
    let (id, lease) = job_of(&mut acme, "tenant-source");
    let outcome: String = scalar(
        &mut acme,
        "SELECT jobs_fail($1, $2, 'boom')::text",
        &[&id, &lease],
    );
    assert_eq!(outcome, "failed", "the job's only attempt failed");

    let copy_of = "SELECT tenant FROM jobs.job
                    WHERE queue = 'tenant-dead' AND (origin ->> 'id')::bigint = $1";
    let tenants: Vec<Option<String>> = column(&mut admin, copy_of, &[&id]);
    assert_eq!(
        tenants,
        [Some("acme".to_owned())],
        "one dead-letter copy, carrying the failed job's tenant"
    );
    // The copy is acme's: its worker sees it, globex's does not.
    let seen_by = |role: &str, tenant: &str| -> usize {
        let mut session = cluster.connect_as(role);
        session
            .batch_execute(&format!("SET pg_jobs.tenant = '{tenant}'"))
            .unwrap();
        session.query(copy_of, &[&id]).unwrap().len()
    };
    assert_eq!(seen_by("acme_worker", "acme"), 1);
    assert_eq!(seen_by("globex_worker", "globex"), 0);
}

#[test]
fn dropping_the_extension_in_one_database_leaves_the_roles_to_the_others() {
    let cluster = cluster();
    let mut admin = cluster.connect();
    let database = format!("roles_second_{}", std::process::id());
    cluster.recreate_database(&database);
    let mut second = cluster.connect_to(&database);
    // The roles exist already (the first database made them): this CREATE EXTENSION uses them.
    second
        .batch_execute("CREATE EXTENSION pg_jobs; SELECT jobs_create_queue('second');")
        .unwrap();
    second.batch_execute("DROP EXTENSION pg_jobs").unwrap();

    let roles: i64 = scalar(
        &mut admin,
        "SELECT count(*) FROM pg_roles
          WHERE rolname IN ('jobs_client', 'jobs_worker', 'jobs_admin')",
        &[],
    );
    assert_eq!(
        roles, 3,
        "DROP EXTENSION in one database dropped cluster roles"
    );
    // The first database still serves its workers through those roles.
    admin
        .batch_execute("SELECT jobs_create_queue('after-drop')")
        .unwrap();
    let mut worker = cluster.connect_as("app_worker");
    let (id, lease) = job_of(&mut worker, "after-drop");
    let outcome: String = scalar(
        &mut worker,
        "SELECT jobs_complete($1, $2)::text",
        &[&id, &lease],
    );
    assert_eq!(outcome, "succeeded");
    // And the extension can be created again beside them.
    second.batch_execute("CREATE EXTENSION pg_jobs").unwrap();
    drop(second);
    admin
        .batch_execute(&format!("DROP DATABASE {database} WITH (FORCE)"))
        .unwrap();
}

/// The warnings `CREATE EXTENSION pg_jobs` gives (as notices) in database `database`, created
/// afresh after `prepare` ran in it.
fn install_warnings(cluster: &Cluster, database: &str, prepare: &str) -> Vec<(String, String)> {
    cluster
        .connect()
        .batch_execute(&format!("CREATE DATABASE \"{database}\""))
        .unwrap();
    cluster.warnings_of(database, &format!("{prepare};\nCREATE EXTENSION pg_jobs"))
}

/// A schema where other roles may create objects lets a function of theirs with a more
/// specific signature capture untyped calls of pg_jobs's functions: `CREATE EXTENSION` says
/// so, naming who may create there and how to make it safe; a schema only its owner writes
/// gets no such warning.
#[test]
fn create_extension_warns_of_a_schema_others_may_create_in() {
    let cluster = cluster();
    let open = install_warnings(
        cluster,
        "open_public",
        "CREATE ROLE mallory; GRANT CREATE ON SCHEMA public TO PUBLIC, mallory",
    );
    let schema_warning = open
        .iter()
        .find(|(message, _)| message.starts_with("pg_jobs's functions are in schema public"))
        .unwrap_or_else(|| panic!("no warning of the open schema: {open:?}"));
    assert_eq!(
        schema_warning.0,
        "pg_jobs's functions are in schema public, where PUBLIC, mallory may create objects"
    );
    assert!(
        schema_warning
            .1
            .starts_with("Revoke it (REVOKE CREATE ON SCHEMA public FROM PUBLIC, mallory)"),
        "{}",
        schema_warning.1
    );
    let closed = install_warnings(
        cluster,
        "closed_public",
        "REVOKE CREATE ON SCHEMA public FROM PUBLIC",
    );
    assert!(
        closed
            .iter()
            .all(|(message, _)| !message.contains("may create objects")),
        "{closed:?}"
    );
}
