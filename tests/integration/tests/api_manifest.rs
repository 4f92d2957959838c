//! The API manifest (`sql/api-manifest.txt`) against the installed extension: its last
//! section lists exactly the functions, types and views the catalogs show, and every section
//! grows from the one before only by appending parameters with defaults (or attributes and
//! columns), unless a note in the newer section explains the change.

use pg_jobs_tests::{manifest, scalar, Cluster};

#[test]
fn the_last_section_is_the_installed_api() {
    let mut client = Cluster::shared().connect();
    let version: String = scalar(
        &mut client,
        "SELECT extversion FROM pg_extension WHERE extname = 'pg_jobs'",
        &[],
    );
    let sections = manifest::read();
    let last = sections
        .last()
        .expect("sql/api-manifest.txt has a section per version");
    assert_eq!(
        last.version, version,
        "the last section of sql/api-manifest.txt must be the installed version's: add [{version}] with the API as it is now"
    );
    let listed = manifest::listing(&mut client);
    assert!(listed.len() > 30, "the listing sees the API: {listed:?}");
    if let Some(diff) = manifest::difference(last, &listed) {
        panic!("{diff}");
    }
}

#[test]
fn every_version_grows_compatibly_or_says_why_not() {
    let sections = manifest::read();
    assert!(sections.len() >= 2, "0.1.0 and 0.2.0 at least");
    let mut problems = Vec::new();
    for pair in sections.windows(2) {
        problems.extend(manifest::incompatible_changes(&pair[0], &pair[1]));
    }
    assert!(
        problems.is_empty(),
        "incompatible API changes without a note in sql/api-manifest.txt:\n{}",
        problems.join("\n")
    );
}
