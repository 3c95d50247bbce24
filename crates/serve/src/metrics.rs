//! Counters and histograms for `/metrics`, rendered in the Prometheus text format (version 0.0.4).
//!
//! Everything is an atomic or a short-held mutex: handlers and the engine thread bump counters without
//! waiting on each other. Decisions are counted by kind and by policy (a decision naming two policies
//! counts once for each); latency histograms use fixed buckets from 1 µs to 2.5 s.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bursar_model::Decision;

/// Bucket upper bounds, in seconds.
const BOUNDS: [f64; 20] = [
    1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5,
    1.0, 2.5,
];

/// A latency histogram with fixed buckets.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; 20],
    count: AtomicU64,
    sum_ns: AtomicU64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        if let Some(i) = BOUNDS.iter().position(|b| s <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (b, n) in BOUNDS.iter().zip(&self.buckets) {
            cumulative += n.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {cumulative}");
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(out, "{name}_sum {}", self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9);
        let _ = writeln!(out, "{name}_count {count}");
    }
}

/// Everything `/metrics` reports.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Events applied by the engine.
    pub events_applied: AtomicU64,
    /// Events ignored because their id was seen before.
    pub events_duplicate: AtomicU64,
    /// Lines rejected as malformed (never reached the engine).
    pub events_rejected: AtomicU64,
    /// Inputs refused because their sender may not send them (403; not journaled).
    pub events_denied: AtomicU64,
    /// Inputs refused when applied: beyond the clock skew, a second submission of a known job
    /// (journaled in `refused`).
    pub events_refused: AtomicU64,
    /// Requests refused for a missing or wrong credential (401).
    pub unauthenticated: AtomicU64,
    /// Admission requests answered.
    pub admissions: AtomicU64,
    /// Test-only admissions answered (`POST /v1/admit?test_only=true`; nothing recorded).
    pub previews: AtomicU64,
    /// Timer-driven decisions made by the wall-clock ticker.
    pub tick_decisions: AtomicU64,
    /// Successful reloads that changed the policy set.
    pub reloads_ok: AtomicU64,
    /// Reloads whose files were unchanged.
    pub reloads_unchanged: AtomicU64,
    /// Failed reloads (the previous set stayed in force).
    pub reloads_failed: AtomicU64,
    /// Engine snapshots written.
    pub snapshots: AtomicU64,
    /// Live jobs after the last batch.
    pub live_jobs: AtomicU64,
    /// Jobs the engine tracks (live, pending approval, or ended and kept for late charges).
    pub tracked_jobs: AtomicU64,
    /// The main listener's refusals and cut requests.
    pub listener: std::sync::Arc<crate::listen::ListenCounters>,
    /// The admission listener's.
    pub admit_listener: std::sync::Arc<crate::listen::ListenCounters>,
    /// The Prometheus utilisation source's counters (all zero when it does not run).
    pub prometheus: std::sync::Arc<Mutex<bursar_prometheus::Counters>>,
    /// Whether the Prometheus utilisation source runs (its counters are rendered only then).
    pub prometheus_on: std::sync::atomic::AtomicBool,
    /// Pending timers after the last batch.
    pub timers: AtomicU64,
    /// Engine snapshots the start passed over (edited, not covered by a signed head, unreadable):
    /// the state was rebuilt from an older one or the whole log (`GET /healthz` says why).
    pub restore_refused: AtomicU64,
    /// Policies in force.
    pub policies: AtomicU64,
    /// Open decision streams.
    pub streams: AtomicU64,
    /// Engine time per event.
    pub eval: Histogram,
    /// Audit-log commit time per batch.
    pub commit: Histogram,
    /// `/v1/admit` request time, from decoded body to durable decision.
    pub admit: Histogram,
    /// Time to compile a policy directory on reload.
    pub reload: Histogram,
    decisions: Mutex<BTreeMap<(&'static str, String), u64>>,
}

