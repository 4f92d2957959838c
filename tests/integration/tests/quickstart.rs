//! The quickstart (`docs/src/getting-started/quickstart.md`) prints what it says it prints: its
//! SQL blocks run in order in one psql session against a fresh cluster with pg_jobs, the way a
//! reader pastes them, and each `text` block that follows an SQL block is what psql printed for
//! it. An SQL block with no `text` block after it must print nothing.
//!
//! Only what truly varies from run to run is masked, on both sides: lease tokens (uuids),
//! timestamps, intervals with fractions of a second (`run_at - now()`), psql's `Time:` lines,
//! the ages in seconds of Prometheus lines and the count of the worker's ticks. Column widths follow the values, so runs of spaces
//! and of `-` compare as one. Ids are not masked: a fresh database numbers jobs from 1.

use std::io::Write;
use std::process::Stdio;

use pg_jobs_tests::markdown::{self, Item};
use pg_jobs_tests::{pg_bin, pg_command_in, Cluster, TEST_SETTINGS};

/// The page, relative to the book's source.
const PAGE: &str = "getting-started/quickstart.md";

/// One SQL block of the page, and the output the page shows for it.
struct Step {
    line: usize,
    sql: String,
    /// The `text` block right after the SQL block; `None` when there is none.
    output: Option<String>,
}

fn steps(page: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut last_code_was_sql = false;
    for item in markdown::parse(page) {
        let Item::Code { info, text, line } = item else {
            continue;
        };
        match info.as_str() {
            "sql" => {
                steps.push(Step {
                    line,
                    sql: text,
                    output: None,
                });
                last_code_was_sql = true;
            }
            "text" if last_code_was_sql => {
                steps.last_mut().expect("an SQL block before").output = Some(text);
                last_code_was_sql = false;
            }
            _ => last_code_was_sql = false,
        }
    }
    steps
}

/// The length of the match of `shape` at the start of `text`: `d` a digit, `h` a hex digit,
/// any other character itself.
fn shape_at(text: &[u8], shape: &str) -> Option<usize> {
    if text.len() < shape.len() {
        return None;
    }
    shape
        .bytes()
        .zip(text)
        .all(|(s, &c)| match s {
            b'd' => c.is_ascii_digit(),
            b'h' => c.is_ascii_hexdigit() && !c.is_ascii_uppercase(),
            _ => s == c,
        })
        .then_some(shape.len())
}

/// The length of a run of digits after a `.` at the start of `text` (`.504106`), or 0.
fn fraction_at(text: &[u8]) -> usize {
    if text.first() != Some(&b'.') {
        return 0;
    }
    let digits = text[1..].iter().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 {
        0
    } else {
        1 + digits
    }
}

