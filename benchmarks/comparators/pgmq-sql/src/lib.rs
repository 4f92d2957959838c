//! Empty: this crate exists only to be fetched (see Cargo.toml).
