//! Timers in event time: idle windows, maximum runtimes, approval expiry, deferral release.
//!
//! A timer fires when event time passes it, on a `clock.tick` or any later event; never from the wall
//! clock (only `serve`'s ticker turns wall time into ticks). Timers are not cancelled: whoever handles a
//! timer checks that the condition it was set for still holds, which keeps cancellation bugs out and the
//! queue simple. Ties fire in the order the timers were set.
//!
//! Most timers are set at a fixed distance from the event that sets them (a finished job is forgotten
//! 24 h after its end, an approval lapses 24 h after its request), so they arrive nearly in the order
//! they fall due. A timer due no earlier than the last one queued goes to the back of a FIFO, in O(1);
//! any other goes into a binary heap; the earlier of the two heads fires first. Both hold their timers
//! in (due time, setting order), so the firing order is exactly that of one heap.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;

use bursar_model::Timestamp;
use serde::{Deserialize, Serialize};

/// What a timer is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TimerKind {
    /// A policy's own timer: call its `on_timer` with `tag`.
    Policy {
        /// The policy id (looked up in the policy set in force when it fires).
        policy: Arc<str>,
        /// The policy's tag.
        tag: u32,
    },
    /// A pending approval lapses.
    ApprovalExpiry,
    /// A deferred job may start.
    DeferRelease,
    /// A finished job's record can be dropped.
    Forget,
    /// The scheduler had until now to confirm it created the admitted job
    /// ([`bursar_model::JobSpec::confirm_within_s`]).
    ConfirmDeadline,
    /// An admitted job that has not started by now has its reservation released as stale
    /// ([`crate::EngineConfig::stale_after`]).
    StaleReservation,
}

/// One timer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timer {
    /// When it is due.
    pub at: Timestamp,
    /// Order of setting, to break ties deterministically.
    pub seq: u64,
    /// The job.
    pub job_id: Arc<str>,
    /// What for.
    pub kind: TimerKind,
}

impl Ord for Timer {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

impl PartialOrd for Timer {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The queue of pending timers.
#[derive(Debug, Clone, Default)]
pub struct TimerQueue {
    /// Timers set in the order they fall due, each due no earlier than the one before it.
    fifo: VecDeque<Timer>,
    /// The others.
    heap: BinaryHeap<Reverse<Timer>>,
    next_seq: u64,
}

impl TimerQueue {
    /// Sets a timer.
    pub fn set(&mut self, at: Timestamp, job_id: Arc<str>, kind: TimerKind) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let timer = Timer { at, seq, job_id, kind };
        if self.fifo.back().is_none_or(|last| last.at <= at) {
            self.fifo.push_back(timer);
        } else {
            self.heap.push(Reverse(timer));
        }
    }

    /// The earlier head: true for the FIFO's, false for the heap's, `None` when both are empty.
    fn first(&self) -> Option<(bool, &Timer)> {
        match (self.fifo.front(), self.heap.peek()) {
            (Some(f), Some(Reverse(h))) => Some(if f <= h { (true, f) } else { (false, h) }),
            (Some(f), None) => Some((true, f)),
            (None, Some(Reverse(h))) => Some((false, h)),
            (None, None) => None,
        }
    }

    /// Removes and returns the earliest timer due at or before `now`.
    pub fn pop_due(&mut self, now: Timestamp) -> Option<Timer> {
        match self.first() {
            Some((true, t)) if t.at <= now => self.fifo.pop_front(),
            Some((false, t)) if t.at <= now => self.heap.pop().map(|Reverse(t)| t),
            _ => None,
        }
    }

    /// When the next timer is due.
    pub fn next_due(&self) -> Option<Timestamp> {
        self.first().map(|(_, t)| t.at)
    }

    /// Pending timers.
    pub fn len(&self) -> usize {
        self.fifo.len() + self.heap.len()
    }

    /// True when no timer is pending.
    pub fn is_empty(&self) -> bool {
        self.fifo.is_empty() && self.heap.is_empty()
    }

    /// All pending timers in firing order, for persistence.
    pub fn to_vec(&self) -> Vec<Timer> {
        let mut v: Vec<Timer> = self.fifo.iter().cloned().chain(self.heap.iter().map(|Reverse(t)| t.clone())).collect();
        v.sort();
        v
    }

    /// Rebuilds a queue from persisted timers.
    pub fn from_vec(mut timers: Vec<Timer>) -> TimerQueue {
        let next_seq = timers.iter().map(|t| t.seq + 1).max().unwrap_or(0);
        // In firing order they are one run: all in the FIFO.
        timers.sort();
        TimerQueue { fifo: timers.into(), heap: BinaryHeap::new(), next_seq }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_in_time_then_setting_order() {
        let mut q = TimerQueue::default();
        let j: Arc<str> = Arc::from("j");
        q.set(Timestamp(30), j.clone(), TimerKind::Forget);
        q.set(Timestamp(10), j.clone(), TimerKind::DeferRelease);
        q.set(Timestamp(10), j.clone(), TimerKind::ApprovalExpiry);
        assert!(q.pop_due(Timestamp(5)).is_none());
        assert_eq!(q.pop_due(Timestamp(10)).unwrap().kind, TimerKind::DeferRelease);
        assert_eq!(q.pop_due(Timestamp(10)).unwrap().kind, TimerKind::ApprovalExpiry);
        assert!(q.pop_due(Timestamp(29)).is_none());
        let back = TimerQueue::from_vec(q.to_vec());
        assert_eq!(back.next_due(), Some(Timestamp(30)));
    }

    proptest::proptest! {
        /// Any sequence of sets and pops fires in the order one binary heap of (due, seq) gives, and a
        /// queue persisted and rebuilt at any point goes on the same way.
        #[test]
        fn fires_in_the_order_of_one_heap(
            ops in proptest::collection::vec((0i64..200, proptest::prelude::any::<bool>(), 0u8..4), 1..300)
        ) {
            // Each timer is named by its job id; seqs may restart after a rebuild (`from_vec` numbers
            // on from the timers it is given), so timers are compared by due time and name.
            let (mut q, mut reference) = (TimerQueue::default(), BinaryHeap::new());
            let (mut now, mut set) = (0i64, 0u64);
            for (delta, pop, persist) in ops {
                if pop {
                    now += delta / 4;
                    loop {
                        let want = if reference.peek().is_some_and(|Reverse(t): &Reverse<Timer>| t.at.0 <= now) {
                            reference.pop().map(|Reverse(t)| t)
                        } else {
                            None
                        };
                        let got = q.pop_due(Timestamp(now));
                        let key = |t: &Option<Timer>| t.as_ref().map(|t| (t.at, t.job_id.clone()));
                        proptest::prop_assert_eq!(key(&got), key(&want));
                        if got.is_none() {
                            break;
                        }
                    }
                } else {
                    let at = Timestamp(now + delta);
                    let j: Arc<str> = Arc::from(set.to_string().as_str());
                    q.set(at, j.clone(), TimerKind::Forget);
                    reference.push(Reverse(Timer { at, seq: set, job_id: j, kind: TimerKind::Forget }));
                    set += 1;
                }
                proptest::prop_assert_eq!(q.len(), reference.len());
                proptest::prop_assert_eq!(q.next_due(), reference.peek().map(|Reverse(t)| t.at));
                if persist == 0 {
                    q = TimerQueue::from_vec(q.to_vec());
                }
            }
        }
    }
}
