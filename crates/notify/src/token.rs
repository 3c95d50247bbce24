//! Signed action links: a token names the job, the action, who it is for, an expiry and the notice
//! it came with, and carries an HMAC-SHA256 over all of it under a key only `bursar serve` holds.
//!
//! A token is `v1.<payload>.<mac>`: the payload is the claims as JSON, base64url without padding; the
//! MAC is HMAC-SHA256 (RFC 2104) of `v1.<payload>` under the [`LinkKey`], base64url. Verification
//! checks the MAC in constant time *before* reading the claims, so a forged or edited token is
//! refused without its content mattering, then the expiry against the caller's clock.
//!
//! The link's event id ([`event_id`]) is derived from the whole token, so the same link applied twice
//! is the same event id, which the engine deduplicates: that is how a used link is told from a fresh
//! one, with no table of used tokens.
//!
//! HMAC is written out here (a dozen lines over `sha2`, which the workspace already uses) rather
//! than taken from the `hmac` crate, whose releases track a different `digest` major version than
//! the `sha2` in the lockfile; the RFC 4231 test vectors below pin it.

use std::io::Write;
use std::path::{Path, PathBuf};

use bursar_model::Timestamp;
use bursar_model::api::ActionKind;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What a link lets its holder do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claims {
    /// The action.
    #[serde(rename = "a")]
    pub action: ActionKind,
    /// The job.
    #[serde(rename = "j")]
    pub job: String,
    /// Who it is for: the event's `by` when it is used.
    #[serde(rename = "u")]
    pub for_user: String,
    /// When it stops working (ms since the epoch).
    #[serde(rename = "x")]
    pub expires_ms: i64,
    /// The notice it was sent with (`notice-<decision seq>`).
    #[serde(rename = "n")]
    pub notice: String,
    /// An approval link's request: the GPUs, the hours and the submission time (ms) it was sent
    /// for. The link answers only that request: the same job id submitted again, at 64 GPUs × 150 h
    /// or at the same size, is not approved by the link sent the first time. (Links made before
    /// December 2026 have none.)
    #[serde(rename = "r", default, skip_serializing_if = "Option::is_none")]
    pub request: Option<(bursar_model::Gpus, f64, i64)>,
}

/// SHA-256 of `bytes`, hex: how the outbox keeps a link's token.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

impl Claims {
    /// The expiry as a timestamp.
    pub fn expires(&self) -> Timestamp {
        Timestamp(self.expires_ms)
    }
}

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TokenError {
    /// Not a token at all (cut short, not base64url, not `v1`).
    #[error("this link is incomplete or damaged (it is not a bursar action link)")]
    Malformed,
    /// The MAC does not match: the link was not made by this server, or was edited.
    #[error("this link was not issued by this bursar server, or it was altered")]
    Forged,
    /// Genuine, but past its expiry.
    #[error("this link expired at {}", .0.expires())]
    Expired(Box<Claims>),
}

/// Why the link key cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// Reading, creating or writing the key file failed.
    #[error("link key `{path}`: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The file is readable or writable by others.
    #[error(
        "link key `{path}` is accessible to other users (mode {mode:o})\n  help: `chmod 600 {path}`: whoever reads it can sign approvals"
    )]
    Exposed {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The file does not hold a key.
    #[error(
        "link key `{path}` does not hold a key (64 hex digits)\n  help: delete it to have serve generate a new one (links already sent stop working)"
    )]
    Invalid {
        /// The file.
        path: PathBuf,
    },
}

/// The HMAC key of action links: 32 random bytes. Its `Debug` never shows it.
#[derive(Clone)]
pub struct LinkKey([u8; 32]);

impl std::fmt::Debug for LinkKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LinkKey(<secret>)")
    }
}

const VERSION: &str = "v1";

impl LinkKey {
    /// A key from its bytes (tests, and [`LinkKey::load_or_create`]).
    pub fn from_bytes(bytes: [u8; 32]) -> LinkKey {
        LinkKey(bytes)
    }

