//! bursar's notices: the decisions that need a person (an approval, an idle job's keep-alive, a
//! reclaim, an alert) sent where sites already route alerts — Prometheus Alertmanager, or a plain
//! JSON webhook — from a durable outbox beside the audit log, with signed one-click action links.
//!
//! ```text
//!  audit log (decisions, job steps) ──► Notifier::pass ──► outbox (notices + cursor, one commit)
//!                                            │  asks: EngineView::facts (approvers, expiry, idle deadline)
//!                                            ▼
//!                         Alertmanager POST /api/v2/alerts  ·  webhook POST (one notice each)
//!                                  links: <public_url>/act/<HMAC token>  → bursar serve
//! ```
//!
//! Boundaries: the audit log is the only source (a restart neither loses nor repeats a notice; see
//! [`notifier`]), and the only SQL is `bursar-audit`'s ([`bursar_audit::Outbox`]). This crate never
//! applies an input: an action link is verified here ([`token`]) and turned into an ordinary v1
//! event by `bursar serve`, on the one road. It knows nothing of serve's threads: serve implements
//! [`EngineView`] and runs [`Notifier::run`] on a thread of its own.
//!
//! Exports: [`NotifyConfig`] ([`config`]); [`Notifier`], [`EngineView`], [`Pass`] ([`notifier`]);
//! [`JobFacts`] and the rules ([`notice`]); [`LinkKey`], [`Claims`], [`TokenError`], [`event_id`]
//! ([`token`]); the two sinks' bodies and their POSTs ([`sink`], over `bursar-http`: http or https,
//! a CA file, basic or bearer auth).

pub mod config;
pub mod notice;
pub mod notifier;
pub mod sink;
pub mod token;

pub use config::{ConfigError, NotifyConfig, SinkKind};
pub use notice::JobFacts;
pub use notifier::{EngineGone, EngineView, Notifier, NotifyError, Pass};
pub use token::{Claims, KeyError, LinkKey, TokenError, event_id};