/// `line` with uuids, timestamps (with their fraction and zone) and intervals with fractions of
/// a second replaced by placeholders.
fn mask_values(line: &str) -> String {
    let bytes = line.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    while i < bytes.len() {
        let rest = &bytes[i..];
        let boundary = i == 0 || !bytes[i - 1].is_ascii_alphanumeric();
        if boundary {
            if let Some(n) = shape_at(rest, "hhhhhhhh-hhhh-hhhh-hhhh-hhhhhhhhhhhh") {
                out.push_str("<uuid>");
                i += n;
                continue;
            }
            let date = shape_at(rest, "dddd-dd-dd dd:dd:dd")
                .or_else(|| shape_at(rest, "dddd-dd-ddTdd:dd:dd"));
            if let Some(n) = date {
                let mut end = i + n;
                end += fraction_at(&bytes[end..]);
                let zone = &bytes[end..];
                if let Some(n) = shape_at(zone, "+dd:dd").or_else(|| shape_at(zone, "-dd:dd")) {
                    end += n;
                } else if let Some(n) = shape_at(zone, "+dd").or_else(|| shape_at(zone, "-dd")) {
                    end += n;
                } else if zone.first() == Some(&b'Z') {
                    end += 1;
                }
                out.push_str("<timestamp>");
                i = end;
                continue;
            }
            if let Some(n) = shape_at(rest, "dd:dd:dd") {
                let fraction = fraction_at(&rest[n..]);
                if fraction > 0 {
                    out.push_str("<interval>");
                    i += n + fraction;
                    continue;
                }
            }
        }
        let c = line[i..].chars().next().expect("a character");
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// One line of psql's output as it is compared: values that vary masked, runs of spaces and of
/// `-` (which follow the widths of the values) shortened, trailing spaces dropped.
fn normalize(line: &str) -> String {
    if line.starts_with("Time: ") {
        return "Time: <elapsed>".to_owned();
    }
    let mut line = mask_values(line);
    if line.trim_start().starts_with("pg_jobs_") && line.contains("_age_seconds") {
        if let Some((metric, _value)) = line.rsplit_once(' ') {
            line = format!("{metric} <seconds>");
        }
    }
    // The worker's ticks: as many as seconds the reader took (a tick a second).
    if line.trim_start().starts_with("pg_jobs_worker_ticks_total{") {
        if let Some((metric, _value)) = line.rsplit_once(' ') {
            line = format!("{metric} <ticks>");
        }
    }
    let mut out = String::new();
    let mut previous = '\0';
    for c in line.chars() {
        if (c == ' ' || c == '-') && c == previous {
            continue;
        }
        out.push(c);
        previous = c;
    }
    out.trim_end().to_owned()
}

/// An output as compared: its lines normalized, without blank lines at either end.
fn normalized(output: &str) -> Vec<String> {
    let lines: Vec<String> = output.lines().map(normalize).collect();
    let start = lines
        .iter()
        .position(|l| !l.is_empty())
        .unwrap_or(lines.len());
    let end = lines
        .iter()
        .rposition(|l| !l.is_empty())
        .map_or(start, |e| e + 1);
    lines[start..end].to_vec()
}

/// The marker psql echoes before the output of step `i`.
fn marker(i: usize) -> String {
    format!("@@ quickstart step {i} @@")
}

/// Runs `script` in one psql session in database `postgres` of `cluster`, as a reader pastes
/// it, and returns what psql printed; panics when a statement fails, or warns unless
/// `warnings` allows it.
fn psql(cluster: &Cluster, script: &str, warnings: bool) -> String {
    let mut psql = pg_command_in(&pg_bin(), "psql");
    psql.args([
        "-X",
        "-v",
        "ON_ERROR_STOP=1",
        "-h",
        "localhost",
        "-U",
        "postgres",
    ])
    .args(["-p", &cluster.port.to_string(), "-d", "postgres", "-f", "-"])
    // What psql prints must not depend on the machine's locale or a pager.
    .env("LC_ALL", "C")
    .env("PAGER", "")
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = psql.spawn().expect("start psql");
    child
        .stdin
        .take()
        .expect("psql's stdin")
        .write_all(script.as_bytes())
        .expect("write the script to psql");
    let output = child.wait_with_output().expect("run psql");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Warnings (CREATE EXTENSION's, in a database no worker serves) go to stderr; where they
    // are allowed, anything else there is a failure.
    let unexpected: Vec<&str> = stderr
        .lines()
        .filter(|line| {
            !line.trim().is_empty()
                && !(warnings
                    && (line.contains("WARNING:")
                        || line.starts_with("DETAIL:")
                        || line.starts_with("HINT:")))
        })
        .collect();
    assert!(
        output.status.success() && unexpected.is_empty(),
        "the SQL failed in psql ({}):\n{stderr}\nstdout:\n{stdout}",
        output.status
    );
    stdout
}

/// The settings `scripts/up` writes into the `pg_jobs.conf` of its cluster that say what runs:
/// `shared_preload_libraries` and the `pg_jobs.*` lines (the quickstart's database among those
/// the worker serves, say), as the lines of its here-document.
fn scripts_up_settings() -> Vec<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/up");
    let script =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let conf = script
        .split_once("<<CONF\n")
        .and_then(|(_, rest)| rest.split_once("\nCONF\n"))
        .map(|(conf, _)| conf)
        .expect("scripts/up writes pg_jobs.conf from a here-document ending at CONF");
    let settings: Vec<String> = conf
        .lines()
        .map(str::trim)
        .filter(|line| line.starts_with("shared_preload_libraries") || line.starts_with("pg_jobs."))
        .map(str::to_owned)
        .collect();
    assert!(
        settings.iter().any(|l| l.starts_with("pg_jobs.databases")),
        "scripts/up sets pg_jobs.databases: {settings:?}"
    );
    settings
}

/// A cluster named `name`, set up as `scripts/up` sets its cluster up (the test settings, with
/// what `scripts/up` writes in place of theirs), with the extension in database `postgres`.
fn as_scripts_up_sets_it_up(name: &str) -> Cluster {
    let up = scripts_up_settings();
    let key = |line: &str| line.split('=').next().unwrap_or_default().trim().to_owned();
    let mut settings: Vec<&str> = TEST_SETTINGS
        .iter()
        .copied()
        .filter(|line| up.iter().all(|u| key(u) != key(line)))
        .collect();
    settings.extend(up.iter().map(String::as_str));
    Cluster::start_with_extension(name, &settings)
}

/// Runs the steps in one psql session; returns what psql printed for each step.
fn run(cluster: &Cluster, steps: &[Step]) -> Vec<String> {
    let mut script = String::new();
    for (i, step) in steps.iter().enumerate() {
        script.push_str(&format!("\\echo '{}'\n", marker(i)));
        script.push_str(&step.sql);
        script.push('\n');
    }
    // The quickstart's database is served (scripts/up names it): its CREATE EXTENSION warns
    // of nothing, and neither does anything else.
    let stdout = psql(cluster, &script, false);
    let mut outputs = Vec::new();
    for (i, _) in steps.iter().enumerate() {
        let start = stdout
            .find(&format!("{}\n", marker(i)))
            .unwrap_or_else(|| panic!("psql printed no marker for step {i}:\n{stdout}"))
            + marker(i).len()
            + 1;
        let end = stdout.find(&marker(i + 1)).unwrap_or(stdout.len());
        outputs.push(stdout[start..end].to_owned());
    }
    outputs
}

#[test]
fn the_quickstart_prints_what_it_shows() {
    let path = markdown::book_source().join(PAGE);
    let page =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let steps = steps(&page);
    assert!(steps.len() >= 10, "the quickstart has its steps");
    let outputs = run(&as_scripts_up_sets_it_up("quickstart"), &steps);
    let mut differences = Vec::new();
    for (step, printed) in steps.iter().zip(&outputs) {
        let shown = step.output.as_deref().unwrap_or("");
        if normalized(shown) != normalized(printed) {
            differences.push(format!(
                "docs/src/{PAGE}:{}: the SQL block\n{}\nprinted\n```text\n{}\n```\nbut the page shows {}",
                step.line,
                step.sql,
                printed.trim_matches('\n'),
                match &step.output {
                    Some(text) => format!("\n```text\n{text}\n```"),
                    None => "no output (add a text block after the SQL block)".to_owned(),
                }
            ));
        }
    }
    assert!(
        differences.is_empty(),
        "the quickstart does not show what psql prints ({} of {} steps):\n\n{}",
        differences.len(),
        steps.len(),
        differences.join("\n\n")
    );
}

/// `scripts/up`'s cluster serves both databases people use: `postgres` (the README's example,
/// `scripts/up`'s own `CREATE EXTENSION`) and `quickstart`, which the quickstart creates after
/// the server started. A worker serves each (a pid, ticks with the extension found), and
/// `CREATE EXTENSION` in the later one warns of nothing.
#[test]
fn scripts_up_serves_postgres_and_the_quickstart_database() {
    let cluster = as_scripts_up_sets_it_up("scripts-up-databases");
    let mut postgres = cluster.connect();
    postgres
        .batch_execute("CREATE DATABASE quickstart")
        .unwrap();
    let warned = cluster.warnings_of("quickstart", "CREATE EXTENSION pg_jobs");
    assert!(
        warned.is_empty(),
        "CREATE EXTENSION in database quickstart warned: {warned:?}"
    );
    for database in ["postgres", "quickstart"] {
        pg_jobs_tests::wait_until(
            std::time::Duration::from_secs(30),
            &format!("a worker serving database {database}"),
            || {
                postgres
                    .query_opt(
                        "SELECT 1 FROM jobs_worker_status()
                          WHERE database = $1 AND pid IS NOT NULL AND serving AND ticks > 0",
                        &[&database],
                    )
                    .unwrap()
                    .is_some()
            },
        );
    }
}

/// The README's ten-line example runs as it is written, in a database of its own, and
/// completes the job it enqueued.
#[test]
fn the_readme_example_runs() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let readme =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let example = markdown::parse(&readme)
        .into_iter()
        .find_map(|item| match item {
            Item::Code { info, text, .. } if info == "sql" => Some(text),
            _ => None,
        })
        .expect("README.md has an sql block");
    let printed = psql(
        Cluster::shared(),
        &format!("CREATE DATABASE readme_example;\n\\c readme_example\n{example}\n"),
        // A database no worker serves: CREATE EXTENSION warns.
        true,
    );
    let outcome = printed
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty() && !l.starts_with('('));
    assert_eq!(
        outcome.map(str::trim),
        Some("succeeded"),
        "the README's example ends with the job completed:\n{printed}"
    );
}

