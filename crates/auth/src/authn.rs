//! [`Authenticator`]: from what a request presents to an authenticated [`Caller`], or the 401 that
//! says why not.
//!
//! What is tried, in order:
//! 1. `Authorization: MUNGE <credential>` — decoded by `munged`, bound to the request.
//! 2. `Authorization: Bearer <jwt>` or Slurm's `X-SLURM-USER-TOKEN` — a JWT, when `[auth.jwt]` is
//!    configured (a bearer value of three dot-separated parts is taken for one).
//! 3. `Authorization: Bearer <token>` — a token whose hash a principal lists.
//! 4. A TLS client certificate — a principal whose `cert_subjects` lists its subject, or a person
//!    named by its common name.
//! 5. A trusted proxy's user header — only from the configured proxy addresses.
//! 6. The event socket's peer UID (`SO_PEERCRED`) — the user of that UID.
//!
//! A credential that proves a *person's* name (MUNGE, JWT, certificate, proxy, socket peer) makes
//! the declared principal of that name, or, when none is declared, a person with the `[auth]
//! people` roles. A token always belongs to the principal that lists its hash. A presented
//! credential that fails is a 401 even if another would have passed: nobody is silently demoted.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use bursar_model::Timestamp;

use crate::jwt::{JwtError, JwtSettings, JwtSetupError, JwtVerifier};
use crate::munge::{MungeError, MungeSettings};
use crate::principal::{Caller, Principal, Proof};
use crate::role::Roles;
use crate::token::TokenHash;

/// A token a principal may present.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenDecl {
    /// Its hash.
    pub hash: TokenHash,
    /// When it stops working (a rotation's old token), if ever.
    pub expires: Option<Timestamp>,
}

/// A principal as the configuration declares it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PrincipalDecl {
    /// Its name.
    pub name: String,
    /// Its roles.
    pub roles: Roles,
    /// The job ids it may speak for (`*` patterns); empty: all.
    pub jobs: Vec<String>,
    /// Its tokens.
    pub tokens: Vec<TokenDecl>,
    /// TLS client certificate subjects that are this principal (`CN=slurmctld,O=lab`).
    pub cert_subjects: Vec<String>,
}

/// A trusted reverse proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxySettings {
    /// The addresses requests from the proxy come from.
    pub addresses: Vec<IpAddr>,
    /// The header that names the user (`X-Forwarded-User`).
    pub header: String,
}

/// Everything the server needs to authenticate, as the configuration gives it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuthSettings {
    /// The declared principals.
    pub principals: Vec<PrincipalDecl>,
    /// The roles of a person a credential proves but the configuration does not declare.
    pub people: Roles,
    /// JWTs.
    pub jwt: Option<JwtSettings>,
    /// MUNGE.
    pub munge: Option<MungeSettings>,
    /// A reverse proxy.
    pub proxy: Option<ProxySettings>,
}

impl AuthSettings {
    /// Whether anything is configured: without it, a (loopback) server is open.
    pub fn is_empty(&self) -> bool {
        self.principals.is_empty() && self.jwt.is_none() && self.munge.is_none() && self.proxy.is_none()
    }
}

/// A TLS client certificate the listener verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertIdentity {
    /// The subject, as a DN (`CN=slurmctld,O=lab`).
    pub subject: String,
    /// Its common name.
    pub common_name: Option<String>,
}

/// What a request presents.
#[derive(Debug, Clone, Default)]
pub struct Presented<'a> {
    /// The `Authorization` header.
    pub authorization: Option<&'a str>,
    /// Slurm's `X-SLURM-USER-TOKEN`.
    pub slurm_token: Option<&'a str>,
    /// Slurm's `X-SLURM-USER-NAME`, which must match the token's user when given.
    pub slurm_user: Option<&'a str>,
    /// The value of the configured proxy header, if the request has it.
    pub proxy_user: Option<&'a str>,
    /// The peer address (TCP).
    pub peer: Option<IpAddr>,
    /// A verified client certificate.
    pub cert: Option<CertIdentity>,
    /// The socket peer's UID and its user name.
    pub unix: Option<(u32, String)>,
    /// The request's MUNGE binding ([`crate::munge::binding`]): method, path, body.
    pub binding: Option<String>,
}

impl Presented<'_> {
    /// Whether verifying it runs a program (MUNGE): the caller should do it off the async threads.
    pub fn blocks(&self) -> bool {
        self.authorization.is_some_and(|a| a.trim_start().starts_with(crate::munge::SCHEME))
    }
}

