//! `bursar serve` listens on loopback by default; any other address needs principals, and with a
//! token every route but `/healthz` wants it.

use std::process::Command;

use crate::serve_support::*;

#[test]
fn non_loopback_bind_is_refused_without_principals() {
    let s = Scratch::new("serve-bind");
    let out = Command::new(env!("CARGO_BIN_EXE_bursar"))
        .arg("serve")
        .arg("--policies")
        .arg(s.policies())
        .arg("--audit")
        .arg(s.audit())
        .args(["--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refusing to listen on `0.0.0.0:0` without principals"), "{err}");
    assert!(err.contains("--config"), "{err}");
    // Nothing was created: it refused before opening anything.
    assert!(!s.audit().exists());
}

#[test]
fn a_token_guards_every_route_but_healthz() {
    let s = Scratch::new("serve-token");
    let server = Server::start(&s, &["--token", "s3cret"]);
    let anon = |method: &str, path: &str, body: &str| {
        Conn::connect(server.addr, None).unwrap().request(method, path, body.as_bytes()).unwrap()
    };
    let wrong = |path: &str| Conn::connect(server.addr, Some("s3creT")).unwrap().request("GET", path, b"").unwrap();
    assert_eq!(anon("GET", "/healthz", "").status, 200);
    for (method, path) in [
        ("GET", "/metrics"),
        ("GET", "/v1/policies"),
        ("GET", "/v1/decisions?follow=false"),
        ("GET", "/v1/jobs/j1"),
        ("POST", "/v1/reload"),
    ] {
        assert_eq!(anon(method, path, "").status, 401, "{method} {path}");
    }
    let r = anon("POST", "/v1/admit", &submit("e1", "j1", "nlp", 1, 1.0));
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), Some("Bearer realm=\"bursar\""));
    assert_eq!(wrong("/v1/policies").status, 401);
    // Refused requests changed nothing; the right token works.
    assert_eq!(server.get("/v1/jobs/j1").unwrap().status, 404);
    assert_eq!(server.post("/v1/admit", &submit("e1", "j1", "nlp", 1, 1.0)).status, 200);
    assert_eq!(server.get("/v1/jobs/j1").unwrap().status, 200);
}
