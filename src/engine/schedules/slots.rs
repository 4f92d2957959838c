//! The slots of a schedule: which instants a cron expression (or an `'N seconds'` interval)
//! names in a time zone, computed the same way for `jobs_cron_next` and for the background
//! worker.
//!
//! Cron fields are matched by croner against wall-clock times (civil date and time, no zone);
//! the time zone then maps each matching wall-clock time to one instant, so that every slot
//! runs once (README "Schedules", DST):
//!
//! * a wall-clock time that occurs once is that instant;
//! * one that occurs twice (the hour repeated when the clocks go back) is its first occurrence;
//! * one that does not occur (the hour skipped when the clocks go forward) is the first instant
//!   after the gap, as Vixie cron runs it.
//!
//! This mapping never decreases as wall-clock time grows, so "the first slot after an instant"
//! is the instant of the first matching wall-clock time whose instant lies after it; slots
//! that map to the same instant (several skipped ones, or a skipped one and the one at the end
//! of the gap) are one slot. The interval form names every multiple of N seconds since the
//! Unix epoch, whatever the zone.
//!
//! Times are PostgreSQL timestamptz values: microseconds since 2000-01-01 00:00 UTC.

use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;
use jiff::civil::DateTime;
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{SignedDuration, Timestamp};

/// Microseconds between the Unix epoch and the PostgreSQL epoch (2000-01-01 00:00 UTC).
const PG_EPOCH_UNIX_MICROS: i64 = 946_684_800_000_000;
/// One second in microseconds.
const SECOND: i64 = 1_000_000;
/// Longest interval of the `'N seconds'` form.
pub const MAX_INTERVAL_SECONDS: u32 = 59;
/// Steps a search may take to step over slots that a fold or a gap maps to instants it has
/// already passed; far more than the 3,600 seconds of a repeated hour of a per-second pattern.
const MAX_STEPS: usize = 10_000;

/// The field names of a cron expression, seconds first (used only by the six-field form).
const FIELD_NAMES: [&str; 6] = [
    "second",
    "minute",
    "hour",
    "day-of-month",
    "month",
    "day-of-week",
];

/// A parsed schedule expression.
#[derive(Clone)]
pub enum Spec {
    /// `'N seconds'`: every multiple of N seconds since the Unix epoch.
    Every(u32),
    /// A cron expression, matched against wall-clock times.
    Cron(Box<Cron>),
}

/// The five-field expression a macro stands for.
fn macro_expansion(text: &str) -> Option<&'static str> {
    match text.to_ascii_lowercase().as_str() {
        "@yearly" | "@annually" => Some("0 0 1 1 *"),
        "@monthly" => Some("0 0 1 * *"),
        "@weekly" => Some("0 0 * * 0"),
        "@daily" | "@midnight" => Some("0 0 * * *"),
        "@hourly" => Some("0 * * * *"),
        _ => None,
    }
}

/// The N of an `'N seconds'` expression, if `text` has that form (the number unchecked).
fn interval_form(text: &str) -> Option<&str> {
    let lower = text.trim();
    let (number, unit) = lower.split_at(lower.find(|c: char| !c.is_ascii_digit())?);
    let unit = unit.trim().to_ascii_lowercase();
    (!number.is_empty() && (unit == "seconds" || unit == "second")).then_some(number)
}

fn cron_parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
}

