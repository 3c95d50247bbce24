//! `bursar serve` over TLS, end to end: the real binary with `--tls-cert`/`--tls-key` (and, in the
//! second test, `--tls-client-ca --tls-require-client-cert`), certificates made here, and
//! `bursar-client` with the CA file on the other side.
//!
//! Pins: `bursar-client` with `ca_file` admits a job, reads the pool and streams decisions over
//! https; the admission listener speaks the same TLS; a client without the CA file is told to set
//! `ca_file`; a plain-HTTP client gets nothing; with a required client certificate, a client
//! without one is refused at the handshake and one with a certificate of the client CA is served.
//! (The subject reaching the request is pinned in `crates/serve/tests/tls_listen.rs`.)

#![expect(clippy::unwrap_used, reason = "integration tests: a failed step fails the test")]

use crate::serve_support::{Scratch, Server, submit};
use bursar_http::{ClientConfig, Identity};
use bursar_testkit::tls::TestCa;

fn client(url: &str, ca: Option<&std::path::Path>, identity: Option<Identity>) -> bursar_client::Client {
    bursar_client::Client::with_config(ClientConfig {
        ca_file: ca.map(ToOwned::to_owned),
        identity,
        ..ClientConfig::new(url)
    })
    .unwrap()
}

#[test]
fn bursar_client_with_the_ca_file_talks_to_serve_over_tls() {
    let s = Scratch::new("serve-tls");
    let ca = TestCa::new("bursar test CA").unwrap();
    let ca_file = ca.write(&s.0, "ca").unwrap();
    let (cert, key) = ca.server().unwrap().write(&s.0, "server").unwrap();
    let admit = format!("127.0.0.1:{}", crate::serve_support::free_port());
    let flags = ["--tls-cert", cert.to_str().unwrap(), "--tls-key", key.to_str().unwrap(), "--admit-listen", &admit];
    let server = Server::start_https(&s, &ca_file, None, &flags);

    let c = client(&server.url(), Some(&ca_file), None);
    let event = bursar_model::decode_event(&submit("e1", "j1", "nlp", 2, 1.0)).unwrap();
    let reply = c.admit(&event).unwrap();
    assert_eq!(reply.admission.decision.job_id.as_deref(), Some("j1"), "{reply:?}");
    c.pool().unwrap();
    let mut stream = c.decisions(0, false).unwrap();
    let first = stream.next_decision().unwrap().unwrap();
    assert_eq!(first.decision.job_id.as_deref(), Some("j1"));

    // The admission listener speaks the same TLS.
    let a = client(&format!("https://{admit}"), Some(&ca_file), None);
    let event = bursar_model::decode_event(&submit("e2", "j2", "nlp", 1, 1.0)).unwrap();
    a.admit(&event).unwrap();

    // Without the CA file the certificate is not trusted, and the message names the setting.
    let e = client(&server.url(), None, None).pool().unwrap_err().to_string();
    assert!(e.contains("is not trusted") && e.contains("set `ca_file`"), "{e}");
    // Plain HTTP to the TLS port gets no answer of the API.
    assert!(bursar_client::Client::new(server.addr, None).pool().is_err());
}

#[test]
fn a_required_client_certificate_is_enforced_at_the_handshake() {
    let s = Scratch::new("serve-mtls");
    let ca = TestCa::new("bursar test CA").unwrap();
    let ca_file = ca.write(&s.0, "ca").unwrap();
    let (cert, key) = ca.server().unwrap().write(&s.0, "server").unwrap();
    let (agent_cert, agent_key) =
        ca.client("slurm-agent", "ops", &["node1.lab"]).unwrap().write(&s.0, "agent").unwrap();
    let agent = Identity { cert_file: agent_cert, key_file: agent_key };
    let flags = [
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
        "--tls-client-ca",
        ca_file.to_str().unwrap(),
        "--tls-require-client-cert",
    ];
    let server = Server::start_https(&s, &ca_file, Some(agent.clone()), &flags);

    let e = client(&server.url(), Some(&ca_file), None).pool().unwrap_err();
    assert!(e.status().is_none(), "refused before any HTTP answer: {e}");
    assert!(e.to_string().contains("client certificate"), "{e}");
    let with_cert = client(&server.url(), Some(&ca_file), Some(agent));
    with_cert.pool().unwrap();
    assert_eq!(with_cert.raw("GET", "/healthz", b"").unwrap().status, 200);
}