    /// Reads the key from `path` (64 hex digits), or, when the file does not exist, draws 32 bytes
    /// from the operating system (`getrandom`, as the audit log's signing keys) and writes them there
    /// with mode 0600. A file other users may
    /// read is refused.
    pub fn load_or_create(path: &Path) -> Result<LinkKey, KeyError> {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let io = |source| KeyError::Io { path: path.to_owned(), source };
        match std::fs::metadata(path) {
            Ok(meta) => {
                let mode = meta.permissions().mode() & 0o777;
                if mode & 0o077 != 0 {
                    return Err(KeyError::Exposed { path: path.to_owned(), mode });
                }
                let text = std::fs::read_to_string(path).map_err(io)?;
                let bytes = hex_decode(text.trim()).ok_or_else(|| KeyError::Invalid { path: path.to_owned() })?;
                let key: [u8; 32] = bytes.try_into().map_err(|_| KeyError::Invalid { path: path.to_owned() })?;
                if key.windows(2).all(|w| w[0] == w[1]) {
                    // All zeros (or any one repeated byte) is not a secret: anyone could sign links.
                    return Err(KeyError::Invalid { path: path.to_owned() });
                }
                Ok(LinkKey(key))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut key = [0u8; 32];
                getrandom::fill(&mut key).map_err(|e| io(std::io::Error::other(e.to_string())))?;
                let mut f =
                    std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).map_err(io)?;
                f.write_all(format!("{}\n", hex(&key)).as_bytes()).and_then(|()| f.sync_all()).map_err(io)?;
                tracing::info!(file = %path.display(), "generated a new action-link key");
                Ok(LinkKey(key))
            }
            Err(e) => Err(io(e)),
        }
    }

    fn mac(&self, message: &[u8]) -> [u8; 32] {
        hmac_sha256(&self.0, message)
    }

    /// The token for `claims`.
    pub fn sign(&self, claims: &Claims) -> String {
        let payload = b64_encode(serde_json::to_string(claims).unwrap_or_default().as_bytes());
        let signed = format!("{VERSION}.{payload}");
        let mac = b64_encode(&self.mac(signed.as_bytes()));
        format!("{signed}.{mac}")
    }

    /// The claims of a genuine `token` that has not expired at `now`.
    pub fn verify(&self, token: &str, now: Timestamp) -> Result<Claims, TokenError> {
        let (signed, mac) = token.rsplit_once('.').ok_or(TokenError::Malformed)?;
        let (version, payload) = signed.split_once('.').ok_or(TokenError::Malformed)?;
        if version != VERSION {
            return Err(TokenError::Malformed);
        }
        let given = b64_decode(mac).ok_or(TokenError::Malformed)?;
        if !same(&given, &self.mac(signed.as_bytes())) {
            return Err(TokenError::Forged);
        }
        let json = b64_decode(payload).ok_or(TokenError::Malformed)?;
        let claims: Claims = serde_json::from_slice(&json).map_err(|_| TokenError::Malformed)?;
        if now.millis() >= claims.expires_ms {
            return Err(TokenError::Expired(Box::new(claims)));
        }
        Ok(claims)
    }
}

/// The event id an action link is applied under: `link-` and 32 hex digits of the SHA-256 of the
/// token. The same link twice is the same id, a duplicate to the engine.
pub fn event_id(token: &str) -> String {
    let d = Sha256::digest(token.as_bytes());
    format!("link-{}", hex(&d[..16]))
}

