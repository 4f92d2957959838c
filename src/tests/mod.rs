//! In-database tests (`#[pg_test]`): each runs inside one transaction that is rolled back.
