//! The harness itself: a cluster starts with pg_jobs preloaded and the extension created.

use pg_jobs_tests::{scalar, Cluster};

#[test]
fn shared_cluster_has_the_extension_preloaded() {
    let mut client = Cluster::shared().connect();
    let preload: String = scalar(&mut client, "SHOW shared_preload_libraries", &[]);
    assert_eq!(preload, "pg_jobs");
    let version: String = scalar(
        &mut client,
        "SELECT extversion FROM pg_extension WHERE extname = 'pg_jobs'",
        &[],
    );
    assert!(!version.is_empty());
}
