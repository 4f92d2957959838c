//! Isolation specs (tests/isolation) run through PostgreSQL's own `pg_isolation_regress`: two
//! sessions racing on one job, step by step, with the expected interleaving and outcome of each
//! permutation checked against tests/isolation/expected.

use std::path::PathBuf;
use std::process::Command;

use pg_jobs_tests::{Cluster, TEST_SETTINGS};

/// Where the PostgreSQL installation under test keeps the isolation tester.
fn isolation_regress() -> PathBuf {
    pg_jobs_tests::pg_config_dir("--pkglibdir").join("pgxs/src/test/isolation/pg_isolation_regress")
}

#[test]
fn isolation_specs_match_their_expected_interleavings() {
    let cluster = Cluster::start("isolation", TEST_SETTINGS);
    let mut admin = cluster.connect();
    admin
        .batch_execute("CREATE DATABASE pg_jobs_isolation")
        .unwrap();
    cluster
        .connect_to("pg_jobs_isolation")
        .batch_execute("CREATE EXTENSION pg_jobs")
        .unwrap();

    let specs = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../isolation");
    let output = cluster.base.join("isolation");
    std::fs::create_dir_all(&output).unwrap();
    let run = Command::new(isolation_regress())
        .arg("--use-existing")
        .arg("--host=localhost")
        .arg(format!("--port={}", cluster.port))
        .arg("--user=postgres")
        .arg("--dbname=pg_jobs_isolation")
        .arg(format!("--inputdir={}", specs.display()))
        .arg(format!("--outputdir={}", output.display()))
        .arg(format!("--schedule={}", specs.join("schedule").display()))
        .arg(format!("--bindir={}", pg_jobs_tests::pg_bin().display()))
        .output()
        .expect("run pg_isolation_regress (Debian ships it with postgresql-server-dev-N)");
    let diffs = std::fs::read_to_string(output.join("regression.diffs")).unwrap_or_default();
    assert!(
        run.status.success(),
        "isolation specs failed:\n{}\n{}\n{diffs}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
}
