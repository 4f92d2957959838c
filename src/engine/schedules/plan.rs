//! Which slots of a due schedule one run enqueues, and where the schedule goes on from.
//!
//! A schedule keeps the first slot it has not handled yet (`next_slot`). A run at `now` handles
//! every slot from there up to `now`: slots that came due while a worker was up are all
//! enqueued, in order (never one skipped, never one twice: the schedule's progress commits with
//! the jobs); slots that came due while no worker was running (the *missed* window, see
//! [`super::Downtime`]) follow the schedule's `catch_up`: `latest` enqueues the most recent
//! of them once, `none` none, `all` every one of them up to [`CATCH_UP_ALL`], the most recent
//! ones.

use super::slots::Slots;

/// Most missed slots `catch_up => 'all'` enqueues (the most recent ones).
pub const CATCH_UP_ALL: usize = 1_000;
/// Most on-time slots one run enqueues per schedule; the rest wait for the next run (a worker
/// that could not run for a long time while it was up catches up in steps of this size).
pub const ON_TIME_PER_RUN: usize = 1_000;

/// What to do with missed slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CatchUp {
    /// The most recent missed slot, once.
    Latest,
    /// None of them.
    None,
    /// Every one, up to [`CATCH_UP_ALL`].
    All,
}

impl CatchUp {
    /// The accepted names, for error messages.
    pub const NAMES: &'static str = "'latest', 'none' or 'all'";

    /// The mode named `name`.
    pub fn from_name(name: &str) -> Option<CatchUp> {
        match name {
            "latest" => Some(CatchUp::Latest),
            "none" => Some(CatchUp::None),
            "all" => Some(CatchUp::All),
            _ => None,
        }
    }
}

/// What one run does with one due schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The slots to enqueue, oldest first.
    pub slots: Vec<i64>,
    /// The first slot not handled by this run (`None`: the expression has no later slot).
    pub next_slot: Option<i64>,
}

/// The plan for a schedule whose first unhandled slot is `next` (due: `next <= now`), run at
/// `now`, where slots strictly between `missed.0` and `missed.1` came due while no worker ran.
pub fn plan(
    slots: &Slots,
    next: i64,
    now: i64,
    missed: Option<super::Downtime>,
    catch_up: CatchUp,
) -> Plan {
    let (missed_from, missed_until) = missed.unwrap_or((i64::MAX, i64::MAX));
    let mut fired = Vec::new();
    let mut cursor = Some(next);
    let mut on_time = 0;

    // On time: before the missed window, and (below) after it.
    let mut take_on_time = |cursor: &mut Option<i64>, fired: &mut Vec<i64>, limit: i64| -> bool {
        while let Some(slot) = *cursor {
            if slot > now || slot > limit {
                return true;
            }
            if on_time == ON_TIME_PER_RUN {
                return false;
            }
            fired.push(slot);
            on_time += 1;
            *cursor = slots.next_after(slot);
        }
        true
    };
    if !take_on_time(&mut cursor, &mut fired, missed_from) {
        return Plan {
            slots: fired,
            next_slot: cursor,
        };
    }

    // Missed: the slots in (missed_from, missed_until) up to now.
    if let Some(first_missed) = cursor.filter(|&slot| slot < missed_until && slot <= now) {
        // The window's slots are those before `end` (exclusive), from `first_missed` on.
        let end = missed_until.min(now.saturating_add(1));
        let take = match catch_up {
            CatchUp::None => 0,
            CatchUp::Latest => 1,
            CatchUp::All => CATCH_UP_ALL,
        };
        let mut recent = Vec::new();
        let mut before = end;
        while recent.len() < take {
            match slots.previous_before(before) {
                Some(slot) if slot >= first_missed => {
                    recent.push(slot);
                    before = slot;
                }
                _ => break,
            }
        }
        fired.extend(recent.into_iter().rev());
        cursor = slots.next_after(end - 1);
    }

    take_on_time(&mut cursor, &mut fired, i64::MAX);
    Plan {
        slots: fired,
        next_slot: cursor,
    }
}

#[cfg(test)]
mod tests {
    use super::super::slots::{parse, zone};
    use super::*;

    const S: i64 = 1_000_000;

    fn every_second() -> Slots {
        Slots::new(parse("1 seconds").unwrap(), zone("UTC").unwrap())
    }

    #[test]
    fn on_time_slots_all_run_in_order() {
        let plan = plan(&every_second(), 10 * S, 13 * S, None, CatchUp::None);
        assert_eq!(plan.slots, vec![10 * S, 11 * S, 12 * S, 13 * S]);
        assert_eq!(plan.next_slot, Some(14 * S));
    }

    #[test]
    fn missed_slots_follow_catch_up() {
        let slots = every_second();
        // Up until 12 s, down from then until 20 s; now 21.5 s.
        let missed = Some((12 * S, 20 * S));
        let latest = plan(&slots, 11 * S, 21 * S + S / 2, missed, CatchUp::Latest);
        assert_eq!(latest.slots, vec![11 * S, 12 * S, 19 * S, 20 * S, 21 * S]);
        let none = plan(&slots, 11 * S, 21 * S + S / 2, missed, CatchUp::None);
        assert_eq!(none.slots, vec![11 * S, 12 * S, 20 * S, 21 * S]);
        let all = plan(&slots, 11 * S, 21 * S + S / 2, missed, CatchUp::All);
        assert_eq!(all.slots, (11..=21).map(|s| s * S).collect::<Vec<_>>());
        assert_eq!(all.next_slot, Some(22 * S));
    }

    #[test]
    fn catch_up_all_keeps_the_most_recent_thousand() {
        let slots = every_second();
        let plan = plan(&slots, 0, 5_000 * S, Some((-S, 5_000 * S)), CatchUp::All);
        assert_eq!(plan.slots.len(), CATCH_UP_ALL + 1);
        assert_eq!(plan.slots[0], 4_000 * S);
        assert_eq!(*plan.slots.last().unwrap(), 5_000 * S);
    }

    #[test]
    fn a_long_backlog_of_on_time_slots_continues_next_run() {
        let slots = every_second();
        let first = plan(&slots, 0, 5_000 * S, None, CatchUp::Latest);
        assert_eq!(first.slots.len(), ON_TIME_PER_RUN);
        assert_eq!(first.next_slot, Some(ON_TIME_PER_RUN as i64 * S));
    }
}
