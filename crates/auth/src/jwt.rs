//! JSON Web Tokens as Slurm's `slurmrestd` accepts them (`AuthAltTypes=auth/jwt`): HS256 under the
//! cluster's `jwt_hs256.key` (what `scontrol token` makes), and RS256 under the keys of a JWKS file
//! (a site's OIDC provider, as `AuthAltParameters=jwks=` does). `exp` is required and checked, `nbf`
//! when the token has one, `aud` when the configuration names an audience, and a token may live at
//! most `max_lifetime` (24 hours by default: `exp` at most that far from now, and from `iat` when
//! the token says when it was issued), so a token made to last until 9999 is refused. The user
//! comes from a claim (`sun`, Slurm's, by default). Verification is `jsonwebtoken`'s.

use std::path::Path;

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};

/// What a JWT verifier needs, as the configuration gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtSettings {
    /// The HS256 key file (raw bytes, as Slurm's `jwt_hs256.key`).
    pub hs256_key_file: Option<std::path::PathBuf>,
    /// A JWKS file (`{"keys":[…]}`) with RS256 keys.
    pub jwks_file: Option<std::path::PathBuf>,
    /// The audience a token must carry (`aud`); none: `aud` is not checked.
    pub audience: Option<String>,
    /// The claim that names the user (default `sun`, as `scontrol token` writes it).
    pub user_claim: String,
    /// Clock leeway for `exp` and `nbf`, seconds.
    pub leeway_secs: u64,
    /// The longest a token may be valid, seconds ([`DEFAULT_MAX_LIFETIME_SECS`] by default).
    pub max_lifetime_secs: u64,
}

impl Default for JwtSettings {
    fn default() -> JwtSettings {
        JwtSettings {
            hs256_key_file: None,
            jwks_file: None,
            audience: None,
            user_claim: "sun".to_owned(),
            leeway_secs: 60,
            max_lifetime_secs: DEFAULT_MAX_LIFETIME_SECS,
        }
    }
}

/// The longest a JWT may be valid by default: 24 hours (Slurm's `scontrol token` makes tokens of
/// 30 minutes unless told otherwise; a service uses a bearer token of its own, not a JWT).
pub const DEFAULT_MAX_LIFETIME_SECS: u64 = 24 * 3600;

/// Why a token is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwtError {
    /// Past its `exp`.
    #[error("the JWT expired")]
    Expired,
    /// Before its `nbf`.
    #[error("the JWT is not valid yet (its `nbf` is in the future)")]
    NotYetValid,
    /// Valid for longer than the configured maximum.
    #[error(
        "the JWT is valid for {0} s, longer than the {1} s this server accepts (`[auth.jwt] max_lifetime`); ask for a shorter-lived token"
    )]
    TooLong(i64, u64),
    /// `aud` is not the configured audience.
    #[error("the JWT is not for this server: its `aud` is not `{0}`")]
    Audience(String),
    /// The signature does not verify under any configured key.
    #[error("the JWT's signature does not verify under this server's keys")]
    Signature,
    /// Signed with an algorithm not configured (`none`, `HS384`, an RS256 token without a JWKS).
    #[error("the JWT is signed with {0}, which this server does not accept")]
    Algorithm(String),
    /// The user claim is missing or not a name.
    #[error("the JWT names no user in its `{0}` claim")]
    NoUser(String),
    /// Malformed, or another failed check.
    #[error("the JWT is not valid: {0}")]
    Invalid(String),
}

/// A verified token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtIdentity {
    /// The user its claim names.
    pub user: String,
    /// `HS256` or `RS256`.
    pub alg: &'static str,
    /// The key id, when the token named one.
    pub kid: Option<String>,
    /// Its `exp`.
    pub expires: i64,
}

/// Verifies tokens under the configured keys.
pub struct JwtVerifier {
    hs256: Option<DecodingKey>,
    jwks: Option<JwkSet>,
    settings: JwtSettings,
}

impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtVerifier")
            .field("hs256", &self.hs256.as_ref().map(|_| "<key>"))
            .field("jwks_keys", &self.jwks.as_ref().map(|j| j.keys.len()))
            .field("settings", &self.settings)
            .finish()
    }
}

/// Why the verifier cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum JwtSetupError {
    /// A key file cannot be read.
    #[error("cannot read `{path}`: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The HS256 key is too short to be a secret.
    #[error(
        "`{0}` holds {1} bytes: an HS256 key needs at least 32 (Slurm's `jwt_hs256.key` has 32 or more random bytes)"
    )]
    ShortKey(String, usize),
    /// The JWKS file is not one.
    #[error("`{0}` is not a JWKS file: {1}")]
    Jwks(String, String),
    /// Neither key is configured.
    #[error("`[auth.jwt]` needs `hs256_key_file` or `jwks_file`")]
    NoKey,
}

fn read(path: &Path) -> Result<Vec<u8>, JwtSetupError> {
    std::fs::read(path).map_err(|source| JwtSetupError::Read { path: path.display().to_string(), source })
}

impl JwtVerifier {
    /// Reads the key files.
    pub fn new(settings: JwtSettings) -> Result<JwtVerifier, JwtSetupError> {
        let hs256 = match &settings.hs256_key_file {
            Some(p) => {
                let bytes = read(p)?;
                if bytes.len() < 32 {
                    return Err(JwtSetupError::ShortKey(p.display().to_string(), bytes.len()));
                }
                Some(DecodingKey::from_secret(&bytes))
            }
            None => None,
        };
        let jwks = match &settings.jwks_file {
            Some(p) => {
                let text = read(p)?;
                Some(
                    serde_json::from_slice::<JwkSet>(&text)
                        .map_err(|e| JwtSetupError::Jwks(p.display().to_string(), e.to_string()))?,
                )
            }
            None => None,
        };
        if hs256.is_none() && jwks.is_none() {
            return Err(JwtSetupError::NoKey);
        }
        Ok(JwtVerifier { hs256, jwks, settings })
    }

    /// Whether `token` looks like a JWT (three base64url parts), so a bearer value is tried as one.
    pub fn looks_like(token: &str) -> bool {
        token.split('.').count() == 3 && token.len() > 16
    }

