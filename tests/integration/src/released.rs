//! The released pg_jobs 0.1.0, built from the commit that shipped it, and private copies of
//! the PostgreSQL installation to run it in: the upgrade test starts a cluster on 0.1.0, then
//! installs the current package into the same copy, as an upgrade in production does.
//!
//! The build is cached in the directory the caller names (the upgrade test uses
//! `<target>/tmp/pg_jobs-0.1.0`, or `PG_JOBS_UPGRADE_CACHE`): the commit's files
//! (`git archive`), its own `CARGO_TARGET_DIR`, and the package `cargo pgrx package` makes for
//! the PostgreSQL major the tests run (`package-pg15`).
//! Delete the directory to build again. The first build compiles pgrx and every dependency of
//! 0.1.0 (several minutes on two cores); later runs reuse it.

use std::path::{Component, Path, PathBuf};
use std::process::Command;

use crate::{pg_bin, pg_config_dir, pg_major};

/// The commit that shipped pg_jobs 0.1.0.
pub const COMMIT_0_1_0: &str = "00a29a3";

/// The repository this test crate lives in.
fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("find the repository")
}

/// A built package of a released version: its library and its extension files.
pub struct Package {
    /// `pg_jobs.so`.
    pub library: PathBuf,
    /// The control file, whose default_version is the release's.
    pub control: PathBuf,
    /// The install script the release's build generated.
    pub install_script: PathBuf,
}

/// The package of 0.1.0, built from [`COMMIT_0_1_0`] into `cache` unless already there, for
/// the PostgreSQL installation the tests run ([`pg_bin`]).
pub fn package_0_1_0(cache: &Path) -> Package {
    let major = pg_major();
    let done = cache.join(format!("package-pg{major}.done"));
    let out = cache.join(format!("package-pg{major}"));
    if !done.exists() {
        build(cache, &out, major);
        std::fs::write(&done, COMMIT_0_1_0).expect("mark the 0.1.0 build done");
    }
    let find = |name: &str| {
        find_file(&out, name).unwrap_or_else(|| panic!("{name} is missing from {}", out.display()))
    };
    Package {
        library: find("pg_jobs.so"),
        control: find("pg_jobs.control"),
        install_script: find("pg_jobs--0.1.0.sql"),
    }
}

fn build(cache: &Path, out: &Path, major: u32) {
    let started = std::time::Instant::now();
    let source = cache.join("src");
    let _ = std::fs::remove_dir_all(&source);
    let _ = std::fs::remove_dir_all(out);
    std::fs::create_dir_all(&source).expect("create the 0.1.0 source directory");
    let archive = cache.join("src.tar");
    let output = Command::new("git")
        .arg("-C")
        .arg(repository())
        .args(["archive", "--format=tar", "-o"])
        .arg(&archive)
        .arg(COMMIT_0_1_0)
        .output()
        .expect("run git archive");
    assert!(
        output.status.success(),
        "git archive {COMMIT_0_1_0} failed (the repository needs its history: a full clone, not a shallow one): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let status = Command::new("tar")
        .arg("-x")
        .arg("-f")
        .arg(&archive)
        .arg("-C")
        .arg(&source)
        .status()
        .expect("run tar");
    assert!(status.success(), "unpacking commit {COMMIT_0_1_0} failed");
    eprintln!(
        "building pg_jobs 0.1.0 from commit {COMMIT_0_1_0} into {} (once; several minutes)",
        cache.display()
    );
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .current_dir(&source)
        .args([
            "pgrx",
            "package",
            "--debug",
            "--no-default-features",
            "--features",
        ])
        .arg(format!("pg{major}"))
        .arg("--pg-config")
        .arg(pg_bin().join("pg_config"))
        .arg("--out-dir")
        .arg(out)
        .env("CARGO_TARGET_DIR", cache.join("target"))
        .output()
        .expect("run cargo pgrx package");
    assert!(
        output.status.success(),
        "building pg_jobs 0.1.0 failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    eprintln!(
        "built pg_jobs 0.1.0 in {:.1} minutes",
        started.elapsed().as_secs_f64() / 60.0
    );
}

fn find_file(dir: &Path, name: &str) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if let Some(found) = find_file(&path, name) {
                return Some(found);
            }
        } else if path.file_name().is_some_and(|n| n == name) {
            return Some(path);
        }
    }
    None
}

