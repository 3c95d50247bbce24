//! bursar's one outgoing HTTP client. Every call bursar makes to another server goes through it:
//! Prometheus's query API (`bursar-prometheus`), Alertmanager and webhooks (`bursar-notify`), and
//! `bursar serve` itself (`bursar-client`: the Slurm agents, the terminal commands, the load
//! generator and the tests). It is a thin layer over ureq 3 (blocking HTTP/1.1 with a keep-alive
//! pool) and rustls on ring, and adds what those callers need and ureq leaves to them: a base URL
//! with a path prefix, `https://` with a site's CA file (or the system's roots) and an optional
//! client certificate, one [`Auth`] on every request (bearer, basic, or a header computed per
//! request), secrets read from files or the environment and never printed, the deadlines each
//! caller needs (connect, whole request, each read of a stream), a line reader over a streamed
//! answer, JSON helpers, and errors that name the URL and say what to do ([`Error`]).
//!
//! Boundaries: blocking only (serve's async code calls it on blocking threads); HTTP/1.1 only;
//! no redirects followed (a 3xx is an answer, so credentials never leave for another host), no
//! proxy from the environment (every target is named in a setting), no cookies, no compression.
//! It knows nothing of bursar's types: callers build and read their own bodies.
//!
//! Exports: [`ClientConfig`], [`Identity`] and [`Client`] ([`client`]); [`Request`], [`Response`],
//! [`Lines`]; [`Auth`], [`Secret`], [`SecretSource`], [`BasicAuthFile`], [`HeaderFn`] ([`auth`]);
//! [`Url`], [`encode`] ([`url`]); [`Error`].
//!
//! Layout: `url.rs` base URLs; `auth.rs` credentials and secrets; `client.rs` the agent, requests
//! and answers; `error.rs` the errors and their translation from ureq and rustls.

pub mod auth;
pub mod client;
mod error;
pub mod url;

pub use auth::{Auth, BasicAuthFile, HeaderFn, Secret, SecretError, SecretSource};
pub use client::{Client, ClientConfig, Identity, Lines, Request, Response};
pub use error::Error;
pub use url::{Scheme, Url, UrlError, encode};