    /// Verifies `token`: signature, `exp`, `aud` (when configured), and the user claim.
    pub fn verify(&self, token: &str) -> Result<JwtIdentity, JwtError> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| JwtError::Invalid(e.to_string()))?;
        refuse_critical_extensions(token)?;
        let (key, alg) = match header.alg {
            Algorithm::HS256 => (self.hs256.clone().ok_or_else(|| JwtError::Algorithm("HS256".into()))?, "HS256"),
            Algorithm::RS256 => {
                let set = self.jwks.as_ref().ok_or_else(|| JwtError::Algorithm("RS256".into()))?;
                let jwk = match &header.kid {
                    Some(kid) => set.find(kid).ok_or(JwtError::Signature)?,
                    None if set.keys.len() == 1 => &set.keys[0],
                    None => {
                        return Err(JwtError::Invalid(
                            "the token names no key (`kid`) and the JWKS holds several".into(),
                        ));
                    }
                };
                (DecodingKey::from_jwk(jwk).map_err(|e| JwtError::Invalid(e.to_string()))?, "RS256")
            }
            other => return Err(JwtError::Algorithm(format!("{other:?}"))),
        };
        let mut v = Validation::new(header.alg);
        v.leeway = self.settings.leeway_secs;
        v.validate_nbf = true;
        v.set_required_spec_claims(&["exp"]);
        match &self.settings.audience {
            Some(aud) => {
                v.set_audience(&[aud]);
                v.required_spec_claims.insert("aud".to_owned());
            }
            None => v.validate_aud = false,
        }
        let data =
            jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(token, &key, &v).map_err(|e| {
                use jsonwebtoken::errors::ErrorKind;
                match e.kind() {
                    ErrorKind::ExpiredSignature => JwtError::Expired,
                    ErrorKind::ImmatureSignature => JwtError::NotYetValid,
                    ErrorKind::InvalidAudience => {
                        JwtError::Audience(self.settings.audience.clone().unwrap_or_default())
                    }
                    ErrorKind::MissingRequiredClaim(c) if c == "aud" => {
                        JwtError::Audience(self.settings.audience.clone().unwrap_or_default())
                    }
                    ErrorKind::InvalidSignature => JwtError::Signature,
                    _ => JwtError::Invalid(e.to_string()),
                }
            })?;
        let claim = &self.settings.user_claim;
        let user = data
            .claims
            .get(claim)
            .and_then(|v| v.as_str())
            .filter(|u| bursar_model::names::check_name(claim, u).is_ok())
            .ok_or_else(|| JwtError::NoUser(claim.clone()))?;
        // The library reads the time claims as unsigned numbers and passes over one that is not a
        // number: each is read again here as a time bursar can compare (an `exp` of 2^63 read as 0
        // passed `max_lifetime`; a text `nbf` was ignored).
        let time = |name: &str| -> Result<Option<i64>, JwtError> {
            match data.claims.get(name) {
                None => Ok(None),
                Some(v) => v.as_i64().filter(|t| (0..=MAX_TIME).contains(t)).map(Some).ok_or_else(|| {
                    JwtError::Invalid(format!("its `{name}` is not a time in seconds since 1970 (got `{v}`)"))
                }),
            }
        };
        let expires = time("exp")?.ok_or_else(|| JwtError::Invalid("it has no `exp`".into()))?;
        let now = now_secs();
        time("nbf")?;
        let issued = time("iat")?;
        if let Some(iat) = issued
            && iat > now.saturating_add(i64::try_from(self.settings.leeway_secs).unwrap_or(i64::MAX))
        {
            return Err(JwtError::Invalid(format!(
                "it was issued in the future (`iat` {iat}, {} s from now): check the issuer's clock",
                iat - now
            )));
        }
        self.check_lifetime(expires, issued, now)?;
        Ok(JwtIdentity { user: user.to_owned(), alg, kid: header.kid, expires })
    }

    /// Refuses a token valid for longer than `max_lifetime`: from `now` to its `exp`, and from its
    /// `iat` when it has one.
    fn check_lifetime(&self, exp: i64, iat: Option<i64>, now: i64) -> Result<(), JwtError> {
        let max = self.settings.max_lifetime_secs;
        let allowed = i64::try_from(max.saturating_add(self.settings.leeway_secs)).unwrap_or(i64::MAX);
        let from_now = exp.saturating_sub(now);
        if from_now > allowed {
            return Err(JwtError::TooLong(from_now, max));
        }
        if let Some(iat) = iat
            && exp.saturating_sub(iat) > allowed
        {
            return Err(JwtError::TooLong(exp.saturating_sub(iat), max));
        }
        Ok(())
    }
}

/// The latest time claim read (year 9999): later ones are not times but attempts at overflow.
const MAX_TIME: i64 = 253_402_300_799;

/// Refuses a token whose header lists critical extensions (`crit`, RFC 7515 §4.1.11): bursar
/// understands none, so it may not accept a token that says it must be understood differently.
fn refuse_critical_extensions(token: &str) -> Result<(), JwtError> {
    let head = token.split('.').next().unwrap_or_default();
    let bytes = base64url(head).ok_or_else(|| JwtError::Invalid("its header is not base64url".into()))?;
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes).map_err(|e| JwtError::Invalid(format!("its header is not JSON: {e}")))?;
    match header.get("crit") {
        None => Ok(()),
        Some(c) => Err(JwtError::Invalid(format!(
            "its header lists critical extensions (`crit`: {c}), which this server does not understand"
        ))),
    }
}

