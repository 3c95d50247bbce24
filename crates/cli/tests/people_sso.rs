//! People in a browser (issue 45, item 2): Debian's Apache with mod_auth_openidc in front of `bursar
//! serve`, configured by `integrations/apache/bursar-sso.conf` as the docs give it, against an
//! OpenID Connect provider stand-in that speaks the real protocol (`bursar_testkit::oidc`: discovery,
//! authorization code with PKCE S256 required, client_secret_post, ES256 ID tokens with the nonce).
//!
//! A browser (a cookie-keeping HTTP client here, and headless Chromium when it is installed) asks for
//! `/mine`; Apache sends it to the provider, the provider back with a code, Apache redeems it (the
//! provider checks the PKCE verifier) and opens a session in its cookie, then proxies to serve with
//! the person's name in `X-Forwarded-User`, which serve believes only from the proxy's address
//! (`[auth.proxy]`). Checked: the approver `bob` sees the job that waits for him and approves it
//! without the `read` power (the audit log records the answer as bob's, by proxy); he gets 403 on the
//! pool page; a header the browser forges is replaced; `carol`, a person the configuration makes a reader, gets the pool page
//! and the report; without a session nothing reaches serve.
//!
//! Needs `apache2` and `libapache2-mod-auth-openidc` (scripts/setup.sh installs them); skips, saying
//! so, without them (fails instead under CI).

#![expect(clippy::unwrap_used, clippy::panic, reason = "test: a failure stops the test with its message")]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::serve_support::*;
use bursar_testkit::oidc::{OidcProvider, form_decode};

const APACHE: &str = "/usr/sbin/apache2";
const MODULES: &str = "/usr/lib/apache2/modules";

fn installed() -> bool {
    Path::new(APACHE).is_file() && Path::new(MODULES).join("mod_auth_openidc.so").is_file()
}

/// One HTTP/1.1 answer.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// A browser's cookie jar and its requests: `Connection: close`, no redirect followed by itself.
#[derive(Debug, Default, Clone)]
struct Browser {
    cookies: BTreeMap<(String, String), String>,
}

/// `http://host:port/path?query` into (authority, path and query).
fn split_url(url: &str) -> (String, String) {
    let rest = url.strip_prefix("http://").unwrap_or_else(|| panic!("not an http URL: {url}"));
    let (host, path) = rest.split_once('/').map(|(h, p)| (h, format!("/{p}"))).unwrap_or((rest, "/".into()));
    (host.to_owned(), path)
}

fn dechunk(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = body;
    loop {
        let Some(i) = rest.windows(2).position(|w| w == b"\r\n") else { return out };
        let size = usize::from_str_radix(String::from_utf8_lossy(&rest[..i]).trim(), 16).unwrap_or(0);
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&rest[i + 2..i + 2 + size]);
        rest = &rest[i + 2 + size + 2..];
    }
}