/// Parses a schedule expression, or says what is wrong with it and where, in a sentence that
/// names the argument `cron`.
pub fn parse(text: &str) -> Result<Spec, String> {
    let trimmed = text.trim();
    if let Some(number) = interval_form(trimmed) {
        return match number.parse::<u32>() {
            Ok(n) if (1..=MAX_INTERVAL_SECONDS).contains(&n) => Ok(Spec::Every(n)),
            _ => Err(format!(
                "cron as an interval must be 1 to {MAX_INTERVAL_SECONDS} seconds ('N seconds'), got '{text}'; use a cron expression for longer periods, such as '*/5 * * * *' for every 5 minutes"
            )),
        };
    }
    let expanded = if trimmed.starts_with('@') {
        macro_expansion(trimmed).ok_or_else(|| {
            format!(
                "cron macro '{trimmed}' is unknown: the macros are @yearly (or @annually), @monthly, @weekly, @daily (or @midnight) and @hourly"
            )
        })?
    } else {
        trimmed
    };
    let fields: Vec<&str> = expanded.split_whitespace().collect();
    if fields.len() != 5 && fields.len() != 6 {
        return Err(format!(
            "cron must have five fields (minute hour day-of-month month day-of-week), six with seconds first, be a macro such as @daily, or an interval 'N seconds'; got {} field{} in '{text}'",
            fields.len(),
            if fields.len() == 1 { "" } else { "s" }
        ));
    }
    let parser = cron_parser();
    let cron = match parser.parse(expanded) {
        Ok(cron) => cron,
        Err(error) => return Err(field_error(&parser, &fields, text, &error.to_string())),
    };
    // A pattern no date satisfies (February 30th) would leave a schedule that never runs.
    let probe = DateTime::constant(2000, 1, 1, 0, 0, 0, 0);
    if cron.find_next_occurrence(&probe, true).is_err() {
        return Err(format!(
            "cron '{text}' never matches a time: no date satisfies its day-of-month, month and day-of-week fields together"
        ));
    }
    Ok(Spec::Cron(Box::new(cron)))
}

/// The error for an expression croner refused, naming the field at fault: the first field
/// that, replaced by `*`, makes the expression parse.
fn field_error(parser: &CronParser, fields: &[&str], text: &str, detail: &str) -> String {
    let offset = 6 - fields.len();
    for index in 0..fields.len() {
        let mut probe: Vec<&str> = fields.to_vec();
        probe[index] = "*";
        if parser.parse(&probe.join(" ")).is_ok() {
            return format!(
                "cron '{text}' has an invalid {} field '{}' (field {} of {}): {detail}",
                FIELD_NAMES[index + offset],
                fields[index],
                index + 1,
                fields.len()
            );
        }
    }
    format!("cron '{text}' is not a valid cron expression: {detail}")
}

/// Looks up an IANA time zone (such as `Europe/London`) in the system's time zone database,
/// the one PostgreSQL itself reads on Debian (`--with-system-tzdata`).
pub fn zone(name: &str) -> Result<TimeZone, String> {
    if name.eq_ignore_ascii_case("UTC") {
        return Ok(TimeZone::UTC);
    }
    TimeZone::get(name).map_err(|_| {
        format!(
            "timezone '{name}' is not a known IANA time zone; pass a name such as 'UTC', 'Europe/London' or 'America/New_York' (SELECT name FROM pg_timezone_names lists them)"
        )
    })
}

/// A schedule's expression in its time zone: the slots it names.
#[derive(Clone)]
pub struct Slots {
    spec: Spec,
    zone: TimeZone,
}

/// Whether slots can be computed from `micros` on: cron's calendar starts at 0001-01-01 (UTC),
/// so an earlier time would answer the first slot of year 1, not the first after it.
pub fn computable_from(micros: i64) -> bool {
    to_timestamp(micros).is_some_and(|at| TimeZone::UTC.to_datetime(at).year() >= 1)
}

fn to_timestamp(micros: i64) -> Option<Timestamp> {
    Timestamp::from_microsecond(micros.checked_add(PG_EPOCH_UNIX_MICROS)?).ok()
}

fn to_micros(timestamp: Timestamp) -> Option<i64> {
    timestamp.as_microsecond().checked_sub(PG_EPOCH_UNIX_MICROS)
}

/// The wall-clock time `civil` cut to the whole second.
fn whole_second(civil: DateTime) -> DateTime {
    DateTime::new(
        civil.year(),
        civil.month(),
        civil.day(),
        civil.hour(),
        civil.minute(),
        civil.second(),
        0,
    )
    .expect("a valid date and time stays valid without its fraction")
}

impl Slots {
    /// The slots of `spec` in `zone`.
    pub fn new(spec: Spec, zone: TimeZone) -> Slots {
        Slots { spec, zone }
    }