/// Decodes unpadded base64url (a JWT's parts).
fn base64url(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// The wall clock in seconds since the epoch.
fn now_secs() -> i64 {
    bursar_model::Timestamp::wall_clock().millis() / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verifier(max: u64) -> JwtVerifier {
        JwtVerifier {
            hs256: None,
            jwks: None,
            settings: JwtSettings { max_lifetime_secs: max, leeway_secs: 60, ..JwtSettings::default() },
        }
    }

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    /// An HS256 token with `header` (JSON, signed as given) and `claims`.
    fn token(header: &str, claims: &serde_json::Value) -> String {
        use sha2::Digest as _;
        fn b64(bytes: &[u8]) -> String {
            const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
            let mut out = String::new();
            for chunk in bytes.chunks(3) {
                let n = chunk.iter().enumerate().fold(0u32, |acc, (i, b)| acc | u32::from(*b) << (16 - 8 * i));
                for i in 0..=chunk.len() {
                    out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
                }
            }
            out
        }
        let signing = format!("{}.{}", b64(header.as_bytes()), b64(claims.to_string().as_bytes()));
        // HMAC-SHA256, written out: the key is one block long.
        let mut ipad = [0x36u8; 64];
        let mut opad = [0x5cu8; 64];
        for (i, k) in SECRET.iter().enumerate() {
            ipad[i] ^= k;
            opad[i] ^= k;
        }
        let inner = sha2::Sha256::new().chain_update(ipad).chain_update(signing.as_bytes()).finalize();
        let mac = sha2::Sha256::new().chain_update(opad).chain_update(inner).finalize();
        format!("{signing}.{}", b64(&mac))
    }

    fn hs256() -> JwtVerifier {
        JwtVerifier {
            hs256: Some(DecodingKey::from_secret(SECRET)),
            jwks: None,
            settings: JwtSettings { max_lifetime_secs: 3600, leeway_secs: 60, ..JwtSettings::default() },
        }
    }

    const HEADER: &str = r#"{"alg":"HS256","typ":"JWT"}"#;

    #[test]
    fn a_good_token_verifies() {
        let now = now_secs();
        let t = token(HEADER, &serde_json::json!({"sun": "alice", "exp": now + 600, "iat": now}));
        assert_eq!(hs256().verify(&t).map(|i| i.user), Ok("alice".to_owned()));
    }

    /// Issue 56: the time claims and the header's `crit`, each refused where it was let through.
    #[test]
    fn unreadable_times_future_issue_and_critical_extensions_are_refused() {
        let now = now_secs();
        let v = hs256();
        let refused = |header: &str, claims: serde_json::Value, says: &str| {
            let e = v.verify(&token(header, &claims)).expect_err("accepted");
            assert!(e.to_string().contains(says), "{e}");
        };
        // An `exp` of 2^63 was read as 0 and passed `max_lifetime`.
        refused(HEADER, serde_json::json!({"sun": "alice", "exp": 9_223_372_036_854_775_808u64}), "`exp`");
        refused(HEADER, serde_json::json!({"sun": "alice", "exp": now + 600, "nbf": "tomorrow"}), "`nbf`");
        refused(HEADER, serde_json::json!({"sun": "alice", "exp": now + 600, "iat": now + 3000}), "future");
        refused(
            r#"{"alg":"HS256","typ":"JWT","crit":["exp-ext"],"exp-ext":true}"#,
            serde_json::json!({"sun": "alice", "exp": now + 600}),
            "critical",
        );
    }

    #[test]
    fn a_token_lives_at_most_the_maximum() {
        let v = verifier(3600);
        let now = 1_800_000_000;
        assert_eq!(v.check_lifetime(now + 1800, Some(now), now), Ok(()));
        // Until 9999: refused (issue 46).
        assert!(matches!(v.check_lifetime(253_402_300_000, None, now), Err(JwtError::TooLong(_, 3600))));
        // Issued long ago with a long life, even if little of it is left.
        assert!(matches!(v.check_lifetime(now + 60, Some(now - 30 * 86400), now), Err(JwtError::TooLong(..))));
    }
}
