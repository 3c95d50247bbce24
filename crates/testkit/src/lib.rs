//! Real external servers for bursar's tests, and the stand-ins that feed them.
//!
//! Each launcher starts the real binary Debian ships (Prometheus, Alertmanager and a NATS JetStream
//! cluster) on a loopback port it picks, with a generated configuration in a temporary
//! folder, and stops it by PID on `Drop`, pass, fail or panic ([`process::Server`], which also
//! leaves a sentinel that stops the server if the test process is killed outright). A test whose
//! program is not installed goes through [`need`]: it fails under CI and is skipped, saying so,
//! elsewhere (`scripts/setup.sh` installs every package a test needs).
//!
//! Boundaries: test support only (`publish = false`), nothing of bursar's own (a crate's
//! integration tests combine these with the crate under test), and no dependency unless the `tls`
//! feature asks for TLS: then rcgen, bcrypt and rustls, for [`tls`].
//!
//! Exports: [`process`] (`Server`, `TempDir`, `free_port`, `http_get`, `read_request` for the stand-ins), [`prometheus`]
//! (`Prometheus`), [`alertmanager`] (`Alertmanager`), [`nats`] (`NatsCluster`: 1 to 5 `nats-server` nodes
//! with JetStream), [`webhook`] (`WebhookReceiver`: records the POSTs a sink makes, answers with the
//! status the test sets), [`dcgm`] (`FakeDcgm`, a dcgm-exporter stand-in whose values the test changes
//! while it is scraped), [`node`] (`FakeNode`: a GPU node's driver view for the Slurm prolog/epilog),
//! [`munge`] (`Munged`: a real `munged` on a socket of its own), and with the `tls` feature [`tls`]
//! (`TestCa`, `WebConfig` for `--web.config.file` with TLS and basic auth, `https_get`,
//! `TlsWebhook`; `Prometheus::start_tls`, `Alertmanager::start_tls`), with the `oidc` feature
//! [`oidc`] (`OidcProvider`: an OpenID Connect provider stand-in, authorization code flow with PKCE,
//! ES256 ID tokens, for a real relying party such as Apache's mod_auth_openidc), and with the
//! `kubeapi` feature [`kubeapi`] (`KubeApi`: an in-test Kubernetes API server for the Kubernetes
//! agents' tests).

pub mod alertmanager;
pub mod dcgm;
#[cfg(feature = "kubeapi")]
pub mod kubeapi;
pub mod munge;
pub mod nats;
pub mod need;
pub mod node;
#[cfg(feature = "oidc")]
pub mod oidc;
pub mod process;
pub mod prometheus;
#[cfg(feature = "tls")]
pub mod tls;
pub mod webhook;

pub use alertmanager::Alertmanager;
pub use dcgm::{FakeDcgm, Field};
pub use munge::Munged;
pub use nats::NatsCluster;
pub use node::FakeNode;
pub use process::{Probe, Request, Server, TempDir, free_port, http_get, read_request};
pub use prometheus::Prometheus;
pub use webhook::{Received, WebhookReceiver};