/// Constant-time equality.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// HMAC-SHA256 (RFC 2104): H((K ⊕ opad) ‖ H((K ⊕ ipad) ‖ m)), the key hashed first when longer
/// than the 64-byte block.
pub fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut k = [0u8; BLOCK];
    if key.len() > BLOCK {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(k.map(|b| b ^ 0x36));
    inner.update(message);
    let inner = inner.finalize();
    let mut outer = Sha256::new();
    outer.update(k.map(|b| b ^ 0x5c));
    outer.update(inner);
    let mut out = [0u8; 32];
    out.copy_from_slice(&outer.finalize());
    out
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn hex_decode(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| s.get(i..i + 2).and_then(|p| u8::from_str_radix(p, 16).ok())).collect()
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// base64url without padding (RFC 4648 §5).
pub fn b64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(char::from(B64[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

/// Decodes base64url without padding; `None` for anything else.
pub fn b64_decode(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| B64.iter().position(|&x| x == c).map(|p| p as u32);
    let bytes = s.as_bytes();
    if bytes.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= val(c)? << (18 - 6 * i);
        }
        let full = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&full[..chunk.len() - 1]);
        // Non-canonical trailing bits are not a token this code wrote.
        let kept = (chunk.len() - 1) * 8;
        if kept < 24 && n & ((1 << (24 - kept)) - 1) != 0 {
            return None;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        hex_decode(s).unwrap()
    }

    #[test]
    fn hmac_matches_rfc_4231() {
        // Test cases 1, 2, 4 and 6 (a key longer than the block).
        let cases: [(Vec<u8>, Vec<u8>, &str); 4] = [
            (vec![0x0b; 20], b"Hi There".to_vec(), "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
            (
                b"Jefe".to_vec(),
                b"what do ya want for nothing?".to_vec(),
                "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
            ),
            (
                unhex("0102030405060708090a0b0c0d0e0f10111213141516171819"),
                vec![0xcd; 50],
                "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b",
            ),
            (
                vec![0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First".to_vec(),
                "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
            ),
        ];
        for (key, msg, want) in cases {
            assert_eq!(hex(&hmac_sha256(&key, &msg)), want);
        }
    }

    #[test]
    fn base64url_round_trips_and_refuses_other_text() {
        for n in 0..40u8 {
            let bytes: Vec<u8> = (0..n).map(|i| i.wrapping_mul(37).wrapping_add(n)).collect();
            assert_eq!(b64_decode(&b64_encode(&bytes)).unwrap(), bytes);
        }
        assert_eq!(b64_encode(b"\xfb\xff"), "-_8");
        for bad in ["a", "ab=", "a+b/", "a b", "AB"] {
            assert!(b64_decode(bad).is_none(), "{bad}");
        }
    }

    fn claims() -> Claims {
        Claims {
            action: ActionKind::Approve,
            job: "j1".into(),
            for_user: "bob".into(),
            expires_ms: 2_000,
            notice: "notice-7".into(),
            request: None,
        }
    }

    #[test]
    fn a_token_verifies_until_it_expires_and_not_after_any_edit() {
        let key = LinkKey::from_bytes([7; 32]);
        let t = key.sign(&claims());
        assert_eq!(key.verify(&t, Timestamp(1_999)).unwrap(), claims());
        assert!(matches!(key.verify(&t, Timestamp(2_000)), Err(TokenError::Expired(c)) if *c == claims()));
        // Another key, an edited payload, an edited MAC: forged.
        assert_eq!(LinkKey::from_bytes([8; 32]).verify(&t, Timestamp(0)), Err(TokenError::Forged));
        let mut other = claims();
        other.job = "j2".into();
        let (_, payload, mac) = {
            let mut parts = t.split('.');
            (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap())
        };
        let swapped = format!("v1.{}.{mac}", b64_encode(serde_json::to_string(&other).unwrap().as_bytes()));
        assert_eq!(key.verify(&swapped, Timestamp(0)), Err(TokenError::Forged));
        let mut bad_mac = mac.to_owned();
        bad_mac.replace_range(0..1, if mac.starts_with('A') { "B" } else { "A" });
        assert_eq!(key.verify(&format!("v1.{payload}.{bad_mac}"), Timestamp(0)), Err(TokenError::Forged));
        for broken in ["", "v1", "v1.x", "v2.a.b", &t[..t.len() - 3]] {
            assert!(
                matches!(key.verify(broken, Timestamp(0)), Err(TokenError::Malformed | TokenError::Forged)),
                "{broken}"
            );
        }
        // One token, one event id; another token, another id.
        assert_eq!(event_id(&t), event_id(&t));
        assert_ne!(event_id(&t), event_id(&swapped));
        assert!(event_id(&t).starts_with("link-") && event_id(&t).len() == 37);
        assert_eq!(format!("{key:?}"), "LinkKey(<secret>)");
    }

    #[test]
    fn the_key_file_is_created_private_and_refused_when_exposed() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("bursar-linkkey-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("key");
        let a = LinkKey::load_or_create(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let b = LinkKey::load_or_create(&path).unwrap();
        assert_eq!(a.0, b.0);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(LinkKey::load_or_create(&path), Err(KeyError::Exposed { mode: 0o644, .. })));
        std::fs::write(dir.join("bad"), "xyz").unwrap();
        std::fs::set_permissions(dir.join("bad"), std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(LinkKey::load_or_create(&dir.join("bad")), Err(KeyError::Invalid { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
