//! Credentials: what a request carries in `Authorization`, and where a secret comes from.
//!
//! A secret is never written inline in a configuration file: a setting names a file holding it
//! (`password_file = "/etc/bursar/prometheus.password"`) or an environment variable
//! (`"env:PROMETHEUS_PASSWORD"`), read once when the client is built ([`SecretSource::read`]).
//! [`Secret`] and [`Auth`] print `<redacted>` in `Debug`, so a logged configuration shows that a
//! credential is set and never what it is.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Deserializer};

/// A secret value (a token, a password). `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value, for building a header.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Where a secret is read from: a file (its content, surrounding white space trimmed) or an
/// environment variable (`env:NAME`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// A file holding the secret.
    File(PathBuf),
    /// `env:NAME`: the variable `NAME`.
    Env(String),
}

/// Why a secret could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The setting is not a path nor `env:NAME`.
    #[error("`{0}` is not a file path or `env:NAME`\n  help: name a file holding the secret, or `env:VARIABLE`")]
    Syntax(String),
    /// The file cannot be read.
    #[error(
        "cannot read the secret file `{path}`: {source}\n  help: the file must exist and be readable by the user bursar runs as (mode 0600 is enough)"
    )]
    File {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The variable is not set (or not Unicode).
    #[error(
        "the environment variable `{0}` is not set\n  help: set it in bursar's environment, or name a file instead"
    )]
    Env(String),
    /// The secret is empty.
    #[error("the secret in {0} is empty")]
    Empty(String),
}

impl SecretSource {
    /// Parses `env:NAME` or a path.
    pub fn parse(s: &str) -> Result<SecretSource, SecretError> {
        match s.strip_prefix("env:") {
            Some(name) if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => {
                Ok(SecretSource::Env(name.to_owned()))
            }
            Some(_) => Err(SecretError::Syntax(s.to_owned())),
            None if s.trim().is_empty() => Err(SecretError::Syntax(s.to_owned())),
            None => Ok(SecretSource::File(PathBuf::from(s))),
        }
    }

    /// Reads the secret now.
    pub fn read(&self) -> Result<Secret, SecretError> {
        let (value, shown) = match self {
            SecretSource::File(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|source| SecretError::File { path: path.display().to_string(), source })?;
                (text, format!("`{}`", path.display()))
            }
            SecretSource::Env(name) => {
                (std::env::var(name).map_err(|_| SecretError::Env(name.clone()))?, format!("`env:{name}`"))
            }
        };
        let value = value.trim();
        if value.is_empty() {
            return Err(SecretError::Empty(shown));
        }
        Ok(Secret(value.to_owned()))
    }
}

impl fmt::Display for SecretSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretSource::File(p) => write!(f, "{}", p.display()),
            SecretSource::Env(n) => write!(f, "env:{n}"),
        }
    }
}

/// In a configuration file a secret source is text; a bad one is refused where it is written.
impl<'de> Deserialize<'de> for SecretSource {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<SecretSource, D::Error> {
        let s = String::deserialize(d)?;
        SecretSource::parse(&s).map_err(|e| serde::de::Error::custom(e.to_string()))
    }
}

/// `basic_auth = { username = "bursar", password_file = "/etc/bursar/prometheus.password" }`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BasicAuthFile {
    /// The user name (not a secret).
    pub username: String,
    /// Where the password is.
    pub password_file: SecretSource,
}

impl BasicAuthFile {
    /// Reads the password and returns [`Auth::Basic`].
    pub fn read(&self) -> Result<Auth, SecretError> {
        Ok(Auth::Basic { username: self.username.clone(), password: self.password_file.read()? })
    }
}

/// Computes the `Authorization` header value of one request from its method, path (with query) and
/// body; `None` sends none. What a credential that signs each request plugs in (e.g. MUNGE).
pub type HeaderFn = Arc<dyn Fn(&str, &str, &[u8]) -> Option<String> + Send + Sync>;

