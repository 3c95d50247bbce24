//! Who is calling `bursar serve`, and what they may do.
//!
//! bursar decides who gets GPUs and who may let a big job through, so every request is someone:
//! a **principal** declared in the configuration (`[[principal]]`: a name, roles, the jobs it may
//! speak for, its credentials), or a person whose name a credential proves. Each request is
//! authenticated ([`Authenticator`]: hashed bearer tokens, JWTs as `slurmrestd` takes them, MUNGE,
//! TLS client certificates, a trusted proxy's header, the event socket's peer) and each input
//! checked against the caller's roles ([`Caller::check_input`]) before anything reaches the engine.
//! A missing or wrong credential is an [`AuthError`] (401); a valid one without the power a
//! [`Denied`] (403) that names the power and the principal.
//!
//! Boundaries: no HTTP here (serve reads the headers and hands over a [`Presented`]), no file
//! format (the configuration file is read by `bursar-config` into an [`AuthSettings`]), no engine
//! state (the checks that need it — is this principal among the job's approvers — run on serve's
//! engine thread, with the [`Caller`] this crate gives). It depends on `bursar-model` only among
//! bursar's crates.
//!
//! Layout: [`role`] (roles and powers), [`principal`] (principals, callers, proofs, input checks),
//! [`authn`] (settings and the authenticator), [`budget`] (write budgets per principal and person),
//! [`token`] (random tokens, stored hashed), [`jwt`] (HS256 and JWKS verification), [`munge`]
//! (`munge`/`unmunge`).

pub mod authn;
pub mod budget;
pub mod jwt;
pub mod munge;
pub mod principal;
pub mod role;
pub mod token;

pub use authn::{
    AuthError, AuthSettings, Authenticator, CertIdentity, PersonDecl, Presented, PrincipalDecl, ProxySettings,
    SetupError, TokenDecl, user_of_uid,
};
pub use budget::{Budget, BudgetSettings};
pub use jwt::{JwtError, JwtSettings};
pub use munge::{MungeError, MungeSettings};
pub use principal::{Caller, Denied, ID_SEPARATOR, KeepaliveScope, PERSON_MARK, Principal, Proof};
pub use role::{Power, Role, Roles};
pub use token::TokenHash;
