//! [`Authenticator`]: from what a request presents to an authenticated [`Caller`], or the 401 that
//! says why not.
//!
//! What is checked (every credential the request carries, each on its own):
//! 1. `Authorization: MUNGE <credential>` — decoded by `munged`, bound to the request (method and
//!    path now, the body's digest once the body is read: [`Caller::check_body`]).
//! 2. `Authorization: Bearer <jwt>` or Slurm's `X-SLURM-USER-TOKEN` — a JWT, when `[auth.jwt]` is
//!    configured (a bearer value of three dot-separated parts is taken for one).
//! 3. `Authorization: Bearer <token>` — a token whose hash a principal lists.
//! 4. A TLS client certificate — a principal whose `cert_subjects` lists its subject, or a person
//!    named by its common name.
//! 5. A trusted proxy's user header — only from the configured proxy addresses.
//! 6. The event socket's peer UID (`SO_PEERCRED`) — a principal whose `unix_users` lists its user,
//!    or the person of that user.
//!
//! The scheme of `Authorization` is case-insensitive (RFC 7235: `bearer`, `BEARER`, `Bearer`). A
//! credential that fails is a 401 even if another the request carries would pass: nobody is
//! silently demoted, and nobody gets in on one good credential beside a forged one. When several
//! pass, the first in the order above is the caller.
//!
//! **People and service principals are separate namespaces.** A credential that proves a *person's*
//! name (MUNGE, a JWT, a certificate's common name, a proxy's header, a socket peer) makes a person:
//! the `[auth] people` roles, or those of a `[[person]]` table of that name. It never makes the
//! declared `[[principal]]` of that name, whose powers only its own tokens, `cert_subjects` and
//! `unix_users` reach: a JWT whose user claim is `ops` is the person `ops`, not the admin
//! principal `ops`. A token always belongs to the principal that lists its hash.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use bursar_model::Timestamp;

use crate::budget::{Budget, BudgetSettings};
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
    /// Local users whose connections to the event socket are this principal (`slurm`): a socket
    /// peer is otherwise the person of its user.
    pub unix_users: Vec<String>,
    /// Its own write budget; `None`: `[budget]`'s default for principals.
    pub budget: Option<Budget>,
}

/// A person the configuration gives roles of their own (`[[person]]`), reached only through the
/// credentials that name people.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PersonDecl {
    /// Their name, as a credential proves it.
    pub name: String,
    /// Their roles, instead of `[auth] people`.
    pub roles: Roles,
    /// Their own write budget; `None`: `[budget]`'s default for people.
    pub budget: Option<Budget>,
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
    /// People with roles of their own.
    pub persons: Vec<PersonDecl>,
    /// The default write budgets.
    pub budget: BudgetSettings,
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
    /// The request a MUNGE credential must have been made for ([`crate::munge::request`]: method
    /// and path); the body's digest is checked once the body is read ([`Caller::check_body`]).
    pub request: Option<String>,
}

impl Presented<'_> {
    /// Whether verifying it runs a program (MUNGE): the caller should do it off the async threads.
    pub fn blocks(&self) -> bool {
        self.authorization.and_then(scheme).is_some_and(|(s, _)| s.eq_ignore_ascii_case(crate::munge::SCHEME))
    }
}

