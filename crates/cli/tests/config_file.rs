//! The site's configuration file through the real binary: `bursar serve --config` alone starts a
//! server, a flag overrides the file, `bursar config check` reports mistakes as file:line:col with
//! a did-you-mean, `bursar config show` redacts credentials, a reload says what needs a restart,
//! and serve tells systemd when it is ready.

#![expect(clippy::unwrap_used, reason = "integration test")]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::serve_support::*;

fn text(o: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn site(s: &Scratch, listen: &str, extra: &str) -> std::path::PathBuf {
    let token = bursar_auth::TokenHash::of("bursar_config-test-admin").to_text();
    let path = s.0.join("bursar.toml");
    std::fs::write(
        &path,
        format!(
            "[serve]\npolicies = \"policies\"\naudit = \"audit.db\"\nlisten = \"{listen}\"\nport_file = \"port\"\nallow_empty = true\ntick = \"250ms\"\n\n[clock]\nmax_skew = \"1m\"\n\n[[principal]]\nname = \"ops\"\nroles = [\"admin\", \"reader\", \"scheduler\"]\ntokens = [\"{token}\"]\n{extra}"
        ),
    )
    .unwrap();
    path
}

#[test]
fn the_file_alone_starts_serve_and_a_flag_overrides_it() {
    let s = Scratch::new("config-alone");
    // The file names a port nobody can bind; the flag's wins.
    let cfg = site(&s, "127.0.0.1:1", "");
    let sock = s.0.join("notify.sock");
    let rx = std::os::unix::net::UnixDatagram::bind(&sock).unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_bursar"))
        .args(["serve", "--config", cfg.to_str().unwrap(), "--listen", "127.0.0.1:0"])
        .env("NOTIFY_SOCKET", &sock)
        .current_dir(&s.0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Ready is told once the policies compiled and the log is open: the port file exists by then.
    let mut buf = [0u8; 256];
    let n = rx.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"READY=1");
    let port: u16 = std::fs::read_to_string(s.0.join("port")).unwrap().trim().parse().unwrap();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let admin =
        Conn::connect(addr, Some("bursar_config-test-admin")).unwrap().request("POST", "/v1/reload", b"").unwrap();
    assert_eq!(admin.status, 200, "{}", admin.text());
    assert!(admin.text().contains("1 principal(s) in force"), "{}", admin.text());
    // A change a reload cannot take is named.
    std::fs::write(&cfg, std::fs::read_to_string(&cfg).unwrap().replace("tick = \"250ms\"", "tick = \"2s\"")).unwrap();
    let r = Conn::connect(addr, Some("bursar_config-test-admin")).unwrap().request("POST", "/v1/reload", b"").unwrap();
    assert!(r.text().contains("changed but not taken until a restart: [serve]"), "{}", r.text());
    // A relative path in the file is relative to the file's folder.
    assert!(s.0.join("audit.db").exists());
    // A typo in the configuration raises the configuration's alert, not the policies' (issue 45:
    // on-call was sent to the policy files).
    let good = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, good.replace("[clock]", "[clokc]")).unwrap();
    let r = Conn::connect(addr, Some("bursar_config-test-admin")).unwrap().request("POST", "/v1/reload", b"").unwrap();
    assert_eq!(r.status, 422, "{}", r.text());
    let metrics =
        Conn::connect(addr, Some("bursar_config-test-admin")).unwrap().request("GET", "/metrics", b"").unwrap();
    let text = metrics.text();
    assert!(text.contains("bursar_last_reload_failed{part=\"config\"} 1"), "{text}");
    assert!(text.contains("bursar_last_reload_failed{part=\"policies\"} 0"), "{text}");
    std::fs::write(&cfg, good).unwrap();
    let r = Conn::connect(addr, Some("bursar_config-test-admin")).unwrap().request("POST", "/v1/reload", b"").unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let text =
        Conn::connect(addr, Some("bursar_config-test-admin")).unwrap().request("GET", "/metrics", b"").unwrap().text();
    assert!(text.contains("bursar_last_reload_failed{part=\"config\"} 0"), "{text}");
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let n = rx.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"STOPPING=1");
}

#[test]
fn check_reports_mistakes_where_they_are_and_show_redacts() {
    let s = Scratch::new("config-check");
    let cfg = site(
        &s,
        "127.0.0.1:7878",
        "\n[notify]\npublic_url = \"http://b\"\nresnd = \"1m\"\n[notify.webhook]\nurl = \"http://127.0.0.1:9/h\"\n",
    );
    let out = bursar(&["config", "check", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("bursar.toml:19:1: error: [notify]: unknown field `resnd`"), "{}", text(&out));
    assert!(text(&out).contains("did you mean `resend`?"), "{}", text(&out));
    std::fs::write(&cfg, std::fs::read_to_string(&cfg).unwrap().replace("resnd", "resend")).unwrap();
    let out = bursar(&["config", "check", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("valid (1 principal(s), notices)"), "{}", text(&out));
    let out = bursar(&["config", "show", cfg.to_str().unwrap()]);
    let shown = text(&out);
    assert!(shown.contains("tick = \"250ms\"") && shown.contains("snapshot_every = \"30s\""), "{shown}");
    assert!(shown.contains("stale_after = \"7d\""), "the default bound of a stale reservation: {shown}");
    let full = bursar_auth::TokenHash::of("bursar_config-test-admin").to_text();
    assert!(!shown.contains(&full) && shown.contains("(redacted)"), "{shown}");
    // What show prints is itself a configuration the file's readers accept.
    let again = s.0.join("shown.toml");
    std::fs::write(&again, shown.replace("(redacted)", "").replace("…", "")).unwrap();
    let parsed = bursar_config::load(&again);
    assert!(
        parsed.as_ref().err().is_none_or(|ds| ds.iter().all(|d| d.message.contains("64 hex digits"))),
        "{parsed:?}"
    );
}

#[test]
fn serve_whose_policies_do_not_compile_never_says_ready() {
    // A Type=notify unit counts serve as started on READY=1 alone: it must not come before the
    // policies compiled. A set that does not compile stops serve with the error, and nothing is sent.
    let s = Scratch::new("config-not-ready");
    let cfg = site(&s, "127.0.0.1:0", "");
    std::fs::write(s.policies().join("broken.toml"), "[[policy]]\nid = \"broken\"\nkind = \"no-such-family\"\n")
        .unwrap();
    let sock = s.0.join("notify.sock");
    let rx = std::os::unix::net::UnixDatagram::bind(&sock).unwrap();
    rx.set_nonblocking(true).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bursar"))
        .args(["serve", "--config", cfg.to_str().unwrap()])
        .env("NOTIFY_SOCKET", &sock)
        .current_dir(&s.0)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("broken.toml"), "{}", text(&out));
    let mut buf = [0u8; 256];
    let said = rx.recv(&mut buf).map(|n| String::from_utf8_lossy(&buf[..n]).into_owned());
    assert!(said.is_err(), "serve told systemd {said:?} with policies that do not compile");
}
