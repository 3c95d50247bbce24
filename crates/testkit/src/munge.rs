//! A real `munged` (Debian's `munge`, as the Slurm lab runs it) on a socket in a temporary folder,
//! with a key of its own, stopped by PID on `Drop`; and [`Munged::encode`], the `munge` program
//! against it.
//!
//! `munged` refuses to run as root without `--force`; tests run it so (CI runs as root). A key of
//! 1,024 bytes is drawn from `/dev/urandom` (no dependency: this crate has none).

use std::ffi::OsString;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::process::{Server, TempDir};

/// A running `munged`.
#[derive(Debug)]
pub struct Munged {
    server: Server,
    dir: TempDir,
}

impl Munged {
    /// The `munged` binary, if installed.
    pub fn binary() -> Option<PathBuf> {
        ["/usr/sbin/munged", "/usr/bin/munged"].iter().map(PathBuf::from).find(|p| p.exists())
    }

    /// Starts `munged` with a fresh key; returns once its socket answers.
    pub fn start() -> io::Result<Munged> {
        let bin = Self::binary().ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no munged binary"))?;
        let dir = TempDir::new("munged")?;
        let key = dir.path().join("munge.key");
        let mut bytes = vec![0u8; 1024];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
        {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&key)?.write_all(&bytes)?;
        }
        let socket = dir.path().join("munge.socket");
        let args: Vec<OsString> = vec![
            "--foreground".into(),
            "--force".into(),
            format!("--socket={}", socket.display()).into(),
            format!("--key-file={}", key.display()).into(),
            format!("--pid-file={}", dir.path().join("munged.pid").display()).into(),
            format!("--log-file={}", dir.path().join("munged.log").display()).into(),
            format!("--seed-file={}", dir.path().join("munged.seed").display()).into(),
        ];
        let mut server = Server::start("munged", &bin, &args, &dir.path().join("munged.out"))?;
        let probe = socket.clone();
        server.wait_until("its socket", Duration::from_secs(20), move || {
            probe.exists()
                && Command::new("munge")
                    .arg(format!("--socket={}", probe.display()))
                    .arg("--no-input")
                    .output()
                    .is_ok_and(|o| o.status.success())
        })?;
        Ok(Munged { server, dir })
    }

    /// The socket clients and `unmunge` talk to.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("munge.socket")
    }

    /// The folder it runs in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The daemon's PID.
    pub fn pid(&self) -> u32 {
        self.server.pid()
    }

    /// A credential for `payload` encoded as `user` (root may encode for anyone, as `munge -U`).
    pub fn encode(&self, user: &str, payload: &str) -> io::Result<String> {
        let out = Command::new("munge")
            .arg(format!("--socket={}", self.socket().display()))
            .args(["--uid", user, "--string", payload])
            .output()?;
        if !out.status.success() {
            return Err(io::Error::other(String::from_utf8_lossy(&out.stderr).into_owned()));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }
}
