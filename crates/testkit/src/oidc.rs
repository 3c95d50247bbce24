//! An OpenID Connect provider stand-in for tests: the site's single sign-on, speaking the real
//! protocol to a real relying party (Apache's mod_auth_openidc in bursar's tests), on a loopback
//! port.
//!
//! What it implements, as OpenID Connect Core 1.0, Discovery 1.0 and RFC 7636 (PKCE) say:
//! - `GET /.well-known/openid-configuration`: the discovery document.
//! - `GET /jwks`: its one signing key, an EC P-256 JWK (`ES256`).
//! - `GET /authorize`: the authorization code flow. It checks `response_type=code`, the client id,
//!   the registered redirect URI, `openid` in the scope, and **requires PKCE** (`code_challenge`
//!   with `code_challenge_method=S256`); the person signed in is the one the test set
//!   ([`OidcProvider::sign_in_as`]: an SSO session already open), and the answer is the redirect to
//!   the client with `code` and the client's `state`. Anything wrong is answered the protocol's way
//!   (a redirect with `error=`, or a 400 when the redirect URI itself is wrong).
//! - `POST /token`: `grant_type=authorization_code` with `client_secret_post` authentication; the
//!   code is single-use, bound to its client and redirect URI, and the `code_verifier` must hash to
//!   its challenge. The answer holds an ID token signed with ES256 carrying `iss`, `sub`, `aud`,
//!   `exp`, `iat`, `nonce` (the one sent to `/authorize`) and `preferred_username`.
//!
//! Every request is recorded ([`OidcProvider::requests`]) so a test can check what the relying
//! party sent. One thread, one connection at a time, `Connection: close`.

use std::collections::HashMap;
use std::io::{self, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use sha2::Digest;

/// One request the provider got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcRequest {
    /// `GET` or `POST`.
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The query's or the form body's parameters, decoded.
    pub params: Vec<(String, String)>,
    /// The status it was answered with.
    pub status: u16,
}

impl OidcRequest {
    /// A parameter's value.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, Clone)]
struct Grant {
    client_id: String,
    redirect_uri: String,
    challenge: String,
    nonce: Option<String>,
    user: String,
}

struct Shared {
    issuer: String,
    client_id: String,
    client_secret: String,
    redirect_uris: Mutex<Vec<String>>,
    user: Mutex<Option<String>>,
    codes: Mutex<HashMap<String, Grant>>,
    got: Mutex<Vec<OidcRequest>>,
    key: rcgen::KeyPair,
    encoding: jsonwebtoken::EncodingKey,
    counter: AtomicU64,
    stop: AtomicBool,
}

/// A running provider; stopped on `Drop`.
pub struct OidcProvider {
    addr: SocketAddr,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for OidcProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcProvider").field("addr", &self.addr).finish()
    }
}