    /// The one instant a wall-clock time runs at: itself, its first occurrence when it occurs
    /// twice, or the first instant after the gap when it does not occur.
    fn instant_of(&self, civil: DateTime) -> Option<Timestamp> {
        match self.zone.to_ambiguous_timestamp(civil).offset() {
            AmbiguousOffset::Unambiguous { offset } => offset.to_timestamp(civil).ok(),
            AmbiguousOffset::Fold { before, after } => {
                let (a, b) = (
                    before.to_timestamp(civil).ok()?,
                    after.to_timestamp(civil).ok()?,
                );
                Some(a.min(b))
            }
            AmbiguousOffset::Gap { after, .. } => {
                // Read with the later offset, a skipped time lies before the transition; the
                // first transition after that instant ends the gap.
                let inside = after.to_timestamp(civil).ok()?;
                Some(self.zone.following(inside).next()?.timestamp())
            }
        }
    }

    /// When `at` lies in the second pass of a repeated hour: the wall-clock time at which that
    /// hour ends (every wall-clock time before it ran in the first pass).
    fn end_of_second_pass(&self, at: Timestamp) -> Option<DateTime> {
        let civil = whole_second(self.zone.to_datetime(at));
        let AmbiguousOffset::Fold { before, after } =
            self.zone.to_ambiguous_timestamp(civil).offset()
        else {
            return None;
        };
        if self.zone.to_offset(at) != after {
            return None;
        }
        let just_after = at.checked_add(SignedDuration::from_nanos(1)).ok()?;
        let transition = self.zone.preceding(just_after).next()?.timestamp();
        Some(before.to_datetime(transition))
    }

    /// The first slot strictly after `after`, or `None` when there is none before year 5000.
    pub fn next_after(&self, after: i64) -> Option<i64> {
        match &self.spec {
            Spec::Every(seconds) => {
                let step = i64::from(*seconds) * SECOND;
                let unix = after.checked_add(PG_EPOCH_UNIX_MICROS)?;
                let next = unix.div_euclid(step).checked_add(1)?.checked_mul(step)?;
                next.checked_sub(PG_EPOCH_UNIX_MICROS)
            }
            Spec::Cron(cron) => {
                let at = to_timestamp(after)?;
                let civil = whole_second(self.zone.to_datetime(at));
                let mut start = civil.checked_add(SignedDuration::from_secs(1)).ok()?;
                if let Some(end) = self.end_of_second_pass(at) {
                    start = start.max(end);
                }
                for _ in 0..MAX_STEPS {
                    let wall = cron.find_next_occurrence(&start, true).ok()?;
                    let slot = to_micros(self.instant_of(wall)?)?;
                    if slot > after {
                        return Some(slot);
                    }
                    // Only reached through a gap whose instant is `after` itself.
                    start = wall.checked_add(SignedDuration::from_secs(1)).ok()?;
                }
                None
            }
        }
    }

