//! Credentials people and machines already have, through the real `bursar serve`: MUNGE against a
//! real `munged` (started here, stopped by PID), JWTs as Slurm's `slurmrestd` takes them (HS256
//! under a key file, RS256 under a JWKS file, made here with the test's own keys), and a trusted
//! reverse proxy's user header.

#![expect(clippy::unwrap_used, reason = "tests: a failure stops the test")]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};

use crate::serve_support::*;

fn http(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0), body.to_owned())
}

const SCHED: &str = "bursar_cred-test-scheduler";

/// A configuration with a scheduler principal (token [`SCHED`]) and `extra`.
fn config(s: &Scratch, extra: &str) -> PathBuf {
    let hash = bursar_auth::TokenHash::of(SCHED).to_text();
    let text = format!("[[principal]]\nname = \"sched\"\nroles = [\"scheduler\"]\ntokens = [\"{hash}\"]\n\n{extra}");
    let path = s.0.join("bursar.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn held_job(server: &Server, job: &str, user: &str) {
    let line = format!(
        r#"{{"id":"{job}","time":"{}","type":"job.submitted","job":{{"id":"{job}","project":"nlp","user":"{user}","gpus":32,"requested_hours":1,"ready":{{"image":true,"data":true,"script":true}}}}}}"#,
        now()
    );
    let auth = format!("Bearer {SCHED}");
    let (st, body) = http(server.addr, "POST", "/v1/admit", &[("authorization", &auth)], &line);
    assert_eq!(st, 200, "{body}");
    assert!(body.contains("require_approval"), "{body}");
}

fn approval_policy(s: &Scratch, approvers: &str) {
    s.write_policy(
        "approval.toml",
        &format!(
            "[[policy]]\nid = \"approval/big\"\ndescription = \"big jobs need approval\"\nkind = \"approval\"\ngpus_over = 16\napprovers = {approvers}\nexpires = \"2h\"\n"
        ),
    );
}

fn explain(s: &Scratch, job: &str) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_bursar"))
        .args(["audit", "--db", s.audit().to_str().unwrap(), "explain", job])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// An approval is signed by the person who typed it: munged vouches for the UID, the credential
/// is bound to the request, a replay or a forgery is refused, and a user outside the approvers is
/// told who may.
#[test]
fn munge_authenticates_an_approval() {
    let Some(_) = bursar_testkit::Munged::binary() else {
        return bursar_testkit::need::missing("munged (the munge package)", "scripts/setup.sh");
    };
    let munged = bursar_testkit::Munged::start().unwrap();
    let s = Scratch::new("cred-munge");
    approval_policy(&s, "[\"nobody\"]");
    let cfg = config(
        &s,
        &format!("[auth]\npeople = [\"approver\"]\n\n[auth.munge]\nsocket = \"{}\"\n", munged.socket().display()),
    );
    let server = Server::start(&s, &["--config", cfg.to_str().unwrap()]);
    held_job(&server, "lab-big", "alice");
    held_job(&server, "lab-other", "alice");
    let path = "/v1/jobs/lab-big/approve";
    let cred = |user: &str, path: &str, body: &str| {
        munged.encode(user, &bursar_auth::munge::binding("POST", path, body.as_bytes())).unwrap()
    };

    // A user the policy does not name.
    let c = format!("MUNGE {}", cred("daemon", path, "{}"));
    let (st, body) = http(server.addr, "POST", path, &[("authorization", &c)], "{}");
    assert_eq!(st, 403, "{body}");
    assert!(body.contains("`daemon` is not an approver of job `lab-big`: only nobody"), "{body}");

    // A credential made for another request (another job) approves nothing.
    let c = format!("MUNGE {}", cred("nobody", "/v1/jobs/lab-other/approve", "{}"));
    let (st, body) = http(server.addr, "POST", path, &[("authorization", &c)], "{}");
    assert_eq!(st, 401, "{body}");
    assert!(body.contains("made for another request"), "{body}");

    // A forged one (edited) is refused by munged.
    let good = cred("nobody", path, "{}");
    let mut forged = good.clone().into_bytes();
    let i = forged.len() / 2;
    forged[i] = if forged[i] == b'A' { b'B' } else { b'A' };
    let c = format!("MUNGE {}", String::from_utf8(forged).unwrap());
    let (st, body) = http(server.addr, "POST", path, &[("authorization", &c)], "{}");
    assert_eq!(st, 401, "{body}");
    assert!(body.contains("munged refused the credential"), "{body}");

    // The approver's own credential approves, once.
    let c = format!("MUNGE {good}");
    let (st, body) = http(server.addr, "POST", path, &[("authorization", &c)], "{}");
    assert_eq!(st, 200, "{body}");
    assert!(body.contains("approved by nobody"), "{body}");
    let (st, body) = http(server.addr, "POST", path, &[("authorization", &c)], "{}");
    assert_eq!(st, 401, "a replayed credential: {body}");
    assert!(body.contains("Replayed"), "{body}");

    // `bursar approve` on this host signs with MUNGE: the credential is the invoking user's (root
    // here), and `--as` is only a request the credential must match.
    let sock = munged.socket();
    let addr = server.addr.to_string();
    let cmd = |extra: &[&str]| {
        let mut args =
            vec!["approve", "lab-root", "--server", &addr, "--munge", "--munge-socket", sock.to_str().unwrap()];
        args.extend_from_slice(extra);
        std::process::Command::new(env!("CARGO_BIN_EXE_bursar")).args(&args).output().unwrap()
    };
    held_job(&server, "lab-root", "alice");
    let out = cmd(&["--as", "nobody"]);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("answers as `nobody` but the credential is `root`'s"), "{text}");
    let out = cmd(&[]);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "root is not an approver: {text}");
    assert!(text.contains("`root` is not an approver of job `lab-root`: only nobody"), "{text}");

    drop(server);
    let story = explain(&s, "lab-big");
    assert!(story.contains("from: nobody (munge: uid 65534)"), "{story}");
    drop(munged);
}

