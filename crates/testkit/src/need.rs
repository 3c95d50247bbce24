//! What a test needs from outside the repository — a program from a Debian package, root — and the
//! one rule for when it is missing: under CI (`CI` set to anything but `false` or `0`; `.ci/run`
//! sets `CI=true`) the test fails, naming what is missing and what installs it, because a test that
//! passes without running proves nothing; elsewhere (a developer's machine without the package) it is
//! skipped with a line on stderr. Every such test goes through here, so there is one switch.
//!
//! ```no_run
//! # fn t() {
//! let Some(nats) = bursar_testkit::need::program("nats-server", &["/usr/sbin/nats-server"], "the nats-server package (scripts/setup.sh)") else { return };
//! # }
//! ```

use std::path::{Path, PathBuf};

/// Whether this run is CI's: `CI` is set, and not to `false` or `0`.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// The test cannot run here because `what` is missing, which `installs` provides: panics under CI,
/// else says so on stderr (the caller then returns).
#[track_caller]
#[expect(clippy::panic, reason = "failing the test is the point: under CI a missing tool is a failure")]
pub fn missing(what: &str, installs: &str) {
    let why = format!("{what} is missing; {installs} provides it");
    if in_ci() {
        panic!("{why}: CI is set, so this test cannot be skipped");
    }
    eprintln!("skipped: {why}");
}

/// The first of `places` that is a file, else `name` found on `PATH`; `None` after [`missing`]
/// said so.
#[track_caller]
pub fn program(name: &str, places: &[&str], installs: &str) -> Option<PathBuf> {
    let found = places.iter().map(PathBuf::from).find(|p| p.is_file()).or_else(|| on_path(name));
    if found.is_none() {
        missing(&format!("`{name}`"), installs);
    }
    found
}

/// Whether `name` is an executable file in a folder of `PATH`.
pub fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Whether the test runs as root (it mounts, installs a package, starts daemons); `false` after
/// [`missing`] said so.
#[track_caller]
pub fn root(why: &str) -> bool {
    // The effective uid, as the kernel reports it (no libc call).
    let is_root = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(2))
            .is_some_and(|euid| euid == "0")
    });
    if !is_root {
        missing(&format!("root ({why})"), "running the tests as root (CI does)");
    }
    is_root
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_is_found_on_path_or_in_its_places() {
        assert!(on_path("sh").is_some());
        assert!(on_path("no-such-program-bursar").is_none());
        assert_eq!(program("sh", &["/bin/sh"], "coreutils"), Some(PathBuf::from("/bin/sh")));
    }
}