/// How requests authenticate.
#[derive(Clone, Default)]
pub enum Auth {
    /// No `Authorization` header.
    #[default]
    None,
    /// `Authorization: Bearer <token>`.
    Bearer(Secret),
    /// `Authorization: Basic base64(user:password)`.
    Basic {
        /// The user name.
        username: String,
        /// The password.
        password: Secret,
    },
    /// A header computed for each request.
    Header(HeaderFn),
}

impl Auth {
    /// A bearer token, or none when `token` is `None` or empty.
    pub fn bearer(token: Option<&str>) -> Auth {
        match token {
            Some(t) if !t.is_empty() => Auth::Bearer(Secret::new(t)),
            _ => Auth::None,
        }
    }

    /// The header value for one request.
    pub(crate) fn header(&self, method: &str, path: &str, body: &[u8]) -> Option<String> {
        match self {
            Auth::None => None,
            Auth::Bearer(t) => Some(format!("Bearer {}", t.expose())),
            Auth::Basic { username, password } => {
                Some(format!("Basic {}", base64(format!("{username}:{}", password.expose()).as_bytes())))
            }
            Auth::Header(f) => f(method, path, body),
        }
    }

    /// What a 401 should make the user check.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Auth::None => "none",
            Auth::Bearer(_) => "bearer",
            Auth::Basic { .. } => "basic",
            Auth::Header(_) => "header",
        }
    }
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Auth::None => f.write_str("None"),
            Auth::Bearer(_) => f.write_str("Bearer(<redacted>)"),
            Auth::Basic { username, .. } => {
                f.debug_struct("Basic").field("username", username).field("password", &"<redacted>").finish()
            }
            Auth::Header(_) => f.write_str("Header(<fn>)"),
        }
    }
}

/// Standard base64 with padding (RFC 4648), for the basic credential.
fn base64(input: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk.first().copied().unwrap_or(0),
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ABC[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_is_rfc_7617() {
        assert_eq!(base64(b"Aladdin:open sesame"), "QWxhZGRpbjpvcGVuIHNlc2FtZQ==");
        assert_eq!(base64(b"a"), "YQ==");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"abc"), "YWJj");
        let a = Auth::Basic { username: "Aladdin".into(), password: Secret::new("open sesame") };
        assert_eq!(a.header("GET", "/", b"").as_deref(), Some("Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="));
    }

    #[test]
    fn secrets_never_show_in_debug() {
        let a = Auth::Basic { username: "u".into(), password: Secret::new("hunter2") };
        let b = Auth::Bearer(Secret::new("tok-123"));
        let shown = format!("{a:?} {b:?} {:?}", Secret::new("hunter2"));
        assert!(!shown.contains("hunter2") && !shown.contains("tok-123"), "{shown}");
        assert!(shown.contains("username: \"u\""), "{shown}");
    }

    #[test]
    fn sources_are_files_or_variables() {
        assert_eq!(SecretSource::parse("env:PROM_PW").unwrap(), SecretSource::Env("PROM_PW".into()));
        assert_eq!(SecretSource::parse("/etc/pw").unwrap(), SecretSource::File("/etc/pw".into()));
        assert!(SecretSource::parse("env:").is_err());
        assert!(SecretSource::parse("env:A-B").is_err());
        assert!(SecretSource::parse(" ").is_err());
        let dir = std::env::temp_dir().join(format!("bursar-http-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("pw");
        std::fs::write(&f, "s3cret\n").unwrap();
        assert_eq!(SecretSource::File(f.clone()).read().unwrap().expose(), "s3cret");
        std::fs::write(&f, "\n").unwrap();
        assert!(SecretSource::File(f).read().unwrap_err().to_string().contains("is empty"));
        let missing = SecretSource::File(dir.join("nope")).read().unwrap_err().to_string();
        assert!(missing.contains("cannot read the secret file") && missing.contains("help:"), "{missing}");
        assert!(SecretSource::Env("BURSAR_HTTP_TEST_UNSET_VARIABLE".into()).read().is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
