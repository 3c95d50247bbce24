//! The Debian package, built, installed and run on this machine (issue 32, item 2).
//!
//! `scripts/build-deb.sh --binary` packages the bursar these tests built; then, as root: `dpkg -i`,
//! the maintainer scripts' user and modes, `systemd-analyze verify` of the three units (and their
//! offline security exposure), the example policies and configuration, and serve started **the way
//! its unit's `ExecStart` does**: the command read from the installed unit, as the unit's `User`,
//! with the unit's environment, working folder and umask, with no capability and no new privileges,
//! under a read-only root with only its `StateDirectory`, `LogsDirectory` and `RuntimeDirectory`
//! writable, a private `/tmp` and no `/home` (a mount namespace: `ProtectSystem=strict`,
//! `PrivateTmp`, `ProtectHome`), since systemd is not PID 1 here. It must report `READY=1` on
//! `$NOTIFY_SOCKET` (only once its policies compiled and its audit log is open), admit a job, reload
//! on `SIGHUP` (`ExecReload`), and stop cleanly on `SIGTERM`; `bursar config check` and `bursar
//! doctor` accept the installation. Then `dpkg -r` (configuration and data kept) and `dpkg --purge` (data removed), exactly as
//! docs/operations.md says; a site's policy in `/etc/bursar/policies`, even one named like an
//! example, survives both (issue 45, item 3). The binary is stripped, its symbols in the -dbgsym
//! package, and every `docs/X.md` the binary or a unit names is installed as
//! `/usr/share/doc/bursar/X.md`.
//!
//! Upgrades (issue 45, item 5): the package is installed over the log of each earlier schema
//! (`tests/data/audit-schemas/v1..v6.db`): postinst copies it, migrates it before its start of serve,
//! the decisions and `verify` are unchanged; then a downgrade (the same binary packaged as an older
//! version: no second build) is unpacked and its postrm has put the copy back before the older
//! package's postinst would start serve.
//!
//! What it does not exercise: the seccomp filter, the namespace and kernel-protection settings and
//! `Restart=`, which need systemd itself; `systemd-analyze` checks that systemd accepts them.
//!
//! It leaves the machine as it found it, pass or fail: a guard purges the package, stops serve by
//! PID and removes the `bursar` user it created, whatever happens. Not root, or no cargo-deb: it
//! skips, saying so (under `CI=true`, as `.ci/run` sets, it fails instead: `bursar_testkit::need`). A machine that
//! already has a bursar package, user data in /var/lib/bursar or an /etc/bursar is left alone.