impl Browser {
    fn request(&mut self, method: &str, url: &str, headers: &[(&str, &str)], body: &str) -> Answer {
        let (host, path) = split_url(url);
        let mut s = TcpStream::connect(&host).unwrap_or_else(|e| panic!("connect {host}: {e}"));
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let cookies: Vec<String> =
            self.cookies.iter().filter(|((h, _), _)| *h == host).map(|((_, n), v)| format!("{n}={v}")).collect();
        let mut req =
            format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nUser-Agent: bursar-test\r\n");
        // What a browser accepts when it navigates (mod_auth_openidc sends a browser to sign in, and
        // answers anything else 401); a request that says otherwise overrides it.
        if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("accept")) {
            req.push_str("Accept: text/html,application/xhtml+xml,*/*;q=0.8\r\n");
        }
        if !cookies.is_empty() {
            req.push_str(&format!("Cookie: {}\r\n", cookies.join("; ")));
        }
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
        s.write_all(req.as_bytes()).unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).unwrap();
        let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or_else(|| panic!("no header end from {url}"));
        let head = String::from_utf8_lossy(&raw[..split]).into_owned();
        let mut lines = head.lines();
        let status = lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|c| c.parse().ok()).unwrap();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let mut body = raw[split + 4..].to_vec();
        if headers.iter().any(|(k, v)| k == "transfer-encoding" && v.contains("chunked")) {
            body = dechunk(&body);
        }
        for (k, v) in &headers {
            if k == "set-cookie"
                && let Some((name, value)) = v.split(';').next().and_then(|c| c.split_once('='))
            {
                if value.is_empty() || v.to_ascii_lowercase().contains("max-age=0") {
                    self.cookies.remove(&(host.clone(), name.trim().to_owned()));
                } else {
                    self.cookies.insert((host.clone(), name.trim().to_owned()), value.trim().to_owned());
                }
            }
        }
        Answer { status, headers, body: String::from_utf8_lossy(&body).into_owned() }
    }

    fn get(&mut self, url: &str) -> Answer {
        self.request("GET", url, &[], "")
    }

    /// GET `url`, following redirects (at most ten), as a browser does; every hop is returned.
    fn follow(&mut self, url: &str) -> Vec<(String, Answer)> {
        let mut hops = Vec::new();
        let mut at = url.to_owned();
        for _ in 0..10 {
            let a = self.get(&at);
            let next = (matches!(a.status, 301 | 302 | 303 | 307)).then(|| a.header("location").unwrap().to_owned());
            hops.push((at.clone(), a));
            match next {
                Some(n) if n.starts_with('/') => {
                    let (host, _) = split_url(&at);
                    at = format!("http://{host}{n}");
                }
                Some(n) => at = n,
                None => return hops,
            }
        }
        panic!("more than ten redirects from {url}: {:?}", hops.iter().map(|h| &h.0).collect::<Vec<_>>());
    }
}

/// Apache, started from a configuration that includes the repository's `bursar-sso.conf`.
struct Apache {
    server: bursar_testkit::Server,
    port: u16,
    dir: PathBuf,
}

