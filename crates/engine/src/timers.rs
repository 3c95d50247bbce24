//! Timers in event time: idle windows, maximum runtimes, approval expiry, deferral release.
//!
//! A timer fires when event time passes it, on a `clock.tick` or any later event; never from the wall
//! clock (only `serve`'s ticker turns wall time into ticks). Timers are not cancelled: whoever handles a
//! timer checks that the condition it was set for still holds, which keeps cancellation bugs out and the
//! queue a plain binary heap. Ties fire in the order the timers were set.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
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
    heap: BinaryHeap<Reverse<Timer>>,
    next_seq: u64,
}

impl TimerQueue {
    /// Sets a timer.
    pub fn set(&mut self, at: Timestamp, job_id: Arc<str>, kind: TimerKind) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Reverse(Timer { at, seq, job_id, kind }));
    }

    /// Removes and returns the earliest timer due at or before `now`.
    pub fn pop_due(&mut self, now: Timestamp) -> Option<Timer> {
        if self.heap.peek().is_some_and(|Reverse(t)| t.at <= now) { self.heap.pop().map(|Reverse(t)| t) } else { None }
    }

    /// When the next timer is due.
    pub fn next_due(&self) -> Option<Timestamp> {
        self.heap.peek().map(|Reverse(t)| t.at)
    }

    /// Pending timers.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when no timer is pending.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// All pending timers in firing order, for persistence.
    pub fn to_vec(&self) -> Vec<Timer> {
        let mut v: Vec<Timer> = self.heap.iter().map(|Reverse(t)| t.clone()).collect();
        v.sort();
        v
    }

    /// Rebuilds a queue from persisted timers.
    pub fn from_vec(timers: Vec<Timer>) -> TimerQueue {
        let next_seq = timers.iter().map(|t| t.seq + 1).max().unwrap_or(0);
        TimerQueue { heap: timers.into_iter().map(Reverse).collect(), next_seq }
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
}