/// Writes `bytes` to `dir/name` and returns the path.
fn file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn jwt_hs(key: &[u8], claims: &serde_json::Value) -> String {
    jsonwebtoken::encode(&jsonwebtoken::Header::default(), claims, &jsonwebtoken::EncodingKey::from_secret(key))
        .unwrap()
}

fn secs(from_now: i64) -> i64 {
    wall_ms() / 1000 + from_now
}

/// A JWT made with the test's own key is accepted, under HS256 (Slurm's `jwt_hs256.key`) and RS256
/// (a JWKS file); expired, for another audience, or signed with another key, it is refused.
#[test]
fn jwts_as_slurmrestd_takes_them() {
    let s = Scratch::new("cred-jwt");
    let key: Vec<u8> = (0..32u8).map(|i| i.wrapping_mul(37).wrapping_add(11)).collect();
    let key_file = file(&s.0, "jwt_hs256.key", &key);

    // RS256: a key pair from openssl, the public half as a JWKS.
    let pem = s.0.join("rsa.pem");
    let ok = std::process::Command::new("openssl")
        .args(["genrsa", "-out", pem.to_str().unwrap(), "2048"])
        .output()
        .is_ok_and(|o| o.status.success());
    let rsa = if ok {
        let der = s.0.join("rsa.der");
        assert!(
            std::process::Command::new("openssl")
                .args([
                    "rsa",
                    "-in",
                    pem.to_str().unwrap(),
                    "-traditional",
                    "-outform",
                    "DER",
                    "-out",
                    der.to_str().unwrap()
                ])
                .status()
                .unwrap()
                .success()
        );
        let m = std::process::Command::new("openssl")
            .args(["rsa", "-in", pem.to_str().unwrap(), "-noout", "-modulus"])
            .output()
            .unwrap();
        let hex = String::from_utf8_lossy(&m.stdout).trim().trim_start_matches("Modulus=").to_owned();
        let n: Vec<u8> = (0..hex.len() / 2).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap()).collect();
        let jwks = serde_json::json!({"keys": [{"kty": "RSA", "kid": "k1", "alg": "RS256", "use": "sig",
            "n": bursar_auth::token::base64url(&n), "e": "AQAB"}]});
        file(&s.0, "jwks.json", jwks.to_string().as_bytes());
        Some(std::fs::read(der).unwrap())
    } else {
        eprintln!("RS256 part skipped: no openssl");
        None
    };
    let cfg = config(
        &s,
        &format!(
            "[auth]\npeople = [\"reader\"]\n\n[auth.jwt]\nhs256_key_file = \"{}\"\n{}audience = \"bursar\"\n",
            key_file.display(),
            if rsa.is_some() { "jwks_file = \"jwks.json\"\n" } else { "" }
        ),
    );
    let server = Server::start(&s, &["--config", cfg.to_str().unwrap()]);
    let get = |headers: &[(&str, &str)]| http(server.addr, "GET", "/v1/policies", headers, "");
    let bearer = |t: &str| format!("Bearer {t}");

    let good = jwt_hs(&key, &serde_json::json!({"sun": "carol", "exp": secs(600), "aud": "bursar"}));
    assert_eq!(get(&[("authorization", &bearer(&good))]).0, 200);
    // Slurm's own headers, as `scontrol token` users send them.
    assert_eq!(get(&[("x-slurm-user-token", &good), ("x-slurm-user-name", "carol")]).0, 200);
    let (st, body) = get(&[("x-slurm-user-token", &good), ("x-slurm-user-name", "mallory")]);
    assert_eq!(st, 401, "{body}");

    let expired = jwt_hs(&key, &serde_json::json!({"sun": "carol", "exp": secs(-3600), "aud": "bursar"}));
    let (st, body) = get(&[("authorization", &bearer(&expired))]);
    assert_eq!((st, body.contains("expired")), (401, true), "{body}");
    let other_aud = jwt_hs(&key, &serde_json::json!({"sun": "carol", "exp": secs(600), "aud": "grafana"}));
    let (st, body) = get(&[("authorization", &bearer(&other_aud))]);
    assert_eq!((st, body.contains("not for this server")), (401, true), "{body}");
    let no_aud = jwt_hs(&key, &serde_json::json!({"sun": "carol", "exp": secs(600)}));
    assert_eq!(get(&[("authorization", &bearer(&no_aud))]).0, 401);
    let wrong_key = jwt_hs(&[7u8; 32], &serde_json::json!({"sun": "carol", "exp": secs(600), "aud": "bursar"}));
    let (st, body) = get(&[("authorization", &bearer(&wrong_key))]);
    assert_eq!((st, body.contains("signature")), (401, true), "{body}");
    let no_user = jwt_hs(&key, &serde_json::json!({"exp": secs(600), "aud": "bursar"}));
    let (st, body) = get(&[("authorization", &bearer(&no_user))]);
    assert_eq!((st, body.contains("`sun`")), (401, true), "{body}");

    if let Some(der) = rsa {
        let mut h = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
        h.kid = Some("k1".into());
        let k = jsonwebtoken::EncodingKey::from_rsa_der(&der);
        let rs = jsonwebtoken::encode(&h, &serde_json::json!({"sun": "dave", "exp": secs(600), "aud": "bursar"}), &k)
            .unwrap();
        assert_eq!(get(&[("authorization", &bearer(&rs))]).0, 200);
        h.kid = Some("k2".into());
        let unknown_kid =
            jsonwebtoken::encode(&h, &serde_json::json!({"sun": "dave", "exp": secs(600), "aud": "bursar"}), &k)
                .unwrap();
        assert_eq!(get(&[("authorization", &bearer(&unknown_kid))]).0, 401);
    }
    // A JWT person has the `[auth] people` roles only: reading, not submitting.
    let (st, body) = http(server.addr, "POST", "/v1/admit", &[("authorization", &bearer(&good))], "{}");
    assert_eq!(st, 403, "{body}");
    assert!(body.contains("`carol` (reader) lacks the `submit` power"), "{body}");
}