/// The scheme of an `Authorization` value and the rest (`("Bearer", "t0k3n")`).
fn scheme(value: &str) -> Option<(&str, &str)> {
    let value = value.trim();
    let (scheme, rest) = value.split_once(|c: char| c.is_ascii_whitespace()).unwrap_or((value, ""));
    (!scheme.is_empty()).then(|| (scheme, rest.trim()))
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
    unix: HashMap<String, Arc<Principal>>,
    persons: HashMap<String, Arc<Principal>>,
    people: Roles,
    budget: BudgetSettings,
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
            unix: HashMap::new(),
            persons: HashMap::new(),
            people: Roles::all(),
            budget: BudgetSettings::default(),
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
        let mut unix = HashMap::new();
        for d in &settings.principals {
            let p = Arc::new(Principal {
                name: Arc::from(d.name.as_str()),
                roles: d.roles,
                jobs: d.jobs.clone(),
                declared: true,
                named: true,
                budget: d.budget.unwrap_or(settings.budget.principal),
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
            for u in &d.unix_users {
                if let Some(other) = unix.insert(u.clone(), p.clone()) {
                    return Err(SetupError::Conflict(format!(
                        "principals `{}` and `{}` both list the local user `{u}` in `unix_users`",
                        other.name, d.name
                    )));
                }
            }
        }
        let mut persons = HashMap::new();
        for d in &settings.persons {
            let p = Arc::new(Principal {
                name: Arc::from(d.name.as_str()),
                roles: d.roles,
                jobs: Vec::new(),
                declared: false,
                named: true,
                budget: d.budget.unwrap_or(settings.budget.person),
            });
            if persons.insert(d.name.clone(), p).is_some() {
                return Err(SetupError::Conflict(format!("person `{}` is declared twice", d.name)));
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
            unix,
            persons,
            people: settings.people,
            budget: settings.budget,
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

    /// The person `name`: a `[[person]]` of that name, or one with the `[auth] people` roles. Never
    /// a declared principal, whatever its name (people and principals are separate namespaces).
    pub fn person(&self, name: &str) -> Arc<Principal> {
        self.persons.get(name).cloned().unwrap_or_else(|| {
            Arc::new(Principal {
                name: Arc::from(name),
                roles: self.people,
                jobs: Vec::new(),
                declared: false,
                named: false,
                budget: self.budget.person,
            })
        })
    }

    /// The declared principal `name`, if there is one.
    pub fn principal(&self, name: &str) -> Option<Arc<Principal>> {
        self.by_name.get(name).cloned()
    }

    /// The caller a request is, at wall-clock time `now`: every credential it carries is checked,
    /// and one that fails is the 401 even if another passes.
    pub fn authenticate(&self, p: &Presented<'_>, now: Timestamp) -> Result<Caller, AuthError> {
        if self.open {
            return Ok(Caller::open());
        }
        let person = |name: &str, proof: Proof| Caller { principal: self.person(name), proof };
        // The cheap checks first: a forged header is refused before `unmunge` runs.
        let proxy = match p.proxy_user {
            Some(user) => Some(self.proxy_caller(user, p.peer)?),
            None => None,
        };
        let authorization = match p.authorization {
            Some(auth) => Some(self.authorization_caller(auth, p, now)?),
            None => None,
        };
        let slurm = match p.slurm_token {
            Some(token) => {
                if self.jwt.is_none() {
                    return Err(AuthError::NotAccepted("this server does not accept JWTs (no `[auth.jwt]`)".into()));
                }
                Some(self.jwt_caller(token.trim(), p.slurm_user)?)
            }
            None => None,
        };
        let cert = p.cert.as_ref().and_then(|cert| match self.certs.get(&cert.subject) {
            Some(principal) => {
                Some(Caller { principal: principal.clone(), proof: Proof::Cert { subject: cert.subject.clone() } })
            }
            None => cert
                .common_name
                .as_deref()
                .filter(|c| bursar_model::names::check_name("CN", c).is_ok())
                .map(|cn| person(cn, Proof::Cert { subject: cert.subject.clone() })),
        });
        let unix = p.unix.as_ref().map(|(uid, name)| match self.unix.get(name) {
            Some(principal) => Caller { principal: principal.clone(), proof: Proof::Unix { uid: *uid } },
            None => person(name, Proof::Unix { uid: *uid }),
        });
        if let Some(c) = authorization.or(slurm).or(cert).or(proxy).or(unix) {
            if !c.principal.declared && c.principal.name.contains(crate::ID_SEPARATOR) {
                // `~a:b` + `c` and `~a` + `b:c` would be the same kept id (issue 56).
                return Err(AuthError::NotAccepted(format!(
                    "the person `{}` has a name holding `{}`, which bursar keeps event ids under; it is not accepted",
                    c.principal.name,
                    crate::ID_SEPARATOR
                )));
            }
            return Ok(c);
        }
        Err(AuthError::Missing(if self.accepted.is_empty() {
            "none is configured that a request can carry".into()
        } else {
            format!("send {}", self.accepted)
        }))
    }

    /// The caller an `Authorization` header names (MUNGE, a JWT or a token), or why not.
    fn authorization_caller(&self, auth: &str, p: &Presented<'_>, now: Timestamp) -> Result<Caller, AuthError> {
        let not_one = || {
            AuthError::NotAccepted(
                "the `Authorization` header is neither `Bearer <token>` nor `MUNGE <credential>`".into(),
            )
        };
        let (scheme, cred) = scheme(auth).ok_or_else(not_one)?;
        if scheme.eq_ignore_ascii_case(crate::munge::SCHEME) {
            let Some(settings) = &self.munge else {
                return Err(AuthError::NotAccepted(
                    "this server does not accept MUNGE credentials (no `[auth.munge]`)".into(),
                ));
            };
            let expect = p.request.as_deref().unwrap_or_default();
            let id = crate::munge::verify(settings, cred, expect)?;
            return Ok(Caller {
                principal: self.person(&id.user),
                proof: Proof::Munge { uid: id.uid, body_sha256: id.body_sha256 },
            });
        }
        if !scheme.eq_ignore_ascii_case("Bearer") || cred.is_empty() {
            return Err(not_one());
        }
        if JwtVerifier::looks_like(cred) && self.jwt.is_some() {
            return self.jwt_caller(cred, p.slurm_user);
        }
        match self.tokens.get(&TokenHash::of(cred)) {
            Some((principal, Some(at))) if now >= *at => {
                Err(AuthError::ExpiredToken { principal: principal.name.to_string(), at: *at })
            }
            Some((principal, _)) => {
                Ok(Caller { principal: principal.clone(), proof: Proof::Token { label: TokenHash::of(cred).label() } })
            }
            None => Err(AuthError::UnknownToken),
        }
    }

    /// The person a proxy's user header names, believed only from a configured proxy.
    fn proxy_caller(&self, user: &str, peer: Option<IpAddr>) -> Result<Caller, AuthError> {
        let header = self.proxy.as_ref().map(|x| x.header.clone()).unwrap_or_default();
        let from = peer.map(|a| a.to_string()).unwrap_or_else(|| "an unknown address".into());
        let trusted = self.proxy.as_ref().is_some_and(|x| peer.is_some_and(|a| x.addresses.contains(&a)));
        if !trusted {
            return Err(AuthError::UntrustedProxy { header, peer: from });
        }
        let user = user.trim();
        bursar_model::names::check_name(&header, user).map_err(|e| AuthError::NotAccepted(e.message))?;
        Ok(Caller { principal: self.person(user), proof: Proof::Proxy { from } })
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

/// The user name of `uid` as this host's name service knows it (`getpwuid_r`: `/etc/passwd`, and
/// LDAP or SSSD where the site configured them): how a socket peer is named. `None` when the host
/// has no user for it: bursar does not make a name up (`uid-54321` could be a real login's).
pub fn user_of_uid(uid: u32) -> Option<String> {
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: `pwd` and `buf` outlive the call; `getpwuid_r` writes only within `buf.len()` bytes of
    // `buf` and sets `result` to `&pwd` or null; `pw_name` then points into `buf`, NUL-terminated.
    #[expect(unsafe_code, reason = "getpwuid_r is the name service's only interface (NSS: LDAP, SSSD, files)")]
    let name = unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut result);
        if rc != 0 || result.is_null() || pwd.pw_name.is_null() {
            return None;
        }
        std::ffi::CStr::from_ptr(pwd.pw_name).to_string_lossy().into_owned()
    };
    Some(name).filter(|n| bursar_model::names::check_name("user", n).is_ok())
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
    fn a_person_named_like_a_principal_never_gets_its_powers() {
        // Regression (issue 46): a proxy user (or a JWT's, or MUNGE's) named `slurmctld` was the
        // declared principal `slurmctld`, with its `submit` power.
        let a = Authenticator::new(&settings("t")).unwrap();
        let p =
            Presented { proxy_user: Some("slurmctld"), peer: Some("10.0.0.5".parse().unwrap()), ..Default::default() };
        let c = a.authenticate(&p, Timestamp(0)).unwrap();
        assert_eq!((c.name(), c.principal.declared), ("slurmctld", false));
        assert!(!c.principal.roles.has(Role::Scheduler) && c.principal.roles.has(Role::Approver));
        assert_eq!(c.principal.budget, Budget::PERSON);
        // The token still names the principal, with its budget.
        let t = a.authenticate(&Presented { authorization: Some("Bearer t"), ..Default::default() }, Timestamp(0));
        let t = t.unwrap();
        assert!(t.principal.declared && t.principal.roles.has(Role::Scheduler));
        assert_eq!(t.principal.budget, Budget::PRINCIPAL);
    }

    #[test]
    fn a_socket_peer_is_a_principal_only_by_unix_users() {
        let mut s = settings("t");
        s.principals[0].unix_users = vec!["slurm".into()];
        let a = Authenticator::new(&s).unwrap();
        let peer = |name: &str| Presented { unix: Some((64030, name.into())), ..Default::default() };
        let slurm = a.authenticate(&peer("slurm"), Timestamp(0)).unwrap();
        assert_eq!((slurm.name(), slurm.principal.declared), ("slurmctld", true));
        // A local user named like the principal is a person.
        let named = a.authenticate(&peer("slurmctld"), Timestamp(0)).unwrap();
        assert_eq!((named.name(), named.principal.declared), ("slurmctld", false));
        assert!(!named.principal.roles.has(Role::Scheduler));
    }

    #[test]
    fn any_failing_credential_is_a_401_and_the_scheme_is_case_insensitive() {
        let a = Authenticator::new(&settings("bursar_s3cret")).unwrap();
        let now = Timestamp(2000);
        for scheme in ["bearer", "BEARER", "Bearer", "bEaReR"] {
            let h = format!("{scheme} bursar_s3cret");
            let c = a.authenticate(&Presented { authorization: Some(&h), ..Default::default() }, now);
            assert_eq!(c.map(|c| c.name().to_owned()).ok().as_deref(), Some("slurmctld"), "{scheme}");
        }
        // A good token beside a proxy header from an address that is not the proxy: refused.
        let both = Presented {
            authorization: Some("Bearer bursar_s3cret"),
            proxy_user: Some("bob"),
            peer: Some("10.9.9.9".parse().unwrap()),
            ..Default::default()
        };
        assert!(matches!(a.authenticate(&both, now), Err(AuthError::UntrustedProxy { .. })));
        // A good proxy header beside a wrong token: refused.
        let both = Presented {
            authorization: Some("Bearer guessed"),
            proxy_user: Some("bob"),
            peer: Some("10.0.0.5".parse().unwrap()),
            ..Default::default()
        };
        assert_eq!(a.authenticate(&both, now), Err(AuthError::UnknownToken));
        // A Slurm token header that is no JWT this server accepts, beside a good token: refused.
        let both =
            Presented { authorization: Some("Bearer bursar_s3cret"), slurm_token: Some("x.y.z"), ..Default::default() };
        assert!(matches!(a.authenticate(&both, now), Err(AuthError::NotAccepted(_))));
    }

    #[test]
    fn no_configuration_is_open() {
        let a = Authenticator::new(&AuthSettings::default()).unwrap();
        assert!(a.is_open());
        assert!(a.authenticate(&Presented::default(), Timestamp(0)).unwrap().is_open());
    }
}