impl Apache {
    fn start(dir: &Path, upstream: std::net::SocketAddr, provider: &OidcProvider) -> Apache {
        let port = bursar_testkit::free_port().unwrap();
        std::fs::create_dir_all(dir.join("run")).unwrap();
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let modules = ["mpm_event", "authn_core", "authz_core", "authz_user", "headers", "proxy", "proxy_http"]
            .iter()
            .map(|m| format!("LoadModule {m}_module {MODULES}/mod_{m}.so\n"))
            .collect::<String>();
        let passphrase = format!("test-passphrase-{}-{}", std::process::id(), wall_ms());
        let conf = format!(
            "ServerRoot \"{d}\"\nServerName 127.0.0.1\nListen 127.0.0.1:{port}\nPidFile \"{d}/apache.pid\"\n\
             DefaultRuntimeDir \"{d}/run\"\nMutex file:{d}/run default\nErrorLog \"{d}/error.log\"\n\
             LogLevel warn auth_openidc:info\nUser www-data\nGroup www-data\n{modules}\
             LoadModule auth_openidc_module {MODULES}/mod_auth_openidc.so\n\
             Define BURSAR_UPSTREAM http://{upstream}\nDefine BURSAR_PUBLIC http://127.0.0.1:{port}\n\
             Define BURSAR_OIDC_METADATA {meta}\nDefine BURSAR_OIDC_CLIENT bursar\n\
             OIDCClientSecret client-secret-for-the-test\nOIDCCryptoPassphrase {pass}\n\
             Include \"{sso}\"\n",
            d = dir.display(),
            meta = provider.metadata_url(),
            pass = passphrase,
            sso = repo.join("integrations/apache/bursar-sso.conf").display(),
        );
        let conf_path = dir.join("httpd.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let check = Command::new(APACHE).args(["-t", "-f"]).arg(&conf_path).output().unwrap();
        assert!(check.status.success(), "apache2 -t: {}", String::from_utf8_lossy(&check.stderr));
        let server = bursar_testkit::Server::start(
            "apache2",
            Path::new(APACHE),
            &["-f".into(), conf_path.into_os_string(), "-DFOREGROUND".into()],
            &dir.join("apache.log"),
        )
        .unwrap();
        let apache = Apache { server, port, dir: dir.to_owned() };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "apache did not listen:\n{}", apache.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        apache
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn log(&self) -> String {
        format!("{}\n{}", self.server.log(), std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default())
    }
}

/// Signs `user` in through Apache and the provider, starting at `path`; returns the browser with its
/// session cookie and the final answer.
fn sign_in(apache: &Apache, provider: &OidcProvider, user: &str, path: &str) -> (Browser, Answer) {
    provider.sign_in_as(Some(user));
    let mut b = Browser::default();
    let mut hops = b.follow(&apache.url(path));
    let (first_url, first) = &hops[0];
    assert_eq!(first.status, 302, "{first_url}: {first:?}\n{}", apache.log());
    let to = first.header("location").unwrap();
    assert!(to.starts_with(&format!("{}/authorize?", provider.issuer())), "not sent to the provider: {to}");
    let q: BTreeMap<String, String> = form_decode(to.split_once('?').unwrap().1).into_iter().collect();
    assert_eq!(q.get("response_type").map(String::as_str), Some("code"), "{q:?}");
    assert_eq!(q.get("code_challenge_method").map(String::as_str), Some("S256"), "PKCE: {q:?}");
    assert!(q.contains_key("code_challenge") && q.contains_key("state") && q.contains_key("nonce"), "{q:?}");
    assert_eq!(q.get("redirect_uri"), Some(&apache.url("/oidc/callback")), "{q:?}");
    let (last_url, last) = hops.pop().unwrap();
    assert_eq!(last.status, 200, "{user} at {last_url}: {last:?}\n{}", apache.log());
    (b, last)
}

#[test]
fn an_approver_signs_in_through_apache_and_the_sites_provider_and_answers_without_read() {
    if !installed() {
        bursar_testkit::need::missing("apache2 or mod_auth_openidc", "scripts/setup.sh");
        return;
    }
    let s = Scratch::new("people-sso");
    s.write_policy(
        "approval.toml",
        "[[policy]]\nid = \"approval/big\"\ndescription = \"Big jobs need bob.\"\nkind = \"approval\"\ngpus_over = 4\napprovers = [\"bob\"]\nexpires = \"24h\"\n",
    );
    let hook = bursar_auth::TokenHash::of("people-sso-scheduler-token").to_text();
    let cfg = s.0.join("bursar.toml");
    std::fs::write(
        &cfg,
        format!(
            "[auth]\npeople = [\"approver\", \"user\"]\n\n[auth.proxy]\naddresses = [\"127.0.0.1\"]\nheader = \"X-Forwarded-User\"\n\n\
             [[principal]]\nname = \"slurmctld\"\nroles = [\"scheduler\"]\njobs = [\"*\"]\ntokens = [\"{hook}\"]\n\n\
             [[person]]\nname = \"carol\"\nroles = [\"reader\"]\n"
        ),
    )
    .unwrap();
    let server = Server::start(&s, &["--config", cfg.to_str().unwrap()]);
    let scheduler = bursar_client::Client::new(server.addr, Some("people-sso-scheduler-token".into()));
    for (id, job) in [("sso-1", "big-1"), ("sso-2", "big-2")] {
        let event = bursar_model::decode_event(&submit(id, job, "nlp", 8, 2.0)).unwrap();
        assert_eq!(
            scheduler.admit(&event).unwrap().admission.decision.decision,
            bursar_model::DecisionKind::RequireApproval
        );
    }

    let provider = OidcProvider::start("bursar", "client-secret-for-the-test").unwrap();
    let apache = Apache::start(&s.0.join("apache"), server.addr, &provider);
    provider.allow_redirect(&apache.url("/oidc/callback"));

    // Without a session nothing reaches serve: a browser is sent to sign in, a program gets a 401.
    let mut stranger = Browser::default();
    let a = stranger.get(&apache.url("/v1/pool"));
    assert_eq!(a.status, 302, "{a:?}");
    assert!(a.header("location").unwrap().starts_with(&provider.issuer()), "{a:?}");
    let a = stranger.request("GET", &apache.url("/v1/pool"), &[("Accept", "application/json")], "");
    assert_eq!(a.status, 401, "{a:?}");

    // bob signs in and sees what waits for him.
    let (mut bob, page) = sign_in(&apache, &provider, "bob", "/mine");
    assert!(page.body.contains("Waiting for <span id=\"who\">bob</span>"), "{}", page.body);
    assert!(page.body.contains("data-job=\"big-1\"") && page.body.contains("data-job=\"big-2\""), "{}", page.body);
    // The code was redeemed with its PKCE verifier, by client_secret_post, once.
    let tokens: Vec<_> = provider.requests().into_iter().filter(|r| r.path == "/token").collect();
    assert_eq!(tokens.len(), 1, "{tokens:?}");
    assert_eq!(tokens[0].status, 200, "{tokens:?}");
    assert!(tokens[0].param("code_verifier").is_some_and(|v| v.len() >= 43), "{tokens:?}");
    let mine: serde_json::Value = serde_json::from_str(&bob.get(&apache.url("/v1/pending/mine")).body).unwrap();
    assert_eq!(mine["approvals"].as_array().map(Vec::len), Some(2), "{mine}");
    // A name the browser puts in the header itself is replaced by the signed-in one.
    let forged = bob.request("GET", &apache.url("/mine"), &[("X-Forwarded-User", "alice")], "");
    assert!(forged.body.contains("Waiting for <span id=\"who\">bob</span>"), "{}", forged.body);
    // No `read` power: the pool page is not his.
    let pool = bob.get(&apache.url("/"));
    assert_eq!(pool.status, 403, "{pool:?}");

    // He answers as the page's button does: JSON, same origin, his session.
    let origin = apache.url("");
    let json = [("Content-Type", "application/json"), ("Origin", origin.as_str())];
    let a = bob.request("POST", &apache.url("/v1/jobs/big-1/approve"), &json, "{}");
    assert_eq!(a.status, 200, "{a:?}\n{}", apache.log());
    let reply: serde_json::Value = serde_json::from_str(&a.body).unwrap();
    assert_eq!(reply["by"], "bob", "{reply}");
    assert!(reply["message"].as_str().unwrap().contains("approved by bob"), "{reply}");
    // The views are at most a second old (one copy of the engine's state serves a burst of readers).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mine: serde_json::Value = serde_json::from_str(&bob.get(&apache.url("/v1/pending/mine")).body).unwrap();
        if mine["approvals"].as_array().map(Vec::len) == Some(1) {
            break;
        }
        assert!(Instant::now() < deadline, "big-1 still waits: {mine}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // The log says who answered and how they proved it.
    let story = Command::new(env!("CARGO_BIN_EXE_bursar"))
        .args(["audit", "explain", "--db"])
        .arg(s.audit())
        .arg("big-1")
        .output()
        .unwrap();
    let story = String::from_utf8_lossy(&story.stdout);
    assert!(story.contains("from: bob (proxy"), "{story}");

    // carol, a person given the reader role (a [[person]] table), gets the pool page and the report;
    // she approves nothing.
    let (mut carol, pool) = sign_in(&apache, &provider, "carol", "/");
    assert!(pool.body.contains("big-2"), "{}", pool.body);
    assert_eq!(carol.get(&apache.url("/report")).status, 200);
    let a = carol.request("POST", &apache.url("/v1/jobs/big-2/approve"), &json, "{}");
    assert_eq!(a.status, 403, "{a:?}");

    // A real browser: headless Chromium signs bob in through the same redirects and renders /mine.
    if let Some(chromium) = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].iter().find(|p| Path::new(p).is_file()) {
        provider.sign_in_as(Some("bob"));
        let dom = Command::new(chromium)
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"])
            .arg(format!("--user-data-dir={}", s.0.join("chromium").display()))
            .arg("--dump-dom")
            .arg(apache.url("/mine"))
            .output()
            .unwrap();
        let dom = String::from_utf8_lossy(&dom.stdout);
        assert!(dom.contains(">bob</span>") && dom.contains("data-job=\"big-2\""), "chromium saw:\n{dom}");
        assert!(!dom.contains("data-job=\"big-1\""), "the approved job still waits:\n{dom}");
    } else {
        bursar_testkit::need::missing("chromium", "scripts/setup.sh");
    }
    drop(apache);
}