/// A reverse proxy's user header is believed from the configured proxy addresses only.
#[test]
fn a_proxy_header_counts_only_from_the_proxy() {
    for (addresses, want) in [("127.0.0.1", 200), ("10.9.9.9", 401)] {
        let s = Scratch::new("cred-proxy");
        let cfg = config(
            &s,
            &format!(
                "[auth]\npeople = [\"reader\"]\n\n[auth.proxy]\naddresses = [\"{addresses}\"]\nheader = \"X-Forwarded-User\"\n"
            ),
        );
        let server = Server::start(&s, &["--config", cfg.to_str().unwrap()]);
        let (st, body) = http(server.addr, "GET", "/v1/pool", &[("x-forwarded-user", "erin")], "");
        assert_eq!(st, want, "proxy at {addresses}: {body}");
        if want == 401 {
            assert!(body.contains("honoured only from the configured proxies"), "{body}");
        }
    }
}

/// An HS256 key file and a configuration with a JWT verifier, people with `people` roles, the
/// scheduler, an admin principal `ops` (token `bursar_cred-ops`) and `extra`.
fn jwt_server(s: &Scratch, people: &str, extra: &str) -> (Server, Vec<u8>) {
    let key: Vec<u8> = (0..32u8).map(|i| i.wrapping_mul(41).wrapping_add(3)).collect();
    let key_file = file(&s.0, "jwt_hs256.key", &key);
    let ops = bursar_auth::TokenHash::of("bursar_cred-ops").to_text();
    let cfg = config(
        s,
        &format!(
            "[auth]\npeople = {people}\n\n[auth.jwt]\nhs256_key_file = \"{}\"\n\n[auth.proxy]\naddresses = [\"127.0.0.1\"]\nheader = \"X-Forwarded-User\"\n\n[[principal]]\nname = \"ops\"\nroles = [\"admin\", \"reader\"]\ntokens = [\"{ops}\"]\n\n{extra}",
            key_file.display()
        ),
    );
    (Server::start(s, &["--config", cfg.to_str().unwrap()]), key)
}

