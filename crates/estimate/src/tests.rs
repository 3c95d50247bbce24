//! Table cases computed by hand: the scheduler's three backfill rules, the predictor's fallback,
//! and estimates from history against estimates from limits.

use super::*;
use crate::predict::RECENT;

const H: Millis = 3_600_000;

fn job(id: &str, user: &str, config: Option<&str>, gpus: u32, limit_h: i64) -> Job {
    Job { id: id.into(), user: user.into(), config: config.map(str::to_owned), gpus, limit: limit_h * H }
}

/// 8 GPUs; A runs 6 of them until 10 h (planned and actual). Queue: B 4 GPUs × 5 h, C 2 × 8 h,
/// D 2 × 12 h, every runtime its limit.
fn eight_gpus(backfill: Backfill) -> HashMap<usize, Millis> {
    let mut s = Scheduler::new(2, backfill);
    s.hold(0, 6, 10 * H, 10 * H);
    s.enqueue(1, 4, 5 * H, 5 * H);
    s.enqueue(2, 2, 8 * H, 8 * H);
    s.enqueue(3, 2, 12 * H, 12 * H);
    s.run_until_started(0)
}

use std::collections::HashMap;

#[test]
fn easy_backfill_starts_what_ends_before_the_shadow_or_uses_spare_gpus() {
    // At 0: B (4) does not fit the 2 free; its shadow is A's end, 10 h, with 8 − 4 = 4 spare then.
    // C (2 × 8 h) ends at 8 h ≤ 10 h: starts at 0. D: no GPU free.
    // At 8 h C ends: 2 free. D ends at 20 h > 10 h but needs 2 ≤ 4 spare: starts at 8 h.
    // At 10 h A ends: 6 free, B starts.
    let starts = eight_gpus(Backfill::Easy);
    assert_eq!((starts[&1], starts[&2], starts[&3]), (10 * H, 0, 8 * H));
}

#[test]
fn strict_order_lets_nothing_pass() {
    // Everything waits behind B until A ends at 10 h; then B (4), C (2) and D (2) fill the 8.
    let starts = eight_gpus(Backfill::Strict);
    assert_eq!((starts[&1], starts[&2], starts[&3]), (10 * H, 10 * H, 10 * H));
}

#[test]
fn easy_refuses_a_backfill_that_would_delay_the_first_job_and_best_effort_does_not() {
    // 8 GPUs; A holds 6 until 10 h. B needs all 8; C asks 2 for 20 h.
    let run = |backfill| {
        let mut s = Scheduler::new(2, backfill);
        s.hold(0, 6, 10 * H, 10 * H);
        s.enqueue(1, 8, 5 * H, 5 * H);
        s.enqueue(2, 2, 20 * H, 20 * H);
        s.run_until_started(0)
    };
    // EASY: shadow 10 h with 0 spare; C would run past it: waits. B runs 10–15 h, then C.
    let easy = run(Backfill::Easy);
    assert_eq!((easy[&1], easy[&2]), (10 * H, 15 * H));
    // Best effort: C starts at once and holds 2 GPUs until 20 h, so B waits until then.
    let best = run(Backfill::BestEffort);
    assert_eq!((best[&1], best[&2]), (20 * H, 0));
}

#[test]
fn a_job_larger_than_the_partition_never_starts_and_blocks_nobody() {
    let mut s = Scheduler::new(4, Backfill::Strict);
    s.hold(0, 4, 2 * H, 2 * H);
    s.enqueue(1, 16, H, H);
    s.enqueue(2, 6, H, H);
    let starts = s.run_until_started(0);
    assert_eq!(starts.get(&1), None);
    assert_eq!(starts[&2], 2 * H);
}

#[test]
fn the_predictor_falls_back_from_the_same_request_to_the_limit() {
    let mut h = History::new();
    let fresh = h.predict(&job("j", "alice", Some("x"), 8, 4));
    assert_eq!((fresh.runtime, fresh.low, fresh.basis), (4 * H, 4 * H, Basis::Limit));
    for rt in [1, 2, 3] {
        h.record("alice", Some("x"), 4 * H, rt * H);
    }
    // Same user, configuration and limit: the mean of 1, 2, 3 h; the shortest, 1 h.
    let same = h.predict(&job("j", "alice", Some("x"), 8, 4));
    assert_eq!((same.runtime, same.low, same.basis), (2 * H, H, Basis::SameRequest(3)));
    // Another limit, same configuration: ratios 0.25, 0.5, 0.75; median 0.5 of 8 h, smallest 0.25.
    let other = h.predict(&job("j", "alice", Some("x"), 8, 8));
    assert_eq!((other.runtime, other.low, other.basis), (4 * H, 2 * H, Basis::SameConfig(3)));
    // Another configuration: the user's runs, the same ratios.
    let user = h.predict(&job("j", "alice", Some("y"), 8, 12));
    assert_eq!((user.runtime, user.low, user.basis), (6 * H, 3 * H, Basis::SameUser(3)));
    // Someone else: the pool's runs. An even count takes the mean of the middle two ratios.
    h.record("carol", None, 2 * H, 2 * H);
    let pool = h.predict(&job("j", "bob", None, 8, 4));
    assert_eq!((pool.runtime, pool.low, pool.basis), (5 * H / 2, H, Basis::Pool(4)));
}