impl Metrics {
    /// Counts decisions by kind and policy.
    pub fn count_decisions<'a>(&self, decisions: impl Iterator<Item = &'a Decision>) {
        let Ok(mut map) = self.decisions.lock() else { return };
        for d in decisions {
            let kind = d.decision.as_str();
            if d.policies.is_empty() {
                *map.entry((kind, String::new())).or_default() += 1;
            }
            for p in &d.policies {
                if let Some(n) = map.get_mut(&(kind, p.to_string())) {
                    *n += 1;
                } else {
                    map.insert((kind, p.to_string()), 1);
                }
            }
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(8 * 1024);
        let counter = |out: &mut String, name: &str, help: &str, v: &AtomicU64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}", v.load(Ordering::Relaxed));
        };
        let gauge = |out: &mut String, name: &str, help: &str, v: &AtomicU64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {}", v.load(Ordering::Relaxed));
        };
        let _ = writeln!(
            out,
            "# HELP bursar_events_total Events received, by outcome.\n# TYPE bursar_events_total counter"
        );
        for (label, v) in [
            ("applied", &self.events_applied),
            ("duplicate", &self.events_duplicate),
            ("rejected", &self.events_rejected),
            ("denied", &self.events_denied),
            ("refused", &self.events_refused),
        ] {
            let _ = writeln!(out, "bursar_events_total{{outcome=\"{label}\"}} {}", v.load(Ordering::Relaxed));
        }
        counter(&mut out, "bursar_admissions_total", "Admission requests answered.", &self.admissions);
        counter(
            &mut out,
            "bursar_admission_previews_total",
            "Test-only admissions answered (POST /v1/admit?test_only=true), which record nothing.",
            &self.previews,
        );
        counter(
            &mut out,
            "bursar_unauthenticated_requests_total",
            "Requests refused for a missing or wrong credential (401).",
            &self.unauthenticated,
        );
        counter(
            &mut out,
            "bursar_tick_decisions_total",
            "Decisions made by the wall-clock ticker.",
            &self.tick_decisions,
        );
        let _ = writeln!(
            out,
            "# HELP bursar_decisions_total Decisions, by kind and policy.\n# TYPE bursar_decisions_total counter"
        );
        if let Ok(map) = self.decisions.lock() {
            for ((kind, policy), n) in map.iter() {
                let _ = writeln!(
                    out,
                    "bursar_decisions_total{{kind=\"{kind}\",policy=\"{}\"}} {n}",
                    policy.replace('\\', "\\\\").replace('"', "\\\"")
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP bursar_reloads_total Policy reloads, by outcome.\n# TYPE bursar_reloads_total counter"
        );
        for (label, v) in
            [("ok", &self.reloads_ok), ("unchanged", &self.reloads_unchanged), ("failed", &self.reloads_failed)]
        {
            let _ = writeln!(out, "bursar_reloads_total{{outcome=\"{label}\"}} {}", v.load(Ordering::Relaxed));
        }
        counter(&mut out, "bursar_snapshots_total", "Engine snapshots written to the audit database.", &self.snapshots);
        gauge(
            &mut out,
            "bursar_live_jobs",
            "Jobs holding or about to hold GPUs, or waiting for an approval (counted for each scrape).",
            &self.live_jobs,
        );
        gauge(
            &mut out,
            "bursar_tracked_jobs",
            "Jobs the engine keeps, ended ones kept for late charges included.",
            &self.tracked_jobs,
        );
        gauge(&mut out, "bursar_timers", "Pending engine timers.", &self.timers);
        gauge(
            &mut out,
            "bursar_restore_refused_snapshots",
            "Engine snapshots the start refused (edited, not covered by a signed head, unreadable); GET /healthz says why.",
            &self.restore_refused,
        );
        let _ = writeln!(
            out,
            "# HELP bursar_http_refused_total Requests and connections refused by a listener's limits, by listener and reason.\n# TYPE bursar_http_refused_total counter"
        );
        for (name, l) in [("main", &self.listener), ("admit", &self.admit_listener)] {
            for (reason, v) in [
                ("connections", &l.refused),
                ("body_timeout", &l.body_timeouts),
                ("too_large", &l.too_large),
                ("tls_handshake", &l.tls_failed),
                ("shed", &l.shed),
                ("address", &l.address),
                ("unfinished", &l.unfinished),
                ("cross_site", &l.cross_site),
            ] {
                let _ = writeln!(
                    out,
                    "bursar_http_refused_total{{listener=\"{name}\",reason=\"{reason}\"}} {}",
                    v.load(Ordering::Relaxed)
                );
            }
        }
        gauge(&mut out, "bursar_policies", "Policies in force.", &self.policies);
        gauge(&mut out, "bursar_decision_streams", "Open decision streams.", &self.streams);
        self.eval.render(&mut out, "bursar_eval_seconds", "Engine evaluation time per event.");
        self.commit.render(
            &mut out,
            "bursar_audit_commit_seconds",
            "Time from handing a batch to the audit writer until it is durable, waiting behind the commit before it included.",
        );
        self.admit.render(&mut out, "bursar_admit_seconds", "Admission time from request to durable decision.");
        self.reload.render(&mut out, "bursar_reload_compile_seconds", "Policy directory compile time per reload.");
        if self.prometheus_on.load(Ordering::Relaxed)
            && let Ok(c) = self.prometheus.lock()
        {
            out.push_str(&c.render());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_and_counted() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(3));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(10));
        let mut s = String::new();
        h.render(&mut s, "x", "help");
        assert!(s.contains("x_bucket{le=\"0.000005\"} 1\n"), "{s}");
        assert!(s.contains("x_bucket{le=\"0.005\"} 2\n"), "{s}");
        assert!(s.contains("x_bucket{le=\"2.5\"} 2\n"), "{s}");
        assert!(s.contains("x_bucket{le=\"+Inf\"} 3\n"), "{s}");
        assert!(s.contains("x_count 3\n"), "{s}");
    }

    #[test]
    fn decisions_are_counted_per_policy() {
        let m = Metrics::default();
        let d: Decision = serde_json::from_str(
            r#"{"decision_id":"e/0","event_id":"e","time":"2026-11-02T09:00:00Z","decision":"deny","policies":["a","b"],"reason":"r"}"#,
        )
        .unwrap();
        m.count_decisions([&d, &d].into_iter());
        let text = m.render();
        assert!(text.contains("bursar_decisions_total{kind=\"deny\",policy=\"a\"} 2\n"), "{text}");
        assert!(text.contains("bursar_decisions_total{kind=\"deny\",policy=\"b\"} 2\n"), "{text}");
    }
}