/// A private copy of the PostgreSQL installation the tests run (its binaries, libraries and
/// shared files, in the same places relative to each other, so the copied server finds its
/// own), without pg_jobs: a version of pg_jobs can be installed into it and replaced by
/// another without touching the installation other tests and servers use.
pub struct Tree {
    /// The binaries (`postgres`, `pg_ctl`, ...).
    pub bin: PathBuf,
    /// Where libraries go (`pg_config --pkglibdir`).
    pub lib: PathBuf,
    /// Where extension control and script files go.
    pub extension: PathBuf,
}

impl Tree {
    /// Copies the installation into `root` (which must not exist yet).
    pub fn copy_into(root: &Path) -> Tree {
        let bin = pg_config_dir("--bindir");
        let lib = pg_config_dir("--pkglibdir");
        let share = pg_config_dir("--sharedir");
        let base = common_ancestor(&[&bin, &lib, &share]);
        let inside = |dir: &Path| root.join(dir.strip_prefix(&base).expect("under the ancestor"));
        for dir in [&bin, &lib, &share] {
            let target = inside(dir);
            std::fs::create_dir_all(target.parent().expect("a parent")).expect("create the tree");
            let status = Command::new("cp")
                .arg("-a")
                .arg(dir)
                .arg(&target)
                .status()
                .expect("run cp");
            assert!(status.success(), "copying {} failed", dir.display());
        }
        let tree = Tree {
            bin: inside(&bin),
            lib: inside(&lib),
            extension: inside(&share).join("extension"),
        };
        tree.remove_pg_jobs();
        tree
    }

    fn remove_pg_jobs(&self) {
        let _ = std::fs::remove_file(self.lib.join("pg_jobs.so"));
        for entry in std::fs::read_dir(&self.extension)
            .expect("read the extension directory")
            .flatten()
        {
            if entry.file_name().to_string_lossy().starts_with("pg_jobs") {
                std::fs::remove_file(entry.path()).expect("remove an old pg_jobs file");
            }
        }
    }

    /// Installs a released package, with `install_script` as its install script.
    pub fn install_release(&self, package: &Package, install_script: &Path) {
        self.remove_pg_jobs();
        copy(&package.library, &self.lib.join("pg_jobs.so"));
        copy(&package.control, &self.extension.join("pg_jobs.control"));
        copy(
            install_script,
            &self
                .extension
                .join(install_script.file_name().expect("a file name")),
        );
    }

    /// Installs the current package: the files `cargo pgrx install` put into the installation
    /// the tests run (its library, control file, install and upgrade scripts), replacing
    /// whatever version was here.
    pub fn install_current(&self) {
        self.remove_pg_jobs();
        let lib = pg_config_dir("--pkglibdir");
        let extension = pg_config_dir("--sharedir").join("extension");
        copy(&lib.join("pg_jobs.so"), &self.lib.join("pg_jobs.so"));
        for entry in std::fs::read_dir(&extension)
            .expect("read the extension directory")
            .flatten()
        {
            if entry.file_name().to_string_lossy().starts_with("pg_jobs") {
                copy(&entry.path(), &self.extension.join(entry.file_name()));
            }
        }
    }
}

fn copy(from: &Path, to: &Path) {
    std::fs::copy(from, to)
        .unwrap_or_else(|e| panic!("copy {} to {}: {e}", from.display(), to.display()));
}

fn common_ancestor(paths: &[&Path]) -> PathBuf {
    let mut ancestor: Vec<Component> = paths[0].components().collect();
    for path in &paths[1..] {
        let shared = ancestor
            .iter()
            .zip(path.components())
            .take_while(|(a, b)| **a == *b)
            .count();
        ancestor.truncate(shared);
    }
    ancestor.iter().collect()
}