/// Why a request is not authenticated: 401, with the sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No credential.
    #[error("this server requires a credential: {0}")]
    Missing(String),
    /// A bearer token nobody lists.
    #[error("the bearer token is not one this server knows (mistyped, revoked, or for another server)")]
    UnknownToken,
    /// A listed token past its `expires`.
    #[error("the bearer token of `{principal}` expired at {at}; use its replacement")]
    ExpiredToken {
        /// Whose it was.
        principal: String,
        /// When it expired.
        at: Timestamp,
    },
    /// A JWT that does not verify.
    #[error("{0}")]
    Jwt(#[from] JwtError),
    /// A MUNGE credential that does not verify.
    #[error("{0}")]
    Munge(#[from] MungeError),
    /// A credential of a kind this server is not configured for.
    #[error("{0}")]
    NotAccepted(String),
    /// A proxy header from an address that is not a configured proxy.
    #[error("the `{header}` header is honoured only from the configured proxies, not from {peer}")]
    UntrustedProxy {
        /// The header.
        header: String,
        /// Where the request came from.
        peer: String,
    },
    /// Slurm's user header names someone else than the token.
    #[error("`X-SLURM-USER-NAME` is `{header}` but the token is `{token}`'s")]
    SlurmUserMismatch {
        /// The header.
        header: String,
        /// The token's user.
        token: String,
    },
}

/// Why the authenticator cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The JWT keys.
    #[error("[auth.jwt]: {0}")]
    Jwt(#[from] JwtSetupError),
    /// Two principals share a name or a token.
    #[error("{0}")]
    Conflict(String),
}

/// Authenticates requests under one configuration (swapped whole when the configuration reloads).
#[derive(Debug)]
pub struct Authenticator {
    open: bool,
    by_name: HashMap<String, Arc<Principal>>,
    tokens: HashMap<TokenHash, (Arc<Principal>, Option<Timestamp>)>,
    certs: HashMap<String, Arc<Principal>>,
    people: Roles,
    jwt: Option<JwtVerifier>,
    munge: Option<MungeSettings>,
    proxy: Option<ProxySettings>,
    /// What this server accepts, for the 401's help.
    accepted: String,
}

impl Authenticator {
    /// An authenticator that lets every request through as [`Caller::open`] (no principals
    /// configured; serve allows it on loopback only).
    pub fn open() -> Authenticator {
        Authenticator {
            open: true,
            by_name: HashMap::new(),
            tokens: HashMap::new(),
            certs: HashMap::new(),
            people: Roles::all(),
            jwt: None,
            munge: None,
            proxy: None,
            accepted: String::new(),
        }
    }

    /// Builds the authenticator for `settings` (reading the JWT key files); an empty configuration
    /// gives [`Authenticator::open`].
    pub fn new(settings: &AuthSettings) -> Result<Authenticator, SetupError> {
        if settings.is_empty() {
            return Ok(Authenticator::open());
        }
        let mut by_name = HashMap::new();
        let mut tokens = HashMap::new();
        let mut certs = HashMap::new();
        for d in &settings.principals {
            let p = Arc::new(Principal {
                name: Arc::from(d.name.as_str()),
                roles: d.roles,
                jobs: d.jobs.clone(),
                declared: true,
            });
            if by_name.insert(d.name.clone(), p.clone()).is_some() {
                return Err(SetupError::Conflict(format!("principal `{}` is declared twice", d.name)));
            }
            for t in &d.tokens {
                if let Some((other, _)) = tokens.insert(t.hash, (p.clone(), t.expires)) {
                    return Err(SetupError::Conflict(format!(
                        "principals `{}` and `{}` list the same token hash",
                        other.name, d.name
                    )));
                }
            }
            for s in &d.cert_subjects {
                certs.insert(s.clone(), p.clone());
            }
        }
        let jwt = settings.jwt.clone().map(JwtVerifier::new).transpose()?;
        let mut accepted = Vec::new();
        if !tokens.is_empty() {
            accepted.push("`Authorization: Bearer <token>`");
        }
        if jwt.is_some() {
            accepted.push("a JWT (`Authorization: Bearer <jwt>` or `X-SLURM-USER-TOKEN`)");
        }
        if settings.munge.is_some() {
            accepted.push("a MUNGE credential (`bursar approve` sends one)");
        }
        if !certs.is_empty() {
            accepted.push("a TLS client certificate");
        }
        if settings.proxy.is_some() {
            accepted.push("the proxy's user header");
        }
        Ok(Authenticator {
            open: false,
            by_name,
            tokens,
            certs,
            people: settings.people,
            jwt,
            munge: settings.munge.clone(),
            proxy: settings.proxy.clone(),
            accepted: accepted.join(", "),
        })
    }

    /// Whether this authenticator lets everyone through.
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// How many principals are declared.
    pub fn principals(&self) -> usize {
        self.by_name.len()
    }

    /// The MUNGE settings, when MUNGE is accepted.
    pub fn munge(&self) -> Option<&MungeSettings> {
        self.munge.as_ref()
    }

    /// The proxy header's name, when a proxy is trusted.
    pub fn proxy_header(&self) -> Option<&str> {
        self.proxy.as_ref().map(|p| p.header.as_str())
    }

    /// The principal `name` names: declared, or a person with the `people` roles.
    pub fn person(&self, name: &str) -> Arc<Principal> {
        self.by_name.get(name).cloned().unwrap_or_else(|| {
            Arc::new(Principal { name: Arc::from(name), roles: self.people, jobs: Vec::new(), declared: false })
        })
    }

    /// The caller a request is, at wall-clock time `now`.
    pub fn authenticate(&self, p: &Presented<'_>, now: Timestamp) -> Result<Caller, AuthError> {
        if self.open {
            return Ok(Caller::open());
        }
        let person = |name: &str, proof: Proof| Caller { principal: self.person(name), proof };
        if let Some(auth) = p.authorization.map(str::trim) {
            if let Some(cred) = auth.strip_prefix(crate::munge::SCHEME).map(str::trim) {
                let Some(settings) = &self.munge else {
                    return Err(AuthError::NotAccepted(
                        "this server does not accept MUNGE credentials (no `[auth.munge]`)".into(),
                    ));
                };
                let expect = p.binding.as_deref().unwrap_or_default();
                let id = crate::munge::verify(settings, cred, expect)?;
                return Ok(person(&id.user, Proof::Munge { uid: id.uid }));
            }
            let Some(bearer) = auth.strip_prefix("Bearer ").map(str::trim) else {
                return Err(AuthError::NotAccepted(
                    "the `Authorization` header is neither `Bearer <token>` nor `MUNGE <credential>`".into(),
                ));
            };
            if JwtVerifier::looks_like(bearer) && self.jwt.is_some() {
                return self.jwt_caller(bearer, p.slurm_user);
            }
            return match self.tokens.get(&TokenHash::of(bearer)) {
                Some((principal, Some(at))) if now >= *at => {
                    Err(AuthError::ExpiredToken { principal: principal.name.to_string(), at: *at })
                }
                Some((principal, _)) => Ok(Caller {
                    principal: principal.clone(),
                    proof: Proof::Token { label: TokenHash::of(bearer).label() },
                }),
                None => Err(AuthError::UnknownToken),
            };
        }
        if let Some(token) = p.slurm_token {
            if self.jwt.is_none() {
                return Err(AuthError::NotAccepted("this server does not accept JWTs (no `[auth.jwt]`)".into()));
            }
            return self.jwt_caller(token.trim(), p.slurm_user);
        }
        if let Some(cert) = &p.cert {
            if let Some(principal) = self.certs.get(&cert.subject) {
                return Ok(Caller {
                    principal: principal.clone(),
                    proof: Proof::Cert { subject: cert.subject.clone() },
                });
            }
            if let Some(cn) = cert.common_name.as_deref().filter(|c| bursar_model::names::check_name("CN", c).is_ok()) {
                return Ok(person(cn, Proof::Cert { subject: cert.subject.clone() }));
            }
        }
        if let Some(user) = p.proxy_user {
            let header = self.proxy.as_ref().map(|x| x.header.clone()).unwrap_or_default();
            let peer = p.peer.map(|a| a.to_string()).unwrap_or_else(|| "an unknown address".into());
            let trusted = self.proxy.as_ref().is_some_and(|x| p.peer.is_some_and(|a| x.addresses.contains(&a)));
            if !trusted {
                return Err(AuthError::UntrustedProxy { header, peer });
            }
            let user = user.trim();
            bursar_model::names::check_name(&header, user).map_err(|e| AuthError::NotAccepted(e.message))?;
            return Ok(person(user, Proof::Proxy { from: peer }));
        }
        if let Some((uid, name)) = &p.unix {
            return Ok(person(name, Proof::Unix { uid: *uid }));
        }
        Err(AuthError::Missing(if self.accepted.is_empty() {
            "none is configured that a request can carry".into()
        } else {
            format!("send {}", self.accepted)
        }))
    }

    fn jwt_caller(&self, token: &str, slurm_user: Option<&str>) -> Result<Caller, AuthError> {
        let Some(v) = &self.jwt else {
            return Err(AuthError::NotAccepted("this server does not accept JWTs (no `[auth.jwt]`)".into()));
        };
        let id = v.verify(token)?;
        if let Some(h) = slurm_user.map(str::trim).filter(|h| *h != id.user) {
            return Err(AuthError::SlurmUserMismatch { header: h.to_owned(), token: id.user });
        }
        Ok(Caller {
            principal: self.person(&id.user),
            proof: Proof::Jwt { alg: id.alg, kid: id.kid, expires: id.expires },
        })
    }
}

/// The user name of `uid`, from `/etc/passwd` (`uid-N` when it has none): how a socket peer is
/// named.
pub fn user_of_uid(uid: u32) -> String {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    passwd
        .lines()
        .find_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            let _ = f.next();
            (f.next()?.parse::<u32>().ok()? == uid).then(|| name.to_owned())
        })
        .unwrap_or_else(|| format!("uid-{uid}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::role::Role;

    fn settings(token: &str) -> AuthSettings {
        AuthSettings {
            principals: vec![
                PrincipalDecl {
                    name: "slurmctld".into(),
                    roles: [Role::Scheduler].into_iter().collect(),
                    tokens: vec![TokenDecl { hash: TokenHash::of(token), expires: None }],
                    ..PrincipalDecl::default()
                },
                PrincipalDecl {
                    name: "old".into(),
                    roles: [Role::Reader].into_iter().collect(),
                    tokens: vec![TokenDecl { hash: TokenHash::of("old-token"), expires: Some(Timestamp(1000)) }],
                    ..PrincipalDecl::default()
                },
            ],
            people: [Role::Approver, Role::User].into_iter().collect(),
            proxy: Some(ProxySettings {
                addresses: vec!["10.0.0.5".parse().unwrap()],
                header: "X-Forwarded-User".into(),
            }),
            ..AuthSettings::default()
        }
    }

    #[test]
    fn tokens_name_their_principal_and_nothing_else_passes() {
        let a = Authenticator::new(&settings("bursar_s3cret")).unwrap();
        let now = Timestamp(2000);
        let bearer = |t: &str| format!("Bearer {t}");
        let ok =
            a.authenticate(&Presented { authorization: Some(&bearer("bursar_s3cret")), ..Default::default() }, now);
        assert_eq!(ok.unwrap().name(), "slurmctld");
        let wrong =
            a.authenticate(&Presented { authorization: Some(&bearer("bursar_guess")), ..Default::default() }, now);
        assert_eq!(wrong, Err(AuthError::UnknownToken));
        let expired =
            a.authenticate(&Presented { authorization: Some(&bearer("old-token")), ..Default::default() }, now);
        assert!(matches!(expired, Err(AuthError::ExpiredToken { .. })));
        let none = a.authenticate(&Presented::default(), now).unwrap_err().to_string();
        assert!(none.contains("requires a credential") && none.contains("Bearer"), "{none}");
        let basic = a.authenticate(&Presented { authorization: Some("Basic eDp5"), ..Default::default() }, now);
        assert!(matches!(basic, Err(AuthError::NotAccepted(_))));
    }

    #[test]
    fn a_proxy_header_counts_only_from_the_proxy() {
        let a = Authenticator::new(&settings("t")).unwrap();
        let from =
            |ip: &str| Presented { proxy_user: Some("bob"), peer: Some(ip.parse().unwrap()), ..Default::default() };
        let bob = a.authenticate(&from("10.0.0.5"), Timestamp(0)).unwrap();
        assert_eq!((bob.name(), bob.principal.declared), ("bob", false));
        assert!(bob.principal.roles.has(Role::Approver));
        assert!(matches!(a.authenticate(&from("10.0.0.6"), Timestamp(0)), Err(AuthError::UntrustedProxy { .. })));
    }

    #[test]
    fn no_configuration_is_open() {
        let a = Authenticator::new(&AuthSettings::default()).unwrap();
        assert!(a.is_open());
        assert!(a.authenticate(&Presented::default(), Timestamp(0)).unwrap().is_open());
    }
}
