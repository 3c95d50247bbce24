//! GPU utilisation from where sites already have it: a Prometheus server scraping NVIDIA's
//! dcgm-exporter. This crate asks Prometheus's HTTP API (`/api/v1/query`, instant vectors) at
//! evaluation times aligned to an interval and turns the answers into `job.sample` events
//! ([`bursar_model::Event`] with [`bursar_model::EventKind::JobSample`]), one per job and evaluation
//! time, with deterministic ids so a restart, a second instance or a replay never counts one twice.
//!
//! Its one rule: **bad data is not idleness.** A DCGM error value, a stale series, a GPU missing
//! from the answer, a job bursar does not know, or Prometheus unreachable produce *no* sample and a
//! counter ([`Counters`], rendered as `bursar_prometheus_…_total`), never a "0 % used" sample that
//! would start an idle window. See `docs/integrations/utilisation.md`.
//!
//! Boundaries: it does no scheduling of its own and keeps no job state. The caller (`bursar serve`)
//! owns the loop, the wall clock, the resume point and the job view: it implements [`Jobs`] (or uses
//! [`ByJobId`] / [`SlurmIds`]), calls [`Source::catch_up`] (or [`Source::poll`]) on a blocking
//! thread, feeds the events to the engine, and renders [`Source::counters`] on `/metrics`. Blocking
//! HTTP/1.1 over plain TCP, no TLS; it depends on `bursar-model` only.
//!
//! Exports: [`Config`] (+ [`Metrics`], [`Attribution`], [`ConfigError`]); [`Source`], [`Poll`],
//! [`CatchUp`], [`PollError`]; [`Schedule`] and [`Due`]; [`Jobs`], [`Expected`], [`ByJobId`],
//! [`SlurmIds`], [`KubePods`]; [`Counters`]; [`ResumeFile`]. The pure pieces are public for tests and tools:
//! [`promql`] (the queries and the answer reader) and [`aggregate`] (readings to samples).
//!
//! Layout: `config.rs` settings; `promql.rs` queries and answers; `aggregate.rs` the rules;
//! `schedule.rs` evaluation times; `jobs.rs` the caller's view; `counters.rs`; `source.rs` the I/O.

pub mod aggregate;
mod config;
mod counters;
mod jobs;
pub mod promql;
mod schedule;
mod source;

pub use aggregate::Skip;
pub use config::{Attribution, Config, ConfigError, Metrics};
pub use counters::Counters;
pub use jobs::{ByJobId, Expected, Jobs, KubePods, SlurmIds, SlurmJobs};
pub use schedule::{Due, Schedule};
pub use source::{CatchUp, Poll, PollError, ResumeFile, Source};