/// Base64url without padding (RFC 4648 §5), as JOSE writes it.
pub fn b64url(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(char::from(A[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

/// Decodes `application/x-www-form-urlencoded` (a query string or a form body).
pub fn form_decode(s: &str) -> Vec<(String, String)> {
    fn unescape(s: &str) -> String {
        let b = s.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < b.len() => {
                    match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16) {
                        Ok(v) => {
                            out.push(v);
                            i += 2;
                        }
                        Err(_) => out.push(b'%'),
                    }
                }
                c => out.push(c),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    s.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (unescape(k), unescape(v))
        })
        .collect()
}

/// Percent-encodes a query value (RFC 3986 unreserved characters kept).
pub fn form_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn now_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

struct Reply {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: String,
}

impl Reply {
    fn json(status: u16, v: &serde_json::Value) -> Reply {
        Reply {
            status,
            headers: vec![("content-type", "application/json".into()), ("cache-control", "no-store".into())],
            body: v.to_string(),
        }
    }

    fn redirect(to: String) -> Reply {
        Reply { status: 302, headers: vec![("location", to)], body: String::new() }
    }

    fn text(status: u16, body: &str) -> Reply {
        Reply { status, headers: vec![("content-type", "text/plain".into())], body: body.into() }
    }
}

impl Shared {
    fn discovery(&self) -> Reply {
        let i = &self.issuer;
        Reply::json(
            200,
            &serde_json::json!({
                "issuer": i,
                "authorization_endpoint": format!("{i}/authorize"),
                "token_endpoint": format!("{i}/token"),
                "jwks_uri": format!("{i}/jwks"),
                "response_types_supported": ["code"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["ES256"],
                "scopes_supported": ["openid", "profile", "email"],
                "token_endpoint_auth_methods_supported": ["client_secret_post"],
                "code_challenge_methods_supported": ["S256"],
                "claims_supported": ["sub", "iss", "aud", "exp", "iat", "nonce", "preferred_username"],
            }),
        )
    }

    fn jwks(&self) -> Reply {
        // An uncompressed P-256 point: 0x04, then x and y, 32 bytes each.
        let point = self.key.public_key_raw();
        let (x, y) = (point.get(1..33).unwrap_or_default(), point.get(33..65).unwrap_or_default());
        Reply::json(
            200,
            &serde_json::json!({"keys": [{
                "kty": "EC", "crv": "P-256", "x": b64url(x), "y": b64url(y),
                "kid": "test-key-1", "use": "sig", "alg": "ES256",
            }]}),
        )
    }

    fn authorize(&self, q: &[(String, String)]) -> Reply {
        let p = |k: &str| q.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let (Some(client_id), Some(redirect_uri)) = (p("client_id"), p("redirect_uri")) else {
            return Reply::text(400, "client_id and redirect_uri are required");
        };
        if client_id != self.client_id {
            return Reply::text(400, "unknown client_id");
        }
        if !self.redirect_uris.lock().map(|r| r.contains(&redirect_uri)).unwrap_or(false) {
            return Reply::text(400, "redirect_uri is not registered for this client");
        }
        let state = p("state");
        let back = |params: Vec<(&str, String)>| {
            let mut to = redirect_uri.clone();
            to.push(if to.contains('?') { '&' } else { '?' });
            let mut all = params;
            if let Some(s) = &state {
                all.push(("state", s.clone()));
            }
            to.push_str(&all.iter().map(|(k, v)| format!("{k}={}", form_encode(v))).collect::<Vec<_>>().join("&"));
            Reply::redirect(to)
        };
        let error = |code: &str, why: &str| back(vec![("error", code.into()), ("error_description", why.into())]);
        if p("response_type").as_deref() != Some("code") {
            return error("unsupported_response_type", "only the authorization code flow");
        }
        if !p("scope").is_some_and(|s| s.split(' ').any(|x| x == "openid")) {
            return error("invalid_scope", "the scope must hold openid");
        }
        let Some(challenge) = p("code_challenge") else {
            return error("invalid_request", "PKCE is required: code_challenge is missing");
        };
        if p("code_challenge_method").as_deref() != Some("S256") {
            return error("invalid_request", "PKCE: code_challenge_method must be S256");
        }
        let Some(user) = self.user.lock().ok().and_then(|u| u.clone()) else {
            return error("login_required", "nobody is signed in");
        };
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let code = b64url(&sha2::Sha256::digest(format!("{n}-{}-{challenge}", now_s()).as_bytes()));
        let grant = Grant { client_id, redirect_uri: redirect_uri.clone(), challenge, nonce: p("nonce"), user };
        if let Ok(mut c) = self.codes.lock() {
            c.insert(code.clone(), grant);
        }
        back(vec![("code", code)])
    }

    fn token(&self, form: &[(String, String)]) -> Reply {
        let p = |k: &str| form.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let error = |status: u16, code: &str, why: &str| {
            Reply::json(status, &serde_json::json!({"error": code, "error_description": why}))
        };
        if p("client_id").as_deref() != Some(self.client_id.as_str())
            || p("client_secret").as_deref() != Some(self.client_secret.as_str())
        {
            return error(401, "invalid_client", "client_secret_post authentication failed");
        }
        if p("grant_type").as_deref() != Some("authorization_code") {
            return error(400, "unsupported_grant_type", "only authorization_code");
        }
        let grant = p("code").and_then(|c| self.codes.lock().ok().and_then(|mut m| m.remove(&c)));
        let Some(g) = grant else {
            return error(400, "invalid_grant", "unknown or used code");
        };
        if g.client_id != self.client_id || p("redirect_uri").as_deref() != Some(g.redirect_uri.as_str()) {
            return error(400, "invalid_grant", "the code was issued to another client or redirect URI");
        }
        let verified = p("code_verifier").is_some_and(|v| b64url(&sha2::Sha256::digest(v.as_bytes())) == g.challenge);
        if !verified {
            return error(400, "invalid_grant", "PKCE: the code_verifier does not match the code_challenge");
        }
        let now = now_s();
        let mut claims = serde_json::json!({
            "iss": self.issuer, "sub": format!("user-{}", g.user), "aud": self.client_id,
            "exp": now + 300, "iat": now, "auth_time": now, "preferred_username": g.user,
        });
        if let Some(n) = g.nonce {
            claims["nonce"] = serde_json::Value::String(n);
        }
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
        header.kid = Some("test-key-1".into());
        match jsonwebtoken::encode(&header, &claims, &self.encoding) {
            Ok(id_token) => Reply::json(
                200,
                &serde_json::json!({
                    "access_token": format!("at-{}", self.counter.fetch_add(1, Ordering::Relaxed)),
                    "token_type": "Bearer", "expires_in": 300, "id_token": id_token,
                }),
            ),
            Err(e) => error(500, "server_error", &e.to_string()),
        }
    }
}

fn handle(mut s: TcpStream, shared: &Shared) -> io::Result<()> {
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut r = BufReader::new(s.try_clone()?);
    let Some(crate::process::Request { method, target, body, .. }) = crate::process::read_request(&mut r)? else {
        return Ok(());
    };
    let (path, query) = target.split_once('?').unwrap_or((target.as_str(), ""));
    let params = if method == "POST" { form_decode(&String::from_utf8_lossy(&body)) } else { form_decode(query) };
    let reply = match (method.as_str(), path) {
        ("GET", "/.well-known/openid-configuration") => shared.discovery(),
        ("GET", "/jwks") => shared.jwks(),
        ("GET", "/authorize") => shared.authorize(&params),
        ("POST", "/token") => shared.token(&params),
        _ => Reply::text(404, "not found"),
    };
    if let Ok(mut got) = shared.got.lock() {
        got.push(OidcRequest { method, path: path.to_owned(), params, status: reply.status });
    }
    let mut head =
        format!("HTTP/1.1 {} X\r\ncontent-length: {}\r\nconnection: close\r\n", reply.status, reply.body.len());
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes())?;
    s.write_all(reply.body.as_bytes())?;
    s.flush()
}

/// Why the provider could not start.
#[derive(Debug)]
pub struct StartError(pub String);

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StartError {}

impl OidcProvider {
    /// Starts a provider on `127.0.0.1:0` with one confidential client.
    pub fn start(client_id: &str, client_secret: &str) -> Result<OidcProvider, StartError> {
        let e = |x: &dyn std::fmt::Display| StartError(x.to_string());
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|x| e(&x))?;
        let addr = listener.local_addr().map_err(|x| e(&x))?;
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|x| e(&x))?;
        let encoding = jsonwebtoken::EncodingKey::from_ec_der(&key.serialize_der());
        let shared = Arc::new(Shared {
            issuer: format!("http://{addr}"),
            client_id: client_id.into(),
            client_secret: client_secret.into(),
            redirect_uris: Mutex::new(Vec::new()),
            user: Mutex::new(None),
            codes: Mutex::new(HashMap::new()),
            got: Mutex::new(Vec::new()),
            key,
            encoding,
            counter: AtomicU64::new(1),
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("oidc-provider".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if s.stop.load(Ordering::Relaxed) {
                        return;
                    }
                    if let Ok(c) = conn {
                        let _ = handle(c, &s);
                    }
                }
            })
            .map_err(|x| e(&x))?;
        Ok(OidcProvider { addr, shared, thread: Some(thread) })
    }

    /// The issuer: `http://127.0.0.1:PORT`.
    pub fn issuer(&self) -> String {
        self.shared.issuer.clone()
    }

    /// The discovery document's URL.
    pub fn metadata_url(&self) -> String {
        format!("{}/.well-known/openid-configuration", self.shared.issuer)
    }

    /// Registers a redirect URI of the client.
    pub fn allow_redirect(&self, uri: &str) {
        if let Ok(mut r) = self.shared.redirect_uris.lock() {
            r.push(uri.into());
        }
    }

    /// Who is signed in from now on (`None`: nobody, and `/authorize` answers `login_required`).
    pub fn sign_in_as(&self, user: Option<&str>) {
        if let Ok(mut u) = self.shared.user.lock() {
            *u = user.map(str::to_owned);
        }
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<OidcRequest> {
        self.shared.got.lock().map(|g| g.clone()).unwrap_or_default()
    }
}

impl Drop for OidcProvider {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64url_and_form_decoding_are_the_protocols() {
        assert_eq!(b64url(b""), "");
        assert_eq!(b64url(b"f"), "Zg");
        assert_eq!(b64url(b"fo"), "Zm8");
        assert_eq!(b64url(b"foo"), "Zm9v");
        assert_eq!(b64url(&[0xfb, 0xff]), "-_8");
        // RFC 7636, appendix B.
        let v = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
        assert_eq!(b64url(&sha2::Sha256::digest(v.as_bytes())), "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM");
        assert_eq!(
            form_decode("a=1&redirect_uri=http%3A%2F%2Fx%2Fcb&s=a+b&e="),
            vec![
                ("a".into(), "1".into()),
                ("redirect_uri".into(), "http://x/cb".into()),
                ("s".into(), "a b".into()),
                ("e".into(), String::new())
            ]
        );
        assert_eq!(form_encode("http://x/cb?a b"), "http%3A%2F%2Fx%2Fcb%3Fa%20b");
    }
}