#[test]
fn only_the_recent_runs_count_and_a_prediction_never_exceeds_the_limit() {
    let mut h = History::new();
    h.record("alice", None, 4 * H, 100 * H); // far past its limit: counted as the limit
    for _ in 0..RECENT {
        h.record("alice", None, 4 * H, H);
    }
    let p = h.predict(&job("j", "alice", None, 1, 4));
    assert_eq!((p.runtime, p.basis), (H, Basis::SameRequest(RECENT)), "the 100 h run fell out");
    let mut h = History::new();
    h.record("alice", None, 4 * H, 100 * H);
    assert_eq!(h.predict(&job("j", "alice", None, 1, 4)).runtime, 4 * H);
}

#[test]
fn a_running_job_ends_as_predicted_then_halfway_to_its_limit_then_now() {
    // (now, started, limit, runtime) → expected end, hours
    let table = [(1, 0, 8, 3, 3 * H), (5, 0, 8, 3, 13 * H / 2), (9, 0, 8, 3, 9 * H), (1, 0, 8, 20, 8 * H)];
    for (now, started, limit, runtime, want) in table {
        assert_eq!(
            expected_end(now * H, started * H, limit * H, runtime * H),
            want,
            "{now} {started} {limit} {runtime}"
        );
    }
}

#[test]
fn an_estimate_from_history_against_one_from_limits() {
    // 8 GPUs, all held by alice's job since 0 with an 8 h limit. Her configuration x with an 8 h
    // limit ran 2 h and 4 h before: expected to end at 3 h, at the earliest at 2 h.
    let mut h = History::new();
    h.record("alice", Some("x"), 8 * H, 2 * H);
    h.record("alice", Some("x"), 8 * H, 4 * H);
    let p = Partition {
        free: 0,
        running: vec![RunningJob { job: job("a", "alice", Some("x"), 8, 8), started: 0 }],
        waiting: vec![],
        backfill: Backfill::Easy,
    };
    let request = job("req", "bob", None, 8, 4);
    let e = estimate(H, &p, &h, Some(&request));
    assert_eq!(e, vec![Estimate { start: Some(3 * H), earliest: Some(2 * H), latest: Some(8 * H) }]);
    // At 5 h it has outlived both: halfway from 5 h to its 8 h limit.
    let e = estimate(5 * H, &p, &h, Some(&request));
    assert_eq!(e, vec![Estimate { start: Some(13 * H / 2), earliest: Some(13 * H / 2), latest: Some(8 * H) }]);
}

#[test]
fn the_queue_ahead_is_simulated_with_its_own_predictions() {
    // 4 GPUs, all free. Queue: carol's 4-GPU job (limit 4 h, her 4 h runs took 1 h), then the
    // request for 4 GPUs: it starts when carol's ends, at 1 h expected, 4 h at the latest.
    let mut h = History::new();
    h.record("carol", None, 4 * H, H);
    let p =
        Partition { free: 4, running: vec![], waiting: vec![job("c", "carol", None, 4, 4)], backfill: Backfill::Easy };
    let e = estimate(0, &p, &h, Some(&job("req", "dave", None, 4, 2)));
    assert_eq!(e[0], Estimate { start: Some(0), earliest: Some(0), latest: Some(0) });
    assert_eq!(e[1], Estimate { start: Some(H), earliest: Some(H), latest: Some(4 * H) });
    // A request larger than the partition cannot start there.
    let e = estimate(0, &p, &h, Some(&job("req", "dave", None, 8, 2)));
    assert_eq!(e[1], Estimate { start: None, earliest: None, latest: None });
}

#[test]
fn free_in_an_hour_counts_the_ends_expected_by_then_and_the_queue_that_takes_them() {
    // Now is 0. 2 GPUs free. Running, no history (each ends at its limit): A holds 4 since −30 min
    // with a 2 h limit (ends at 90 min), B holds 2 since −30 min with a 1 h limit (ends at 30 min).
    // Waiting: C, 3 GPUs for 1 h. At 0, C does not fit the 2 free. At 30 min B ends: 4 free, C
    // starts (1 free) and ends at 90 min. At 60 min: 1 free. At 100 min A and C have ended: 8 free.
    let m = H / 60;
    let p = Partition {
        free: 2,
        running: vec![
            RunningJob { job: job("a", "ann", None, 4, 2), started: -30 * m },
            RunningJob { job: job("b", "ben", None, 2, 1), started: -30 * m },
        ],
        waiting: vec![job("c", "cat", None, 3, 1)],
        backfill: Backfill::Easy,
    };
    let h = History::new();
    assert_eq!(free_at(0, 0, &p, &h), 2);
    assert_eq!(free_at(0, 30 * m, &p, &h), 1);
    assert_eq!(free_at(0, 60 * m, &p, &h), 1);
    assert_eq!(free_at(0, 100 * m, &p, &h), 8);
    // With history: ben's 1 h runs took 10 min, and that ratio (1/6) is the pool's for everyone.
    // B (same request) was expected to end at −20 min, so halfway from now to its limit's end:
    // 15 min. A (2 h × 1/6 = 20 min) at −10 min, so halfway to 90 min: 45 min. C (1 h × 1/6):
    // 10 min. At 15 min B ends, C starts (1 free) and ends at 25 min (4 free); A ends at 45 (8).
    let mut h = History::new();
    h.record("ben", None, H, 10 * m);
    assert_eq!(estimate(0, &p, &h, None)[0].start, Some(15 * m));
    assert_eq!(free_at(0, 20 * m, &p, &h), 1);
    assert_eq!(free_at(0, 30 * m, &p, &h), 4);
    assert_eq!(free_at(0, 60 * m, &p, &h), 8);
}
