//! `bursar kube webhook`: the admission webhook's listener. HTTPS only (the API server calls
//! webhooks over TLS, trusting the `caBundle` of the webhook configuration), HTTP/1.1, rustls on
//! ring with the certificate and key given; `POST /mutate` takes an `AdmissionReview` v1 and
//! answers one ([`crate::review`] decides), `GET /healthz` answers `ok` for the pod's probes.
//!
//! serve is asked within `timeout` (keep it under the webhook configuration's `timeoutSeconds`,
//! 10 s by default, so the API server hears bursar's answer and not its own timeout). When serve gives no decision the request is refused (`--fail-open` admits
//! it unchecked, with a warning), as the Slurm hook's `fail_open` does; the API server's
//! `failurePolicy` covers a webhook it cannot reach at all (docs/integrations/kubernetes.md,
//! "Failure modes").
//!
//! Style: async throughout (hyper and rustls on tokio); serve is asked through [`crate::serve`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bursar_agent::server::Server;
use bursar_model::Timestamp;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::review::{self, ReviewConfig, Triage};
use crate::serve::Serve;
use crate::{Error, Result};

/// The largest AdmissionReview read (an UPDATE carries the object twice; objects are at most
/// about 1.5 MiB in etcd).
pub const MAX_BODY: usize = 8 * 1024 * 1024;

/// Settings of `bursar kube webhook`.
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    /// What the webhook decides and how.
    pub review: ReviewConfig,
    /// serve (a principal with the `submit` power).
    pub server: Server,
    /// The longest wait for serve's decision.
    pub timeout: Duration,
    /// Admit unchecked when serve gives no decision.
    pub fail_open: bool,
}

/// The TLS acceptor for `cert` and `key` (PEM).
pub fn tls(cert: &Path, key: &Path) -> Result<TlsAcceptor> {
    let bad = |f: &Path, e: String| Error::Webhook(format!("`{}`: {e}", f.display()));
    let pem = std::fs::read(cert).map_err(|e| bad(cert, e.to_string()))?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| bad(cert, e.to_string()))?;
    if chain.is_empty() {
        return Err(bad(cert, "it holds no certificate".into()));
    }
    let key_pem = std::fs::read(key).map_err(|e| bad(key, e.to_string()))?;
    let key_der = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| bad(key, e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Webhook(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(|e| bad(key, format!("it does not fit the certificate: {e}")))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn reply(status: StatusCode, content_type: &str, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    if let Ok(v) = content_type.parse() {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

/// Answers one AdmissionReview body.
pub async fn answer(cfg: &WebhookConfig, body: &[u8]) -> (StatusCode, Vec<u8>) {
    let req = match review::parse(body) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "webhook: a body that is not an AdmissionReview v1");
            return (
                StatusCode::BAD_REQUEST,
                format!("{{\"error\":{}}}", serde_json::Value::String(e.to_string())).into_bytes(),
            );
        }
    };
    let who = req.user_info.username.clone().unwrap_or_default();
    let what = format!("{} {}/{}", req.kind.kind, req.namespace.clone().unwrap_or_default(), req.name);
    let response = match review::triage(&req, &cfg.review, Timestamp::wall_clock()) {
        Triage::Allow(why) => {
            tracing::debug!(%what, user = %who, why, "webhook: allowed as it is");
            kube::core::admission::AdmissionResponse::from(&req)
        }
        Triage::Refuse(why) => {
            tracing::info!(%what, user = %who, %why, "webhook: refused");
            kube::core::admission::AdmissionResponse::from(&req).deny(why)
        }
        Triage::Submit { kind, object, event, dry_run } => {
            let serve = Serve::new(cfg.server.clone());
            let ask = async { if dry_run { serve.preview(*event).await } else { serve.admit(*event).await } };
            match tokio::time::timeout(cfg.timeout, ask).await {
                Ok(Ok(reply)) => {
                    let d = &reply.admission.decision;
                    tracing::info!(%what, user = %who, job = d.job_id.as_deref().unwrap_or("-"), decision = d.decision.as_str(), "webhook: admission");
                    review::respond(&req, &cfg.review, &kind, &object, d)
                }
                Ok(Err(e)) => {
                    tracing::error!(%what, error = %e, "webhook: serve gave no decision");
                    review::unavailable(&req, cfg.fail_open, &e.to_string())
                }
                Err(_) => {
                    tracing::error!(%what, timeout = ?cfg.timeout, "webhook: serve gave no decision in time");
                    review::unavailable(&req, cfg.fail_open, &format!("no answer within {:?}", cfg.timeout))
                }
            }
        }
    };
    match serde_json::to_vec(&response.into_review()) {
        Ok(b) => (StatusCode::OK, b),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string().into_bytes()),
    }
}

async fn handle(
    cfg: Arc<WebhookConfig>,
    req: Request<Incoming>,
) -> std::result::Result<Response<Full<Bytes>>, hyper::Error> {
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/healthz") => Ok(reply(StatusCode::OK, "text/plain", b"ok\n".to_vec())),
        (&Method::POST, "/mutate") => {
            let json = req
                .headers()
                .get(hyper::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("application/json"));
            if !json {
                return Ok(reply(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "application/json",
                    br#"{"error":"send application/json"}"#.to_vec(),
                ));
            }
            let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
                Ok(b) => b.to_bytes(),
                Err(_) => {
                    return Ok(reply(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "application/json",
                        br#"{"error":"body too large"}"#.to_vec(),
                    ));
                }
            };
            let (status, out) = answer(&cfg, &body).await;
            Ok(reply(status, "application/json", out))
        }
        _ => Ok(reply(
            StatusCode::NOT_FOUND,
            "application/json",
            br#"{"error":"POST /mutate or GET /healthz"}"#.to_vec(),
        )),
    }
}

/// Serves `listener` until the process ends.
pub async fn serve(listener: TcpListener, acceptor: TlsAcceptor, cfg: WebhookConfig) -> Result<()> {
    let cfg = Arc::new(cfg);
    tracing::info!(listen = %listener.local_addr().map_or_else(|_| "?".into(), |a| a.to_string()), "kube webhook listening (https)");
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (acceptor, cfg) = (acceptor.clone(), cfg.clone());
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            let service = hyper::service::service_fn(move |req| handle(cfg.clone(), req));
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(tls), service)
                .await
            {
                tracing::debug!(%peer, error = %e, "connection ended");
            }
        });
    }
}

/// Binds `addr` (port 0: any free port) and returns the listener and its address.
pub async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr)> {
    let l = TcpListener::bind(addr).await.map_err(|e| Error::Webhook(format!("cannot listen on {addr}: {e}")))?;
    let a = l.local_addr().map_err(|e| Error::Webhook(e.to_string()))?;
    Ok((l, a))
}

/// The files of `--tls-cert` and `--tls-key`.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// Certificate chain, PEM.
    pub cert: PathBuf,
    /// Private key, PEM.
    pub key: PathBuf,
}