#![expect(clippy::unwrap_used, clippy::panic, reason = "test: a failure stops the test with its message")]

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const UNITS: [&str; 3] = ["bursar-serve.service", "bursar-slurm-watch.service", "bursar-slurm-enforce.service"];
/// What the package owns or makes outside /usr: none may exist before the test.
const PLACES: [&str; 6] = [
    "/etc/bursar",
    "/etc/default/bursar-slurm",
    "/var/lib/bursar",
    "/var/lib/bursar-slurm-enforce",
    "/var/log/bursar",
    "/run/bursar",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(cmd: &mut Command) -> Output {
    let shown = format!("{cmd:?}");
    let o = cmd.output().unwrap_or_else(|e| panic!("cannot run {shown}: {e}"));
    assert!(
        o.status.success(),
        "{shown} failed ({:?}):\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

fn stdout(cmd: &mut Command) -> String {
    String::from_utf8_lossy(&run(cmd).stdout).into_owned()
}

fn sh(script: &str) -> Command {
    let mut c = Command::new("sh");
    c.args(["-c", script]);
    c
}

fn on_path(bin: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {bin}")]).output().is_ok_and(|o| o.status.success())
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn package_status() -> Option<String> {
    let o = Command::new("dpkg-query").args(["-W", "-f=${Status}", "bursar"]).output().ok()?;
    o.status.success().then(|| String::from_utf8_lossy(&o.stdout).into_owned())
}

fn user_exists(name: &str) -> bool {
    Command::new("getent").args(["passwd", name]).output().is_ok_and(|o| o.status.success())
}

fn mode_owner(p: &str) -> (u32, String, String) {
    let m = std::fs::metadata(p).unwrap_or_else(|e| panic!("{p}: {e}"));
    let name = |kind: &str, id: u32| {
        stdout(Command::new("getent").args([kind, &id.to_string()])).split(':').next().unwrap().to_owned()
    };
    (m.permissions().mode() & 0o7777, name("passwd", m.uid()), name("group", m.gid()))
}

/// The files systemd's helpers keep outside the package: enable links and their state.
fn systemd_state() -> Vec<String> {
    let mut out = Vec::new();
    for dir in [
        "/etc/systemd/system",
        "/var/lib/systemd/deb-systemd-helper-enabled",
        "/var/lib/systemd/deb-systemd-helper-masked",
    ] {
        if let Ok(o) = Command::new("find").arg(dir).output() {
            out.extend(String::from_utf8_lossy(&o.stdout).lines().filter(|l| l.contains("bursar")).map(str::to_owned));
        }
    }
    out.sort();
    out
}

/// Puts the machine back, pass or fail: serve stopped by PID, the package purged, the user this
/// test made removed, and anything left in the package's places.
struct Machine {
    serve: Option<Child>,
    installed: bool,
    user_existed: bool,
}

impl Drop for Machine {
    fn drop(&mut self) {
        if let Some(mut c) = self.serve.take() {
            let _ = Command::new("kill").arg("-KILL").arg(c.id().to_string()).status();
            let _ = c.wait();
        }
        if self.installed || package_status().is_some() {
            let _ = Command::new("dpkg").args(["--purge", "bursar"]).env("DEBIAN_FRONTEND", "noninteractive").output();
        }
        if !self.user_existed && user_exists("bursar") {
            let _ = Command::new("deluser").args(["--system", "--quiet", "bursar"]).output();
            let _ = Command::new("delgroup").args(["--system", "--quiet", "bursar"]).output();
        }
        for p in PLACES {
            let _ = std::fs::remove_dir_all(p).or_else(|_| std::fs::remove_file(p));
        }
    }
}

/// A unit file's `[Service]` settings, in order (a key may repeat).
struct Unit(Vec<(String, String)>);

impl Unit {
    fn read(path: &str) -> Unit {
        let text = std::fs::read_to_string(path).unwrap();
        let mut section = String::new();
        let mut out = Vec::new();
        for line in text.lines().map(str::trim) {
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            if line.starts_with('[') {
                section = line.to_owned();
            } else if section == "[Service]"
                && let Some((k, v)) = line.split_once('=')
            {
                out.push((k.to_owned(), v.to_owned()));
            }
        }
        Unit(out)
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    fn all(&self, key: &str) -> Vec<&str> {
        self.0.iter().filter(|(k, _)| k == key).map(|(_, v)| v.as_str()).collect()
    }
}

/// Where dpkg put the unit files (Debian 12: /lib/systemd/system; later, /usr/lib/systemd/system).
fn unit_path(name: &str) -> String {
    ["/lib/systemd/system", "/usr/lib/systemd/system"]
        .iter()
        .map(|d| format!("{d}/{name}"))
        .find(|p| Path::new(p).is_file())
        .unwrap_or_else(|| panic!("{name} is not installed"))
}

fn wait_for<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn http(port: u16, method: &str, path: &str, body: &str) -> (u16, String) {
    let c = bursar_http::Client::plain(([127, 0, 0, 1], port).into(), bursar_http::Auth::bearer(None), None);
    let r = bursar_client::Conn::over(c).request(method, path, body.as_bytes()).unwrap();
    (r.status, r.text())
}

fn skip(why: &str) {
    bursar_testkit::need::missing(
        &format!("what the Debian package test needs ({why})"),
        "scripts/setup.sh, run as root",
    );
}

#[test]
fn the_package_installs_serve_runs_as_its_unit_says_and_removal_keeps_or_purges_as_documented() {
    if !is_root() {
        return skip("it installs a package and makes a system user: run it as root");
    }
    for bin in ["dpkg", "dpkg-deb", "cargo-deb", "unshare", "setpriv", "adduser"] {
        if !on_path(bin) {
            return skip(&format!("`{bin}` is not installed (scripts/setup.sh installs what the test needs)"));
        }
    }
    if let Some(s) = package_status() {
        return skip(&format!("a bursar package is on this machine already ({s}); the test would disturb it"));
    }
    if let Some(p) = PLACES.iter().find(|p| Path::new(p).exists()) {
        return skip(&format!("{p} exists already; the test would disturb it"));
    }
    let before = systemd_state();
    let mut machine = Machine { serve: None, installed: false, user_existed: user_exists("bursar") };
    let work = tempdir("bursar-deb-test");

    // Build: the binary these tests built, man pages and completions from it.
    let deb = stdout(
        Command::new(root().join("scripts/build-deb.sh"))
            .args(["--fast", "--binary", env!("CARGO_BIN_EXE_bursar"), "--out"])
            .arg(&work.0),
    );
    let deb = deb.lines().last().unwrap().trim().to_owned();
    check_contents(&deb, &work.0);

    // Install.
    machine.installed = true;
    run(Command::new("dpkg").args(["-i", &deb]).env("DEBIAN_FRONTEND", "noninteractive"));
    assert_eq!(package_status().as_deref(), Some("install ok installed"));
    let pw = stdout(Command::new("getent").args(["passwd", "bursar"]));
    let fields: Vec<&str> = pw.trim().split(':').collect();
    assert_eq!(fields.get(5..7), Some(&["/var/lib/bursar", "/usr/sbin/nologin"][..]), "{pw}");
    assert!(fields[2].parse::<u32>().unwrap() < 1000, "bursar is not a system user: {pw}");
    assert_eq!(mode_owner("/var/lib/bursar"), (0o750, "bursar".into(), "bursar".into()));
    assert_eq!(mode_owner("/var/log/bursar"), (0o750, "bursar".into(), "bursar".into()));
    assert_eq!(mode_owner("/etc/bursar"), (0o750, "root".into(), "bursar".into()));
    assert_eq!(mode_owner("/etc/bursar/bursar.toml"), (0o640, "root".into(), "bursar".into()));
    // Serve is enabled (started too, where systemd runs); the agents wait for the site.
    assert!(Path::new("/etc/systemd/system/multi-user.target.wants/bursar-serve.service").exists());
    for agent in &UNITS[1..] {
        assert!(
            !Path::new(&format!("/etc/systemd/system/multi-user.target.wants/{agent}")).exists(),
            "{agent} enabled"
        );
    }

    verify_units();
    for u in UNITS {
        let unit = Unit::read(&unit_path(u));
        // What the issue asks of each unit: an own (non-root) user, a StateDirectory, a read-only
        // system and a restart whatever the exit.
        assert!(unit.get("User").is_some_and(|u| u != "root" && !u.is_empty()), "{u}: no own user");
        assert!(unit.get("StateDirectory").is_some_and(|d| !d.is_empty()), "{u}: no StateDirectory");
        assert_eq!(unit.get("ProtectSystem"), Some("strict"), "{u}");
        assert_eq!(unit.get("Restart"), Some("always"), "{u}");
        assert_eq!(unit.get("NoNewPrivileges"), Some("yes"), "{u}");
        assert_eq!(unit.get("CapabilityBoundingSet"), Some(""), "{u}");
    }

    // The example set and the example configuration.
    // The site's policy folder: made, empty, the site's. The examples check and pass their tests.
    assert_eq!(mode_owner("/etc/bursar/policies"), (0o750, "root".into(), "bursar".into()));
    assert_eq!(std::fs::read_dir("/etc/bursar/policies").unwrap().count(), 0, "/etc/bursar/policies is not empty");
    run(Command::new("/usr/bin/bursar").args(["check", "/usr/share/doc/bursar/examples/policies"]));
    run(Command::new("/usr/bin/bursar").args(["test", "/usr/share/doc/bursar/examples/policies"]));
    let checked = stdout(Command::new("/usr/bin/bursar").args(["config", "check", "/etc/bursar/bursar.toml"]));
    assert!(checked.contains("valid"), "{checked}");

    // Serve, as its unit runs it.
    let unit = Unit::read(&unit_path("bursar-serve.service"));
    assert_eq!(unit.get("Type"), Some("notify"));
    assert_eq!(unit.get("ExecStart"), Some("/usr/bin/bursar serve --config /etc/bursar/bursar.toml"));
    // systemd's own socket is /run/systemd/notify: under /run, which the unit's PrivateTmp does not
    // hide (a socket in this test's folder under /tmp would be out of serve's sight).
    let notify_dir = TempDir(PathBuf::from(format!("/run/bursar-package-test-{}", std::process::id())));
    std::fs::create_dir(&notify_dir.0).unwrap();
    std::fs::set_permissions(&notify_dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    let notify_path = notify_dir.0.join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    std::fs::set_permissions(&notify_path, std::fs::Permissions::from_mode(0o666)).unwrap();
    notify.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let log = work.0.join("serve.log");
    machine.serve = Some(start_as_unit(&unit, &notify_path, &log));
    let port: u16 = wait_for(60, "serve's port file", || {
        if let Some(c) = machine.serve.as_mut()
            && let Ok(Some(st)) = c.try_wait()
        {
            panic!("serve exited ({st}):\n{}", std::fs::read_to_string(&log).unwrap_or_default());
        }
        std::fs::read_to_string("/run/bursar/port").ok().and_then(|s| s.trim().parse().ok())
    });
    // Type=notify: READY=1 comes once the policies compiled and the audit log is open, so the
    // first request after it is answered (no polling of /healthz).
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(60);
    let said = loop {
        if let Some(c) = machine.serve.as_mut()
            && let Ok(Some(st)) = c.try_wait()
        {
            panic!("serve exited ({st}):\n{}", std::fs::read_to_string(&log).unwrap_or_default());
        }
        if let Ok(n) = notify.recv(&mut buf) {
            let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
            if msg.lines().any(|l| l == "READY=1") {
                break msg;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no READY=1 on $NOTIFY_SOCKET; serve's log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    };
    eprintln!("debian_package: serve said {said:?}");
    assert!(Path::new("/var/lib/bursar/audit.db").is_file(), "READY=1 before the audit log was open");
    let (status, body) = http(port, "GET", "/healthz", "");
    assert_eq!((status, body.as_str()), (200, "ok\n"), "serve said READY=1 but is not healthy");

    // Admit a job through the example policies, with no credential: loopback, no principals.
    let now = bursar_model::Timestamp(
        i64::try_from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()).unwrap(),
    );
    let submit = format!(
        r#"{{"id":"pkg-sub-1","time":"{now}","type":"job.submitted","job":{{"id":"pkg-1","project":"nlp","user":"alice","queue":"batch","gpus":2,"gpu_type":"H200","gpu_mem_gb":141,"nodes":1,"requested_hours":1.0,"stage":"finetune","model_params_b":7.0,"image":"registry/llm:1.4","dataset":"ds-42","script_hash":"sha256:ab12","ready":{{"image":true,"data":true,"script":true}},"deferrable":false}}}}"#
    );
    let (status, body) = http(port, "POST", "/v1/admit", &submit);
    assert_eq!(status, 200, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["decision"], "allow", "{answer}");
    assert_eq!(answer["admission"], true, "{answer}");

    // The site puts its own policy in, named like an example (issue 45: purge deleted such a file).
    for f in ["quota.toml", "tags.toml"] {
        std::fs::copy(format!("/usr/share/doc/bursar/examples/policies/{f}"), format!("/etc/bursar/policies/{f}"))
            .unwrap();
    }
    // ExecReload: SIGHUP rereads the policies (and the configuration).
    let pid = machine.serve.as_ref().unwrap().id();
    let reload = unit.get("ExecReload").unwrap().replace("$MAINPID", &pid.to_string());
    run(&mut sh(&reload));
    wait_for(30, "the SIGHUP reload", || {
        let (_, b) = http(port, "GET", "/v1/policies", "");
        let v: serde_json::Value = serde_json::from_str(&b).ok()?;
        (v["last_reload"]["cause"] == "sighup").then_some(())
    });
    let (_, b) = http(port, "GET", "/v1/policies", "");
    assert!(b.contains("quota/monthly-gpu-hours"), "the site's policy is not in force after the reload: {b}");

    // Stop as systemd does (SIGTERM): it drains, snapshots and exits 0.
    let mut child = machine.serve.take().unwrap();
    run(Command::new("kill").args(["-TERM", &child.id().to_string()]));
    let st = wait_for(60, "serve to exit", || child.try_wait().unwrap());
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(st.success(), "serve exited {st}:\n{log_text}");
    // Systemd removes the RuntimeDirectory when the service stops.
    std::fs::remove_dir_all("/run/bursar").unwrap();
    assert_eq!(mode_owner("/var/lib/bursar/audit.db"), (0o640, "bursar".into(), "bursar".into()));
    let verify = stdout(Command::new("/usr/bin/bursar").args(["audit", "verify", "--db", "/var/lib/bursar/audit.db"]));
    assert!(verify.contains("verifies"), "{verify}");
    let story =
        stdout(Command::new("/usr/bin/bursar").args(["audit", "explain", "--db", "/var/lib/bursar/audit.db", "pkg-1"]));
    assert!(story.contains("pkg-sub-1"), "{story}");
    // The installation as `bursar doctor` sees it: configuration, policies, log and modes all ok.
    let doctor = stdout(Command::new("/usr/bin/bursar").args(["doctor", "--config", "/etc/bursar/bursar.toml"]));
    assert!(!doctor.contains("FAIL"), "{doctor}");

    // dpkg -r: the program goes; the configuration, the audit log and the user stay.
    run(Command::new("dpkg").args(["-r", "bursar"]).env("DEBIAN_FRONTEND", "noninteractive"));
    assert_eq!(package_status().as_deref(), Some("deinstall ok config-files"));
    for gone in ["/usr/bin/bursar", "/usr/share/bursar", "/usr/share/man/man1/bursar.1.gz"] {
        assert!(!Path::new(gone).exists(), "{gone} is still there after dpkg -r");
    }
    for u in UNITS {
        for d in ["/lib", "/usr/lib"] {
            assert!(!Path::new(&format!("{d}/systemd/system/{u}")).exists(), "{u} is still there after dpkg -r");
        }
    }
    for kept in [
        "/etc/bursar/bursar.toml",
        "/etc/bursar/policies/quota.toml",
        "/etc/default/bursar-slurm",
        "/var/lib/bursar/audit.db",
    ] {
        assert!(Path::new(kept).exists(), "{kept} is gone after dpkg -r");
    }
    assert!(user_exists("bursar"));

    // dpkg --purge: the configuration and the data go too, the site's policy stays; the user stays
    // (Debian's habit).
    run(Command::new("dpkg").args(["--purge", "bursar"]).env("DEBIAN_FRONTEND", "noninteractive"));
    machine.installed = false;
    assert_eq!(package_status(), None);
    assert!(Path::new("/etc/bursar/policies/quota.toml").is_file(), "dpkg --purge deleted the site's policy");
    assert!(!Path::new("/etc/bursar/bursar.toml").exists(), "bursar.toml is still there after dpkg --purge");
    for p in PLACES.iter().filter(|p| **p != "/etc/bursar") {
        assert!(!Path::new(p).exists(), "{p} is still there after dpkg --purge");
    }
    std::fs::remove_dir_all("/etc/bursar").unwrap();
    assert!(user_exists("bursar"), "purge removed the user, which docs/operations.md says it keeps");
    assert_eq!(systemd_state(), before, "systemd's enable links and state are not as they were");

    upgrades_over_each_earlier_schema(&mut machine, &deb, &work.0);
    assert_eq!(systemd_state(), before, "systemd's enable links and state are not as they were");
}

/// The `user_version` of an SQLite file (its header, bytes 60..64): the audit log's schema version
/// as a file a downgrade restores holds it (no WAL beside it).
fn schema_of(path: &Path) -> u32 {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    u32::from_be_bytes([b[60], b[61], b[62], b[63]])
}

fn decisions_in(path: &Path) -> i64 {
    let c = rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    c.query_row("SELECT count(*) FROM decisions", [], |r| r.get(0)).unwrap()
}

/// Issue 45, item 5: install over the log of each earlier schema, migrated (a copy first) before
/// serve would start, decisions and `verify` unchanged; then a downgrade puts the copy back before
/// the older package's postinst. The "older" package is this one repacked under a lower version (no
/// second build). The first schema is installed fresh over its log; each next one is an upgrade
/// from the older package the previous downgrade left unpacked.
fn upgrades_over_each_earlier_schema(machine: &mut Machine, deb: &str, work: &Path) {
    let raw = work.join("older-raw");
    run(Command::new("dpkg-deb").args(["-R", deb]).arg(&raw));
    let control = raw.join("DEBIAN/control");
    let text = std::fs::read_to_string(&control).unwrap();
    let version = text.lines().find_map(|l| l.strip_prefix("Version: ")).unwrap().to_owned();
    std::fs::write(&control, text.replace(&format!("Version: {version}"), "Version: 0.0.1-1")).unwrap();
    let old = work.join("bursar_0.0.1-1_older.deb");
    run(Command::new("dpkg-deb").args(["-Zgzip", "-z1", "-b"]).arg(&raw).arg(&old));
    let old = old.display().to_string();
    let fixtures = root().join("tests/data/audit-schemas");
    let db = Path::new("/var/lib/bursar/audit.db");
    for v in 1..=6u32 {
        let fixture = fixtures.join(format!("v{v}.db"));
        assert_eq!(schema_of(&fixture), v, "{}", fixture.display());
        // What this bursar makes of the fixture, migrated by hand in a scratch copy.
        let scratch = work.join(format!("scratch-v{v}.db"));
        std::fs::copy(&fixture, &scratch).unwrap();
        let decisions = decisions_in(&scratch);
        run(Command::new(env!("CARGO_BIN_EXE_bursar")).args(["audit", "migrate", "--db"]).arg(&scratch));
        let expected = stdout(
            Command::new(env!("CARGO_BIN_EXE_bursar"))
                .args(["audit", "query", "--format", "json", "--db"])
                .arg(&scratch),
        );

        // A site's log of schema v, then the package installed over it (or upgraded to).
        std::fs::create_dir_all("/var/lib/bursar").unwrap();
        for side in ["-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("/var/lib/bursar/audit.db{side}"));
        }
        std::fs::copy(&fixture, db).unwrap();
        machine.installed = true;
        let said = stdout(Command::new("dpkg").args(["-i", deb]).env("DEBIAN_FRONTEND", "noninteractive"));
        assert!(said.contains("migrated /var/lib/bursar/audit.db"), "v{v}: {said}");
        assert_eq!(mode_owner("/var/lib/bursar/audit.db"), (0o640, "bursar".into(), "bursar".into()), "v{v}");
        let verify =
            stdout(Command::new("/usr/bin/bursar").args(["audit", "verify", "--db", "/var/lib/bursar/audit.db"]));
        assert!(verify.contains("verifies"), "v{v}: {verify}");
        let found = stdout(Command::new("/usr/bin/bursar").args([
            "audit",
            "query",
            "--format",
            "json",
            "--db",
            "/var/lib/bursar/audit.db",
        ]));
        assert_eq!(found, expected, "v{v}: the migrated log's decisions differ from a migration by hand");
        assert_eq!(found.lines().count() as i64, decisions, "v{v}: decisions lost or added by the migration");
        let mark = std::fs::read_to_string("/var/lib/bursar/pre-upgrade/last-migration").unwrap();
        assert!(mark.contains(&format!("version={version}\n")), "v{v}: {mark}");
        let backup = PathBuf::from(mark.lines().find_map(|l| l.strip_prefix("backup=")).unwrap());
        assert_eq!(schema_of(&backup), v, "v{v}: the copy taken before the migration is not of the old schema");
        assert_eq!(decisions_in(&backup), decisions, "v{v}: the copy lacks decisions");
        if v == 1 {
            // Installed again at the same version: nothing left to migrate, no second copy.
            let again = stdout(Command::new("dpkg").args(["-i", deb]).env("DEBIAN_FRONTEND", "noninteractive"));
            assert!(!again.contains("migrated /var/lib/bursar/audit.db"), "v{v}: migrated twice: {again}");
        }

        // The downgrade, up to the point where the older package's postinst would start serve.
        let said = stdout(Command::new("dpkg").args(["--unpack", &old]).env("DEBIAN_FRONTEND", "noninteractive"));
        assert!(said.contains("restored /var/lib/bursar/audit.db"), "v{v}: {said}");
        assert_eq!(schema_of(db), v, "v{v}: the downgrade did not restore the copy taken before the migration");
        assert_eq!(
            std::fs::read(db).unwrap(),
            std::fs::read(&backup).unwrap(),
            "v{v}: restored file differs from the copy"
        );
        assert_eq!(mode_owner("/var/lib/bursar/audit.db"), (0o640, "bursar".into(), "bursar".into()), "v{v}");
        let aside = std::fs::read_dir("/var/lib/bursar")
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("audit.db.rolled-back-"))
            .count();
        assert!(aside >= 1, "v{v}: the newer log was not kept beside the restored one");
        for f in std::fs::read_dir("/var/lib/bursar").unwrap().flatten() {
            if f.file_name().to_string_lossy().starts_with("audit.db.rolled-back-") {
                let _ = std::fs::remove_file(f.path());
            }
        }
    }
    run(Command::new("dpkg").args(["--purge", "bursar"]).env("DEBIAN_FRONTEND", "noninteractive"));
    machine.installed = false;
    let _ = std::fs::remove_dir_all("/etc/bursar");
    assert!(!Path::new("/var/lib/bursar").exists(), "purge left /var/lib/bursar");
}

/// The package's files, modes, conffiles and dependencies; the man pages are the binary's own.
fn check_contents(deb: &str, work: &Path) {
    let list = stdout(Command::new("dpkg-deb").args(["-c", deb]));
    let has = |path: &str, mode: &str| {
        assert!(
            list.lines().any(|l| l.starts_with(mode) && l.ends_with(&format!(".{path}"))),
            "{path} ({mode}) is not in the package:\n{list}"
        );
    };
    has("/usr/bin/bursar", "-rwxr-xr-x");
    for m in ["bursar", "bursar-serve", "bursar-slurm-watch", "bursar-slurm-enforce", "bursar-audit-backup"] {
        has(&format!("/usr/share/man/man1/{m}.1.gz"), "-rw-r--r--");
    }
    has("/usr/share/bash-completion/completions/bursar", "-rw-r--r--");
    has("/usr/share/zsh/vendor-completions/_bursar", "-rw-r--r--");
    has("/usr/share/fish/vendor_completions.d/bursar.fish", "-rw-r--r--");
    has("/etc/bursar/bursar.toml", "-rw-r-----");
    has("/usr/share/doc/bursar/examples/policies/quota.toml", "-rw-r--r--");
    has("/usr/share/doc/bursar/examples/prices.toml", "-rw-r--r--");
    // The site's policy folder is not the package's: no file of it is in the package.
    assert!(!list.contains("./etc/bursar/policies/"), "the package ships files into the site's policy folder:\n{list}");
    has("/etc/default/bursar-slurm", "-rw-r--r--");
    has("/usr/share/bursar/slurm/job_submit.lua", "-rw-r--r--");
    has("/usr/share/bursar/slurm/cli_filter.lua", "-rw-r--r--");
    has("/usr/share/bursar/slurm/prolog-dcgm.sh", "-rwxr-xr-x");
    has("/usr/share/bursar/slurm/epilog-dcgm.sh", "-rwxr-xr-x");
    has("/usr/share/bursar/prometheus/bursar-alerts.yml", "-rw-r--r--");
    has("/usr/share/bursar/apache/bursar-sso.conf", "-rw-r--r--");
    has("/usr/share/doc/bursar/operations.md", "-rw-r--r--");
    has("/usr/share/doc/bursar/copyright", "-rw-r--r--");
    for u in UNITS {
        assert!(
            ["/lib", "/usr/lib"].iter().any(|d| list
                .lines()
                .any(|l| l.starts_with("-rw-r--r--") && l.ends_with(&format!(".{d}/systemd/system/{u}")))),
            "{u} is not in the package:\n{list}"
        );
    }
    let ctrl = work.join("control");
    run(Command::new("dpkg-deb").args(["-e", deb]).arg(&ctrl));
    let conffiles = std::fs::read_to_string(ctrl.join("conffiles")).unwrap();
    for c in ["/etc/bursar/bursar.toml", "/etc/default/bursar-slurm"] {
        assert!(conffiles.lines().any(|l| l == c), "{c} is not a conffile:\n{conffiles}");
    }
    assert!(!conffiles.contains("/etc/bursar/policies"), "a conffile in the site's policy folder:\n{conffiles}");
    // postinst migrates the audit log before the debhelper part starts serve.
    let postinst = std::fs::read_to_string(ctrl.join("postinst")).unwrap();
    let migrate = postinst
        .find("audit migrate --db")
        .unwrap_or_else(|| panic!("postinst does not migrate the audit log:\n{postinst}"));
    let start = postinst
        .find("migrate_log\n")
        .and_then(|call| postinst[call..].find("deb-systemd-invoke").map(|i| call + i))
        .unwrap_or_else(|| panic!("postinst starts nothing after the migration:\n{postinst}"));
    assert!(migrate < start, "postinst starts serve before it migrates the log:\n{postinst}");
    for s in ["postinst", "prerm", "postrm"] {
        assert!(ctrl.join(s).is_file(), "no {s}");
    }
    // The synopsis apt and dpkg -l show: under 80 characters, no trailing period (Debian policy 3.4.1).
    let synopsis = stdout(Command::new("dpkg-deb").args(["-f", deb, "Description"]));
    let synopsis = synopsis.lines().next().unwrap_or_default();
    assert!(synopsis.len() < 80 && !synopsis.ends_with('.') && synopsis.contains("GPU pool"), "{synopsis}");
    let depends = stdout(Command::new("dpkg-deb").args(["-f", deb, "Depends"]));
    assert!(depends.contains("adduser") && depends.contains("libc6"), "Depends: {depends}");

    // The package's man pages are what this binary writes (one source with --help).
    let extracted = work.join("extracted");
    run(Command::new("dpkg-deb").args(["-x", deb]).arg(&extracted));
    let fresh = work.join("man");
    run(Command::new(env!("CARGO_BIN_EXE_bursar")).args(["man", "--out"]).arg(&fresh));
    for page in ["bursar.1", "bursar-serve.1", "bursar-audit-migrate.1"] {
        let packaged =
            stdout(Command::new("zcat").arg(extracted.join("usr/share/man/man1").join(format!("{page}.gz"))));
        assert_eq!(packaged, std::fs::read_to_string(fresh.join(page)).unwrap(), "{page} differs from the binary's");
    }
    let bash = std::fs::read_to_string(extracted.join("usr/share/bash-completion/completions/bursar")).unwrap();
    assert_eq!(bash, stdout(Command::new(env!("CARGO_BIN_EXE_bursar")).args(["completions", "bash"])));

    // Every page the binary (its help, man pages, pool and report pages, messages), the units and
    // the example configuration name is installed.
    let mut named: Vec<String> = Vec::new();
    let mut scan = |text: &str| {
        let mut rest = text;
        // `docs/<path>.md`, the path of letters, digits, `-`, `_` and `/` (the binary's string
        // literals run into one another: the page ends at its `.md`).
        while let Some(i) = rest.find("docs/") {
            let tail = &rest[i + 5..];
            let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || "-_/".contains(c))).unwrap_or(tail.len());
            if tail[end..].starts_with(".md") && end > 0 {
                named.push(format!("{}.md", &tail[..end]));
            }
            rest = tail;
        }
    };
    let binary = std::fs::read(extracted.join("usr/bin/bursar")).unwrap();
    scan(&String::from_utf8_lossy(&binary));
    for dir in ["etc/bursar", "lib/systemd/system", "usr/lib/systemd/system"] {
        for e in std::fs::read_dir(extracted.join(dir)).into_iter().flatten().flatten() {
            if e.path().is_file() {
                scan(&std::fs::read_to_string(e.path()).unwrap_or_default());
            }
        }
    }
    named.sort();
    named.dedup();
    assert!(named.len() >= 10, "too few pages named: {named:?}");
    for page in &named {
        assert!(
            extracted.join("usr/share/doc/bursar").join(page).is_file(),
            "docs/{page} is named by the package but not installed as /usr/share/doc/bursar/{page}"
        );
    }
    for page in ["/usr/share/doc/bursar/integrations/slurm.md", "/usr/share/doc/bursar/operations.md"] {
        let unit_refs = named.iter().any(|n| page.ends_with(n.as_str()));
        assert!(unit_refs || extracted.join(&page[1..]).is_file(), "{page}");
    }

    // Stripped: no debug sections and no symbol table; they are in the -dbgsym package.
    let sections = stdout(Command::new("readelf").args(["-S", "-W"]).arg(extracted.join("usr/bin/bursar")));
    for s in [".debug_info", ".debug_line", ".symtab"] {
        assert!(!sections.contains(&format!(" {s} ")), "the packaged binary keeps {s}:\n{sections}");
    }
    let ddeb = std::fs::read_dir(Path::new(deb).parent().unwrap())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("bursar-dbgsym_")))
        .unwrap_or_else(|| panic!("no bursar-dbgsym package beside {deb}"));
    let symbols = stdout(Command::new("dpkg-deb").arg("-c").arg(&ddeb));
    assert!(
        symbols.lines().any(|l| l.contains("./usr/lib/debug/") && l.ends_with(".debug")),
        "the dbgsym package holds no .debug file:\n{symbols}"
    );
}

/// `systemd-analyze verify` accepts the installed units, and their sandbox keeps systemd's offline
/// exposure score low (`systemd-analyze security`: 0 is the tightest, 10 a unit with none).
fn verify_units() {
    if !on_path("systemd-analyze") {
        eprintln!("debian_package: systemd-analyze is not installed: units not verified");
        return;
    }
    let paths: Vec<String> = UNITS.iter().map(|u| unit_path(u)).collect();
    let o = Command::new("systemd-analyze").arg("verify").args(&paths).output().unwrap();
    let said = String::from_utf8_lossy(&o.stderr).into_owned() + &String::from_utf8_lossy(&o.stdout);
    // Outside a running systemd, verify also says what it cannot look at (no D-Bus, no /run/systemd);
    // anything it says about these files is a problem.
    let about_units: Vec<&str> = said.lines().filter(|l| l.contains("bursar")).collect();
    assert!(o.status.success() && about_units.is_empty(), "systemd-analyze verify:\n{said}");
    for p in &paths {
        let o = Command::new("systemd-analyze").args(["security", "--offline=yes", "--no-pager", p]).output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        let score = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("→ Overall exposure level for "))
            .and_then(|l| l.split(':').nth(1))
            .and_then(|s| s.split_whitespace().next())
            .and_then(|s| s.parse::<f64>().ok());
        match score {
            Some(s) => assert!(s <= 2.5, "{p}: exposure {s} (above 2.5):\n{text}"),
            None => {
                eprintln!("debian_package: no offline exposure score for {p}: {}", String::from_utf8_lossy(&o.stderr))
            }
        }
    }
}

/// Starts `ExecStart` the way systemd would, as far as this machine allows (see the module's doc).
fn start_as_unit(unit: &Unit, notify: &Path, log: &Path) -> Child {
    let user = unit.get("User").unwrap();
    let group = unit.get("Group").unwrap_or(user);
    let mut argv: Vec<String> = unit.get("ExecStart").unwrap().split_whitespace().map(str::to_owned).collect();
    // The unit listens on 127.0.0.1:7878; this machine may have that port taken.
    argv.extend(["--listen", "127.0.0.1:0", "--port-file", "/run/bursar/port"].map(str::to_owned));

    // The directories systemd makes for the unit, owned by its user.
    let mut writable = Vec::new();
    for (key, base) in [("StateDirectory", "/var/lib"), ("LogsDirectory", "/var/log"), ("RuntimeDirectory", "/run")] {
        if let Some(d) = unit.get(key) {
            let path = format!("{base}/{d}");
            let mode = unit.get(&format!("{key}Mode")).unwrap_or("0755");
            run(Command::new("install").args(["-d", "-o", user, "-g", group, "-m", mode, &path]));
            writable.push(path);
        }
    }
    writable.extend(unit.all("ReadWritePaths").iter().flat_map(|v| v.split_whitespace()).map(str::to_owned));
    let home = stdout(Command::new("getent").args(["passwd", user])).trim().split(':').nth(5).unwrap().to_owned();
    let mut env = vec![
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned(),
        format!("HOME={home}"),
        format!("USER={user}"),
        format!("LOGNAME={user}"),
        "SHELL=/usr/sbin/nologin".to_owned(),
        format!("NOTIFY_SOCKET={}", notify.display()),
        "INVOCATION_ID=0123456789abcdef0123456789abcdef".to_owned(),
    ];
    for (key, var, base) in [
        ("StateDirectory", "STATE_DIRECTORY", "/var/lib"),
        ("LogsDirectory", "LOGS_DIRECTORY", "/var/log"),
        ("RuntimeDirectory", "RUNTIME_DIRECTORY", "/run"),
    ] {
        if let Some(d) = unit.get(key) {
            env.push(format!("{var}={base}/{d}"));
        }
    }
    for e in unit.all("Environment") {
        env.extend(e.split_whitespace().map(|s| s.trim_matches('"').to_owned()));
    }
    assert!(unit.all("EnvironmentFile").is_empty(), "serve's unit reads no environment file");

    let q = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    let mut script = String::from("set -e\n");
    for w in &writable {
        script.push_str(&format!("mount --bind {0} {0}\n", q(w)));
    }
    if unit.get("ProtectSystem") == Some("strict") {
        script.push_str("mount -o remount,bind,ro /\n");
    }
    if unit.get("PrivateTmp") == Some("yes") {
        script.push_str("mount -t tmpfs -o mode=1777 tmpfs /tmp\nmount -t tmpfs -o mode=1777 tmpfs /var/tmp\n");
    }
    if unit.get("ProtectHome") == Some("yes") {
        script.push_str(
            "for d in /home /root /run/user; do [ -d \"$d\" ] && mount -t tmpfs -o ro,mode=755 tmpfs \"$d\"; done\n",
        );
    }
    script.push_str(&format!("umask {}\n", unit.get("UMask").unwrap_or("0022")));
    script.push_str(&format!("cd {}\n", q(unit.get("WorkingDirectory").unwrap_or("/"))));
    assert_eq!(unit.get("NoNewPrivileges"), Some("yes"));
    assert_eq!(unit.get("CapabilityBoundingSet"), Some(""));
    script.push_str(&format!(
        "exec setpriv --reuid={user} --regid={group} --init-groups --no-new-privs --bounding-set=-all --inh-caps=-all -- env -i {} {}\n",
        env.iter().map(|e| q(e)).collect::<Vec<_>>().join(" "),
        argv.iter().map(|a| q(a)).collect::<Vec<_>>().join(" ")
    ));
    let out = std::fs::File::create(log).unwrap();
    Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap()
}

/// A temporary folder removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempdir(name: &str) -> TempDir {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let dir = std::env::temp_dir().join(format!("{name}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    TempDir(dir)
}
