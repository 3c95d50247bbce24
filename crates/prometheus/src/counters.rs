//! What the source did, as plain counters the caller adds up and renders on its `/metrics`.
//!
//! Every reason a poll or a job produced no sample has its own counter, because each one means
//! something different to fix: Prometheus down (`poll_failures`), the DCGM sentinel values
//! (`series_rejected{reason="bad_value"}`), a target that stopped being scraped (`stale`), a mapping
//! file missing for one GPU (`missing_gpu`) or for the whole job (`no_series`), a mapping file left
//! behind by a job that ended (`extra_gpu`, `unknown_job`).

use std::fmt::Write as _;

/// Counter values, cumulative in [`crate::Source::counters`], per poll in [`crate::Poll::delta`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Evaluation times polled.
    pub polls: u64,
    /// Polls that produced nothing because Prometheus could not be reached (connect, timeout).
    pub poll_unreachable: u64,
    /// Polls that produced nothing because Prometheus answered an error (HTTP status or API error).
    pub poll_error: u64,
    /// Polls that produced nothing because the answer could not be read.
    pub poll_bad_answer: u64,
    /// Queries sent.
    pub queries: u64,
    /// `job.sample` events produced.
    pub samples: u64,
    /// Series whose value was outside the metric's range (DCGM's blank and error values, NaN).
    pub series_bad_value: u64,
    /// Series whose newest sample was older than `max_age`, or whose sample time was missing.
    pub series_stale: u64,
    /// Jobs skipped: no running job bursar knows has this key.
    pub jobs_unknown: u64,
    /// Jobs skipped: a GPU's value was bad.
    pub jobs_bad_value: u64,
    /// Jobs skipped: a GPU's series was stale.
    pub jobs_stale: u64,
    /// Jobs skipped: fewer GPUs in the answer than bursar expects.
    pub jobs_missing_gpu: u64,
    /// Jobs skipped: more GPUs in the answer than bursar expects.
    pub jobs_extra_gpu: u64,
    /// Running jobs with GPUs that had no series at all (only when the caller lists running jobs).
    pub jobs_no_series: u64,
    /// Evaluation times older than `max_backfill` that were not polled.
    pub evaluations_skipped: u64,
}

impl Counters {
    /// Adds `d` to these counters.
    pub fn add(&mut self, d: &Counters) {
        let Counters {
            polls,
            poll_unreachable,
            poll_error,
            poll_bad_answer,
            queries,
            samples,
            series_bad_value,
            series_stale,
            jobs_unknown,
            jobs_bad_value,
            jobs_stale,
            jobs_missing_gpu,
            jobs_extra_gpu,
            jobs_no_series,
            evaluations_skipped,
        } = d;
        self.polls += polls;
        self.poll_unreachable += poll_unreachable;
        self.poll_error += poll_error;
        self.poll_bad_answer += poll_bad_answer;
        self.queries += queries;
        self.samples += samples;
        self.series_bad_value += series_bad_value;
        self.series_stale += series_stale;
        self.jobs_unknown += jobs_unknown;
        self.jobs_bad_value += jobs_bad_value;
        self.jobs_stale += jobs_stale;
        self.jobs_missing_gpu += jobs_missing_gpu;
        self.jobs_extra_gpu += jobs_extra_gpu;
        self.jobs_no_series += jobs_no_series;
        self.evaluations_skipped += evaluations_skipped;
    }

    /// Polls that failed, whatever the reason.
    pub fn poll_failures(&self) -> u64 {
        self.poll_unreachable + self.poll_error + self.poll_bad_answer
    }

    /// Jobs skipped, whatever the reason.
    pub fn jobs_skipped(&self) -> u64 {
        self.jobs_unknown
            + self.jobs_bad_value
            + self.jobs_stale
            + self.jobs_missing_gpu
            + self.jobs_extra_gpu
            + self.jobs_no_series
    }

    /// The Prometheus text exposition of these counters (`# HELP`, `# TYPE` and sample lines).
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut family = |name: &str, help: &str, rows: &[(Option<&str>, u64)]| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            for (reason, v) in rows {
                match reason {
                    Some(r) => {
                        let _ = writeln!(out, "{name}{{reason=\"{r}\"}} {v}");
                    }
                    None => {
                        let _ = writeln!(out, "{name} {v}");
                    }
                }
            }
        };
        family("bursar_prometheus_polls_total", "Evaluation times polled.", &[(None, self.polls)]);
        family(
            "bursar_prometheus_poll_failures_total",
            "Polls that produced no sample because Prometheus could not be asked or answered badly.",
            &[
                (Some("unreachable"), self.poll_unreachable),
                (Some("error"), self.poll_error),
                (Some("bad_answer"), self.poll_bad_answer),
            ],
        );
        family("bursar_prometheus_queries_total", "Instant queries sent.", &[(None, self.queries)]);
        family("bursar_prometheus_samples_total", "job.sample events produced.", &[(None, self.samples)]);
        family(
            "bursar_prometheus_series_rejected_total",
            "Series not used: value outside the metric's range, or sample too old.",
            &[(Some("bad_value"), self.series_bad_value), (Some("stale"), self.series_stale)],
        );
        family(
            "bursar_prometheus_jobs_skipped_total",
            "Jobs that got no sample at an evaluation time, by reason.",
            &[
                (Some("unknown_job"), self.jobs_unknown),
                (Some("bad_value"), self.jobs_bad_value),
                (Some("stale"), self.jobs_stale),
                (Some("missing_gpu"), self.jobs_missing_gpu),
                (Some("extra_gpu"), self.jobs_extra_gpu),
                (Some("no_series"), self.jobs_no_series),
            ],
        );
        family(
            "bursar_prometheus_evaluations_skipped_total",
            "Evaluation times older than max_backfill that were never polled.",
            &[(None, self.evaluations_skipped)],
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_and_renders() {
        let mut c = Counters::default();
        c.add(&Counters { polls: 2, poll_unreachable: 1, jobs_stale: 3, samples: 5, ..Counters::default() });
        c.add(&Counters { polls: 1, jobs_bad_value: 1, ..Counters::default() });
        assert_eq!((c.polls, c.poll_failures(), c.jobs_skipped()), (3, 1, 4));
        let text = c.render();
        assert!(text.contains("# TYPE bursar_prometheus_polls_total counter\nbursar_prometheus_polls_total 3\n"));
        assert!(text.contains("bursar_prometheus_poll_failures_total{reason=\"unreachable\"} 1\n"));
        assert!(text.contains("bursar_prometheus_jobs_skipped_total{reason=\"stale\"} 3\n"));
        assert!(text.contains("bursar_prometheus_samples_total 5\n"));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap();
            assert!(name.starts_with("bursar_prometheus_") && name.ends_with("_total"), "{line}");
        }
    }
}