/// Issue 46: a JWT whose user claim is `ops`, a declared principal with `admin`, got admin power.
/// People and service principals are separate namespaces: a person named like a principal (by a
/// JWT, a proxy's header or MUNGE) is a person, with the people's roles; a `[[person]]` table
/// gives a person roles of their own.
#[test]
fn a_persons_name_never_becomes_a_service_principal() {
    let s = Scratch::new("cred-namespaces");
    let (server, key) = jwt_server(&s, "[\"reader\"]", "[[person]]\nname = \"carol\"\nroles = [\"admin\"]\n");
    let ops_jwt = jwt_hs(&key, &serde_json::json!({"sun": "ops", "exp": secs(600)}));
    let json = ("content-type", "application/json");
    let (st, body) =
        http(server.addr, "POST", "/v1/reload", &[("authorization", &format!("Bearer {ops_jwt}")), json], "");
    assert_eq!(st, 403, "{body}");
    assert!(body.contains("`ops` (reader) lacks the `admin` power"), "the person `ops`, not the principal: {body}");
    let (st, body) = http(server.addr, "POST", "/v1/reload", &[("x-forwarded-user", "ops"), json], "");
    assert_eq!(st, 403, "{body}");
    // The person may read, as every person here.
    assert_eq!(http(server.addr, "GET", "/v1/policies", &[("x-forwarded-user", "ops")], "").0, 200);
    // The principal, by its token, still is admin; a person declared with roles of their own has them.
    assert_eq!(http(server.addr, "POST", "/v1/reload", &[("authorization", "Bearer bursar_cred-ops")], "").0, 200);
    let carol = jwt_hs(&key, &serde_json::json!({"sun": "carol", "exp": secs(600)}));
    assert_eq!(
        http(server.addr, "POST", "/v1/reload", &[("authorization", &format!("Bearer {carol}")), json], "").0,
        200
    );
}

/// Issue 46: a JWT's `nbf` was ignored and a token valid until 9999 accepted; a request with one
/// good and one bad credential was let in; a lowercase `bearer` was refused (RFC 7235 makes the
/// scheme case-insensitive).
#[test]
fn jwt_nbf_and_lifetime_any_failing_credential_and_the_bearer_scheme() {
    let s = Scratch::new("cred-jwt-rules");
    let (server, key) = jwt_server(&s, "[\"reader\"]", "");
    let get = |headers: &[(&str, &str)]| http(server.addr, "GET", "/v1/policies", headers, "");
    let bearer = |t: &str| format!("Bearer {t}");
    let not_yet = jwt_hs(&key, &serde_json::json!({"sun": "carol", "nbf": secs(3600), "exp": secs(7200)}));
    let (st, body) = get(&[("authorization", &bearer(&not_yet))]);
    assert_eq!((st, body.contains("not valid yet")), (401, true), "{body}");
    let forever = jwt_hs(&key, &serde_json::json!({"sun": "carol", "exp": 253_402_300_000i64}));
    let (st, body) = get(&[("authorization", &bearer(&forever))]);
    assert_eq!((st, body.contains("longer than the 86400 s")), (401, true), "{body}");
    let old_long = jwt_hs(&key, &serde_json::json!({"sun": "carol", "iat": secs(-40 * 86400), "exp": secs(600)}));
    assert_eq!(get(&[("authorization", &bearer(&old_long))]).0, 401);
    let good = jwt_hs(&key, &serde_json::json!({"sun": "carol", "iat": secs(0), "nbf": secs(-5), "exp": secs(600)}));
    assert_eq!(get(&[("authorization", &bearer(&good))]).0, 200);
    // Any failing credential is a 401, whatever else the request carries.
    let (st, body) = get(&[("authorization", &bearer(&good)), ("x-slurm-user-token", &forever)]);
    assert_eq!(st, 401, "a good JWT beside a bad one: {body}");
    let (st, body) = get(&[("authorization", "Bearer bursar_cred-ops"), ("x-slurm-user-token", "x.y.z.not-a-jwt")]);
    assert_eq!(st, 401, "a good token beside a bad JWT: {body}");
    let (st, body) = get(&[("authorization", "Bearer bursar_guessed"), ("x-forwarded-user", "carol")]);
    assert_eq!(st, 401, "a good proxy header beside a wrong token: {body}");
    // The scheme in any case.
    for scheme in ["bearer", "BEARER", "BeArEr"] {
        let (st, body) = get(&[("authorization", &format!("{scheme} {good}"))]);
        assert_eq!(st, 200, "{scheme}: {body}");
        let (st, body) = get(&[("authorization", &format!("{scheme} bursar_cred-ops"))]);
        assert_eq!(st, 200, "{scheme}: {body}");
    }
}
