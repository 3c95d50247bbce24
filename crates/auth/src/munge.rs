//! MUNGE, the credential every Slurm site already runs: `bursar approve` on a login node encodes a
//! credential with `munge`, and the server learns the UID that made it from its own `munged`
//! (`unmunge`), so an approval is signed by the person who typed it, not by a name they typed.
//!
//! The credential's payload binds it to the one request it was made for ([`binding`]: method, path
//! and the SHA-256 of the body), so a credential lifted from a request cannot approve another job;
//! `munged` refuses a credential decoded twice (replay) or past its time-to-live (5 minutes by
//! default). Both programs come with Debian's `munge` package, and the server talks to `munged` only
//! through `unmunge`, so no C library is linked.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sha2::{Digest, Sha256};

/// The `Authorization` scheme of a MUNGE credential: `Authorization: MUNGE <credential>`.
pub const SCHEME: &str = "MUNGE";

/// Where the programs and the daemon are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MungeSettings {
    /// The `unmunge` program (found on `PATH` by default).
    pub unmunge: PathBuf,
    /// The `munge` program, for clients.
    pub munge: PathBuf,
    /// `munged`'s socket; none: the programs' default (`/run/munge/munge.socket.2`).
    pub socket: Option<PathBuf>,
}

impl Default for MungeSettings {
    fn default() -> MungeSettings {
        MungeSettings { unmunge: PathBuf::from("unmunge"), munge: PathBuf::from("munge"), socket: None }
    }
}

/// The payload a credential for one request carries: [`request`], a space, [`body_digest`].
pub fn binding(method: &str, path: &str, body: &[u8]) -> String {
    format!("{} {}", request(method, path), body_digest(body))
}

/// The part of a [`binding`] that names the request without its body: a server checks it with the
/// credential, before it reads the body, and the body's digest once it has.
pub fn request(method: &str, path: &str) -> String {
    format!("bursar-request-v1 {method} {path}")
}

/// The SHA-256 of a body, hex, as a [`binding`] carries it.
pub fn body_digest(body: &[u8]) -> String {
    Sha256::digest(body).iter().map(|b| format!("{b:02x}")).collect()
}

/// What `munged` vouched for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MungeIdentity {
    /// The UID that encoded the credential.
    pub uid: u32,
    /// Its user name, as `munged`'s host knows it.
    pub user: String,
    /// The SHA-256 (hex) of the body the credential was made for.
    pub body_sha256: String,
}

/// Why a credential is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MungeError {
    /// `munged` refused it (replayed, expired, not from this realm's key, …), in its words.
    #[error("munged refused the credential: {0}")]
    Refused(String),
    /// The credential was made for another request.
    #[error("the MUNGE credential was made for another request (its payload does not match this one)")]
    WrongRequest,
    /// The credential's UID has no user on this host.
    #[error(
        "the MUNGE credential's UID {0} has no user name on this host; bursar does not make one up\n  help: the user must exist in this host's passwd or directory (LDAP, SSSD), as on the login node"
    )]
    NoUser(u32),
    /// `unmunge` could not be run or said something unexpected.
    #[error("cannot check the MUNGE credential: {0}")]
    Unavailable(String),
}

fn with_socket(cmd: &mut Command, socket: Option<&Path>) {
    if let Some(s) = socket {
        cmd.arg(format!("--socket={}", s.display()));
    }
}

/// Decodes `credential` with `unmunge` and checks that its payload is a [`binding`] of the request
/// `expect` names ([`request`]); the body's digest it binds is returned, for the caller to compare
/// once it has read the body.
pub fn verify(settings: &MungeSettings, credential: &str, expect: &str) -> Result<MungeIdentity, MungeError> {
    let mut cmd = Command::new(&settings.unmunge);
    with_socket(&mut cmd, settings.socket.as_deref());
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| MungeError::Unavailable(format!("cannot run `{}`: {e}", settings.unmunge.display())))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(credential.trim().as_bytes()).map_err(|e| MungeError::Unavailable(e.to_string()))?;
    }
    let out = child.wait_with_output().map_err(|e| MungeError::Unavailable(e.to_string()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let (meta, payload) = text.split_once("\n\n").unwrap_or((&text, ""));
    let field =
        |key: &str| meta.lines().find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(':')).map(str::trim));
    if !out.status.success() {
        let why = field("STATUS").map(str::to_owned).unwrap_or_else(|| {
            String::from_utf8_lossy(&out.stderr).trim().trim_start_matches("unmunge: Error: ").to_owned()
        });
        return Err(MungeError::Refused(why));
    }
    // `UID: alice (1001)`
    let uid_line = field("UID").ok_or_else(|| MungeError::Unavailable("unmunge printed no UID".into()))?;
    let (user, uid) = match uid_line.rsplit_once('(') {
        Some((name, rest)) => (name.trim().to_owned(), rest.trim_end_matches(')').trim().parse::<u32>().ok()),
        None => (String::new(), uid_line.parse::<u32>().ok()),
    };
    let uid = uid.ok_or_else(|| MungeError::Unavailable(format!("cannot read the UID in `{uid_line}`")))?;
    let body_sha256 = match payload.strip_prefix(expect).and_then(|rest| rest.strip_prefix(' ')) {
        Some(d) if d.len() == 64 && d.bytes().all(|b| b.is_ascii_hexdigit()) => d.to_owned(),
        _ => return Err(MungeError::WrongRequest),
    };
    // munged prints `???` for a UID its host has no user for: refused rather than named `uid-N`,
    // a name a real login could have (issue 56).
    if bursar_model::names::check_name("user", &user).is_err()
        || user.contains('?')
        || user.chars().all(|c| c.is_ascii_digit())
    {
        return Err(MungeError::NoUser(uid));
    }
    Ok(MungeIdentity { uid, user, body_sha256 })
}

/// Encodes a credential for `payload` with `munge` (what `bursar approve` sends).
pub fn encode(settings: &MungeSettings, payload: &str) -> Result<String, MungeError> {
    let mut cmd = Command::new(&settings.munge);
    with_socket(&mut cmd, settings.socket.as_deref());
    let out = cmd
        .arg("--string")
        .arg(payload)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| MungeError::Unavailable(format!("cannot run `{}`: {e}", settings.munge.display())))?;
    if !out.status.success() {
        return Err(MungeError::Unavailable(String::from_utf8_lossy(&out.stderr).trim().to_owned()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binding_names_the_request_and_its_body() {
        let a = binding("POST", "/v1/jobs/j1/approve", b"{}");
        assert!(a.starts_with("bursar-request-v1 POST /v1/jobs/j1/approve "), "{a}");
        assert_ne!(a, binding("POST", "/v1/jobs/j2/approve", b"{}"));
        assert_ne!(a, binding("POST", "/v1/jobs/j1/approve", b"{\"over_budget\":true}"));
        assert_eq!(a, format!("{} {}", request("POST", "/v1/jobs/j1/approve"), body_digest(b"{}")));
    }

    #[test]
    fn a_missing_unmunge_is_reported_not_a_crash() {
        let s = MungeSettings { unmunge: "/nonexistent/unmunge".into(), ..MungeSettings::default() };
        assert!(matches!(verify(&s, "MUNGE:x:", "p"), Err(MungeError::Unavailable(_))));
    }
}
