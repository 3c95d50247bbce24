//! Bearer tokens: made random, stored hashed.
//!
//! A token is `bursar_` and 32 random bytes in base64url (no padding): 43 characters of secret,
//! nothing a person chooses. The configuration keeps only its SHA-256 (`sha256:<64 hex digits>`), so
//! whoever reads the file (a backup, a config repository, `bursar config show`) learns nothing that
//! authenticates. A high-entropy token needs no slow hash: there is nothing to guess from the hash.
//! A presented token is hashed and looked up; the look-up compares hashes, so its time says nothing
//! about the secret.

use sha2::{Digest, Sha256};

/// The prefix of a token bursar makes.
pub const PREFIX: &str = "bursar_";

/// The SHA-256 of a token: what a configuration stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenHash(pub [u8; 32]);

impl TokenHash {
    /// The hash of `token` (surrounding whitespace, such as a file's newline, is not part of it).
    pub fn of(token: &str) -> TokenHash {
        TokenHash(Sha256::digest(token.trim().as_bytes()).into())
    }

    /// Reads `sha256:<64 hex digits>`.
    pub fn parse(text: &str) -> Result<TokenHash, String> {
        let Some(hex) = text.strip_prefix("sha256:") else {
            return Err(format!(
                "`{}` is not a token hash: write `sha256:` and 64 hex digits (never the token itself)",
                shorten(text)
            ));
        };
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("`sha256:{}` must be followed by exactly 64 hex digits", shorten(hex)));
        }
        let mut out = [0u8; 32];
        for (i, o) in out.iter_mut().enumerate() {
            *o = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|e| e.to_string())?;
        }
        Ok(TokenHash(out))
    }

    /// The stored form, `sha256:<hex>`.
    pub fn to_text(self) -> String {
        let mut s = String::from("sha256:");
        for b in self.0 {
            s.push_str(&format!("{b:02x}"));
        }
        s
    }

    /// A short label for logs and the audit log: the first 8 hex digits, never enough to matter.
    pub fn label(self) -> String {
        self.0[..4].iter().map(|b| format!("{b:02x}")).collect()
    }
}

fn shorten(s: &str) -> String {
    if s.chars().count() > 12 { format!("{}…", s.chars().take(8).collect::<String>()) } else { s.to_owned() }
}

/// A new random token.
pub fn generate() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(format!("{PREFIX}{}", base64url(&bytes)))
}

/// Base64url without padding (RFC 4648 §5).
pub fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_random_and_only_its_hash_is_kept() {
        let a = generate().unwrap();
        let b = generate().unwrap();
        assert_ne!(a, b);
        assert!(a.starts_with(PREFIX) && a.len() == PREFIX.len() + 43, "{a}");
        let h = TokenHash::of(&a);
        assert_eq!(TokenHash::parse(&h.to_text()), Ok(h));
        assert_eq!(TokenHash::of(&format!("{a}\n")), h, "a token file's newline is not part of it");
        assert_eq!(h.label().len(), 8);
    }

    #[test]
    fn a_plain_token_in_the_configuration_is_refused_without_being_echoed() {
        let e = TokenHash::parse("bursar_supersecretvalue123").unwrap_err();
        assert!(e.contains("never the token itself") && !e.contains("supersecretvalue123"), "{e}");
        assert!(TokenHash::parse("sha256:abc").unwrap_err().contains("64 hex digits"));
    }

    #[test]
    fn base64url_matches_rfc_4648() {
        assert_eq!(base64url(b""), "");
        assert_eq!(base64url(b"f"), "Zg");
        assert_eq!(base64url(b"fo"), "Zm8");
        assert_eq!(base64url(b"foo"), "Zm9v");
        assert_eq!(base64url(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64url(&[0xfb, 0xff]), "-_8");
    }
}