/// The masks hide only what varies: a uuid, a timestamp, an interval with a fraction and an
/// age in seconds, not ids, counts or states.
#[test]
fn masks_hide_only_what_varies() {
    assert_eq!(
        normalize(" 5 | alert | 1 | 1a4c53a8-30c9-4789-9517-2ddd81115e02"),
        " 5 | alert | 1 | <uuid>"
    );
    assert_eq!(
        normalize(
            r#" queued |       1 | 00:00:02.089436 | [{"at": "2026-11-30T06:44:37.504106+00:00", "error": "smtp timeout"}]"#
        ),
        r#" queued | 1 | <interval> | [{"at": "<timestamp>", "error": "smtp timeout"}]"#
    );
    assert_eq!(normalize("----+-----------"), "-+-");
    assert_eq!(
        normalize(r#"pg_jobs_oldest_ready_age_seconds{queue="emails"} 41.2"#),
        r#"pg_jobs_oldest_ready_age_seconds{queue="emails"} <seconds>"#
    );
    assert_eq!(
        normalize(r#"pg_jobs_worker_ticks_total{database="quickstart"} 41"#),
        r#"pg_jobs_worker_ticks_total{database="quickstart"} <ticks>"#
    );
    assert_ne!(
        normalize(r#"pg_jobs_worker_reclaimed_total{database="quickstart"} 0"#),
        normalize(r#"pg_jobs_worker_reclaimed_total{database="quickstart"} 1"#)
    );
    assert_ne!(normalize(" 6 | succeeded"), normalize(" 7 | succeeded"));
    assert_ne!(normalize(" 00:01:00 |"), normalize(" 00:02:00 |"));
}