    /// The last slot strictly before `before`, or `None` when there is none after year 1.
    pub fn previous_before(&self, before: i64) -> Option<i64> {
        match &self.spec {
            Spec::Every(seconds) => {
                let step = i64::from(*seconds) * SECOND;
                let unix = before.checked_add(PG_EPOCH_UNIX_MICROS)?;
                let previous = (unix.checked_sub(1)?).div_euclid(step).checked_mul(step)?;
                previous.checked_sub(PG_EPOCH_UNIX_MICROS)
            }
            Spec::Cron(cron) => {
                let at = to_timestamp(before)?;
                // Wall-clock times before `end` run before `before`: in the second pass of a
                // repeated hour, all of that hour ran in the first pass.
                let (mut end, mut inclusive) = match self.end_of_second_pass(at) {
                    Some(end) => (end, false),
                    None => {
                        let civil = self.zone.to_datetime(at);
                        (whole_second(civil), civil.subsec_nanosecond() != 0)
                    }
                };
                for _ in 0..MAX_STEPS {
                    let wall = cron.find_previous_occurrence(&end, inclusive).ok()?;
                    let slot = to_micros(self.instant_of(wall)?)?;
                    if slot < before {
                        return Some(slot);
                    }
                    // Only reached for skipped times whose instant (the end of the gap) is
                    // `before` itself.
                    end = wall;
                    inclusive = false;
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn micros(text: &str) -> i64 {
        to_micros(text.parse::<Timestamp>().unwrap()).unwrap()
    }

    fn slots(cron: &str, zone_name: &str) -> Slots {
        Slots::new(parse(cron).unwrap(), zone(zone_name).unwrap())
    }

    fn next(cron: &str, zone_name: &str, after: &str) -> String {
        let s = slots(cron, zone_name);
        to_timestamp(s.next_after(micros(after)).unwrap())
            .unwrap()
            .to_string()
    }

    #[test]
    fn spring_forward_runs_a_skipped_slot_once_at_the_end_of_the_gap() {
        // Europe/London, 2026-03-29: 01:00 GMT jumps to 02:00 BST (01:00 UTC).
        assert_eq!(
            next("30 1 * * *", "Europe/London", "2026-03-29T00:00:00Z"),
            "2026-03-29T01:00:00Z"
        );
        // Every quarter hour: the four skipped ones are the slot at the end of the gap.
        assert_eq!(
            next("*/15 * * * *", "Europe/London", "2026-03-29T00:45:00Z"),
            "2026-03-29T01:00:00Z"
        );
        assert_eq!(
            next("*/15 * * * *", "Europe/London", "2026-03-29T01:00:00Z"),
            "2026-03-29T01:15:00Z"
        );
    }

    #[test]
    fn fall_back_runs_a_repeated_slot_once_in_the_first_pass() {
        // Europe/London, 2026-10-25: 02:00 BST (01:00 UTC) goes back to 01:00 GMT.
        assert_eq!(
            next("30 1 * * *", "Europe/London", "2026-10-25T00:00:00Z"),
            "2026-10-25T00:30:00Z"
        );
        assert_eq!(
            next("30 1 * * *", "Europe/London", "2026-10-25T00:30:00Z"),
            "2026-10-26T01:30:00Z"
        );
        // In the second pass, the repeated hour's slots are behind us.
        assert_eq!(
            next("*/15 * * * *", "Europe/London", "2026-10-25T01:10:00Z"),
            "2026-10-25T02:00:00Z"
        );
    }

    #[test]
    fn previous_is_the_mirror_of_next() {
        let s = slots("*/15 * * * *", "Europe/London");
        for at in [
            "2026-10-25T01:10:00Z",
            "2026-10-25T02:00:00Z",
            "2026-03-29T01:00:00Z",
            "2026-03-29T01:00:00.000001Z",
            "2026-06-01T12:07:30.5Z",
        ] {
            let at = micros(at);
            let previous = s.previous_before(at).unwrap();
            assert!(previous < at);
            assert!(s.next_after(previous).unwrap() >= at);
        }
    }

    #[test]
    fn intervals_are_multiples_of_n_seconds() {
        let s = slots("7 seconds", "Europe/London");
        let after = micros("2026-01-01T00:00:00Z");
        let next = s.next_after(after).unwrap();
        assert_eq!((next + PG_EPOCH_UNIX_MICROS) % (7 * SECOND), 0);
        assert!(next > after && next - after <= 7 * SECOND);
        assert_eq!(s.previous_before(next + 1), Some(next));
        assert_eq!(s.previous_before(next), Some(next - 7 * SECOND));
    }

    #[test]
    fn bad_expressions_say_what_and_where() {
        let error = |text: &str| parse(text).err().unwrap();
        assert!(error("0 25 * * *").contains("hour field '25'"));
        assert!(error("* * * * mon-xyz").contains("day-of-week field"));
        assert!(error("1 2 3").contains("got 3 fields"));
        assert!(error("60 seconds").contains("1 to 59 seconds"));
        assert!(error("@reboot").contains("macro '@reboot' is unknown"));
        assert!(error("0 0 30 2 *").contains("never matches"));
        assert!(error("61 0 0 * * *").contains("second field '61'"));
        assert!(zone("Mars/Olympus_Mons").is_err());
    }
}
