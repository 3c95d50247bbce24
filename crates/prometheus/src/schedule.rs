//! When to poll: evaluation times aligned to the interval, and the catch-up after a restart.
//!
//! Evaluation times are the multiples of `interval` since the Unix epoch, so two instances, or one
//! restarted, query the same instants and make the same event ids. An evaluation time `t` is due
//! once the wall clock reaches `t + lag`. The caller keeps a *resume point*, the last evaluation
//! time whose poll succeeded; [`Schedule::due`] lists every evaluation time after it that is due
//! now, at most `max_backfill` of them back, so a restart neither skips nor repeats one.

use bursar_model::{Duration, Timestamp};

/// The evaluation times of one source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    interval: Duration,
    lag: Duration,
    max_backfill: Duration,
}

/// Evaluation times due now, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    /// The times to poll, ascending.
    pub times: Vec<Timestamp>,
    /// Evaluation times after the resume point but older than `max_backfill`, not polled.
    pub skipped: u64,
}

impl Schedule {
    /// A schedule; `interval` must be positive (a validated [`crate::Config`] guarantees it).
    pub fn new(interval: Duration, lag: Duration, max_backfill: Duration) -> Schedule {
        Schedule { interval: Duration(interval.millis().max(1)), lag, max_backfill }
    }

    /// The interval.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// `t` rounded down to an evaluation time.
    pub fn align(&self, t: Timestamp) -> Timestamp {
        let i = self.interval.millis();
        Timestamp(t.millis().div_euclid(i) * i)
    }

    /// The newest evaluation time due at wall time `now`.
    pub fn latest(&self, now: Timestamp) -> Timestamp {
        self.align(now.plus(Duration(-self.lag.millis())))
    }

    /// The evaluation time after `t`.
    pub fn next_after(&self, t: Timestamp) -> Timestamp {
        self.align(t).plus(self.interval)
    }

    /// The wall time at which the evaluation time after `latest(now)` falls due: when to wake up.
    pub fn next_wake(&self, now: Timestamp) -> Timestamp {
        self.next_after(self.latest(now)).plus(self.lag)
    }

    /// The evaluation times due at `now` after `resume` (exclusive): none polled yet gives only the
    /// latest; a resume point more than `max_backfill` back gives the times within it and counts the
    /// rest as skipped. A resume point in the future (a clock step back) gives nothing.
    pub fn due(&self, resume: Option<Timestamp>, now: Timestamp) -> Due {
        let latest = self.latest(now);
        let Some(resume) = resume else { return Due { times: vec![latest], skipped: 0 } };
        if resume >= latest {
            return Due { times: Vec::new(), skipped: 0 };
        }
        let i = self.interval.millis();
        let first = self.next_after(resume);
        let oldest = self.align(latest.plus(Duration(-self.max_backfill.millis())));
        let start = first.max(oldest);
        let skipped = u64::try_from((start.millis() - first.millis()) / i).unwrap_or(0);
        let count = usize::try_from((latest.millis() - start.millis()) / i + 1).unwrap_or(0);
        let times = (0..count).map(|k| Timestamp(start.millis() + k as i64 * i)).collect();
        Due { times, skipped }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        Timestamp::parse(s).unwrap()
    }

    fn sched() -> Schedule {
        Schedule::new(Duration::seconds(60), Duration::seconds(30), Duration::minutes(10))
    }

    #[test]
    fn evaluation_times_are_aligned_and_lagged() {
        let s = sched();
        assert_eq!(s.latest(t("2026-12-01T09:31:29Z")), t("2026-12-01T09:30:00Z"));
        assert_eq!(s.latest(t("2026-12-01T09:31:30Z")), t("2026-12-01T09:31:00Z"));
        assert_eq!(s.next_wake(t("2026-12-01T09:31:29Z")), t("2026-12-01T09:31:30Z"));
        assert_eq!(s.next_wake(t("2026-12-01T09:31:30Z")), t("2026-12-01T09:32:30Z"));
        assert_eq!(s.next_after(t("2026-12-01T09:31:17Z")), t("2026-12-01T09:32:00Z"));
    }

    #[test]
    fn two_instances_started_apart_poll_the_same_instants() {
        let s = sched();
        let a = s.due(None, t("2026-12-01T09:31:41.123Z")).times;
        let b = s.due(None, t("2026-12-01T09:32:05.900Z")).times;
        assert_eq!(a, b);
        assert_eq!(a, vec![t("2026-12-01T09:31:00Z")]);
    }

    #[test]
    fn a_restart_backfills_without_repeating() {
        let s = sched();
        let d = s.due(Some(t("2026-12-01T09:27:00Z")), t("2026-12-01T09:31:45Z"));
        assert_eq!(
            d.times,
            vec![
                t("2026-12-01T09:28:00Z"),
                t("2026-12-01T09:29:00Z"),
                t("2026-12-01T09:30:00Z"),
                t("2026-12-01T09:31:00Z")
            ]
        );
        assert_eq!(d.skipped, 0);
        assert_eq!(s.due(Some(t("2026-12-01T09:31:00Z")), t("2026-12-01T09:31:59Z")).times, vec![], "nothing new");
        assert_eq!(
            s.due(Some(t("2026-12-01T10:00:00Z")), t("2026-12-01T09:31:59Z")).times,
            vec![],
            "clock stepped back"
        );
    }

    #[test]
    fn a_long_outage_backfills_at_most_max_backfill() {
        let s = sched();
        let d = s.due(Some(t("2026-12-01T08:00:00Z")), t("2026-12-01T09:31:45Z"));
        assert_eq!(d.times.first(), Some(&t("2026-12-01T09:21:00Z")));
        assert_eq!(d.times.last(), Some(&t("2026-12-01T09:31:00Z")));
        assert_eq!(d.times.len(), 11);
        assert_eq!(d.skipped, 80, "08:01 .. 09:20");
        assert_eq!(
            d.times.len() as u64 + d.skipped,
            91,
            "every minute after the resume point is either polled or counted"
        );
    }
}
