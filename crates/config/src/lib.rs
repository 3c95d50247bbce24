//! The site's configuration file, `bursar.toml` (`/etc/bursar/bursar.toml` by convention, `bursar
//! serve --config FILE` anywhere): who may call the server and what each may do (`[auth]`,
//! `[[principal]]`), and how far an event may run ahead of the clock (`[clock]`).
//!
//! The file is read like a policy file, with `bursar-lang`'s spanned reader: every mistake is
//! reported at once, as `file:line:col` with the line underlined, unknown keys with the list of
//! known ones and a did-you-mean. Relative paths are relative to the file's folder. A token appears
//! in the file only as its SHA-256 (`bursar auth token` makes a token and prints both); a plain
//! token is refused without being echoed.
//!
//! Boundaries: this crate reads and checks the file into plain settings ([`SiteConfig`]); the
//! runtime types are `bursar-auth`'s, and `bursar serve` applies them. It reads the key files
//! `[auth.jwt]` names only when the authenticator is built (`bursar_auth::Authenticator::new`), so
//! a check of the file alone needs no secrets.
//!
//! ```toml
//! [clock]
//! max_skew = "5m"
//!
//! [auth]
//! people = ["approver", "user"]       # a person a credential names, not declared below
//! munge = {}                          # MUNGE credentials, decoded by the local munged
//!
//! [[principal]]
//! name = "slurmctld"
//! roles = ["scheduler"]
//! jobs = ["lab-*"]
//! tokens = ["sha256:8f434346648f6b96df89dda901c5176b10a6d83961dd3c1ac88b59b2dc327aa4"]
//! ```

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use bursar_auth::{
    AuthSettings, JwtSettings, MungeSettings, PrincipalDecl, ProxySettings, Role, Roles, TokenDecl, TokenHash,
};
use bursar_lang::Diagnostic;
use bursar_lang::reader::{Fields, Reader, did_you_mean, one_of};
use bursar_model::{Duration, Timestamp};
use toml::de::{DeTable, DeValue};

/// The default `[clock] max_skew`: how far ahead of the server's clock an event may be dated.
pub const DEFAULT_MAX_SKEW: Duration = Duration::minutes(5);

/// `[clock]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockSettings {
    /// An event dated more than this after the wall clock is refused.
    pub max_skew: Duration,
}

impl Default for ClockSettings {
    fn default() -> ClockSettings {
        ClockSettings { max_skew: DEFAULT_MAX_SKEW }
    }
}

/// Everything the file says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SiteConfig {
    /// The file it came from.
    pub path: PathBuf,
    /// `[auth]` and `[[principal]]`.
    pub auth: AuthSettings,
    /// `[clock]`.
    pub clock: ClockSettings,
}

/// The top-level tables.
const TOP: &[&str] = &["clock", "auth", "principal"];

/// Reads `path`, or every error in it.
pub fn load(path: &Path) -> Result<SiteConfig, Vec<Diagnostic>> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| vec![Diagnostic::file(&shown, format!("cannot read the configuration: {e}"))])?;
    let base = path.parent().unwrap_or(Path::new("."));
    parse(&shown, &text, base).map(|mut c| {
        c.path = path.to_path_buf();
        c
    })
}

/// Reads a configuration's text; `file` names it in diagnostics, `base` resolves relative paths.
pub fn parse(file: &str, text: &str, base: &Path) -> Result<SiteConfig, Vec<Diagnostic>> {
    let (doc, syntax) = DeTable::parse_recoverable(text);
    if !syntax.is_empty() {
        return Err(syntax
            .iter()
            .map(|e| match e.span() {
                Some(span) => Diagnostic::at(file, text, span, e.message().trim().to_owned()),
                None => Diagnostic::file(file, e.message().trim().to_owned()),
            })
            .collect());
    }
    let mut r = Reader::new(file, text);
    let root = doc.get_ref();
    let mut top = Fields::new(root, 0..0, "the configuration");
    let mut out = SiteConfig::default();
    if let Some(mut c) = top.table(&mut r, "clock") {
        c.what = "`[clock]`".into();
        if let Some(d) = c.duration(&mut r, "max_skew") {
            out.clock.max_skew = d;
        }
        c.finish(&mut r, &["max_skew"]);
    }
    if let Some(mut a) = top.table(&mut r, "auth") {
        a.what = "`[auth]`".into();
        read_auth(&mut r, &mut a, base, &mut out.auth);
        a.finish(&mut r, &["people", "jwt", "munge", "proxy"]);
    }
    for p in top.tables(&mut r, "principal") {
        if let Some(d) = principal(&mut r, p) {
            if out.auth.principals.iter().any(|q| q.name == d.name) {
                r.errors.push(Diagnostic::file(file, format!("principal `{}` is declared twice", d.name)));
            }
            out.auth.principals.push(d);
        }
    }
    top.finish(&mut r, TOP);
    if r.errors.is_empty() { Ok(out) } else { Err(r.errors) }
}

fn path_in(base: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() { p.to_path_buf() } else { base.join(p) }
}

fn roles(r: &mut Reader<'_>, f: &mut Fields<'_, '_>, key: &str) -> Option<Roles> {
    let list = f.str_list(r, key)?;
    let mut out = Vec::new();
    for (name, span) in list {
        match Role::parse(&name) {
            Some(role) => out.push(role),
            None => {
                let mut d =
                    r.diagnostic(span, format!("`{name}` is not a role: the roles are {}", one_of(&Role::NAMES)));
                if let Some(m) = did_you_mean(&name, &Role::NAMES) {
                    d = d.with_help(format!("did you mean `{m}`?"));
                }
                r.errors.push(d);
            }
        }
    }
    Some(out.into_iter().collect())
}

fn read_auth(r: &mut Reader<'_>, a: &mut Fields<'_, '_>, base: &Path, out: &mut AuthSettings) {
    out.people = roles(r, a, "people").unwrap_or_else(|| [Role::Approver, Role::User].into_iter().collect());
    if let Some(mut j) = a.table(r, "jwt") {
        j.what = "`[auth.jwt]`".into();
        let hs256_key_file = j.str(r, "hs256_key_file").map(|(p, _)| path_in(base, &p));
        let jwks_file = j.str(r, "jwks_file").map(|(p, _)| path_in(base, &p));
        if hs256_key_file.is_none() && jwks_file.is_none() {
            r.error_help(
                j.span.clone(),
                "`[auth.jwt]` names no key".to_owned(),
                "add `hs256_key_file` (Slurm's `jwt_hs256.key`) or `jwks_file` (your OIDC provider's keys)",
            );
        }
        let audience = j.str(r, "audience").map(|(s, _)| s);
        let user_claim = j.str(r, "user_claim").map(|(s, _)| s).unwrap_or_else(|| "sun".to_owned());
        let leeway_secs = j.duration(r, "leeway").map_or(60, |d| u64::try_from(d.millis() / 1000).unwrap_or(60));
        j.finish(r, &["hs256_key_file", "jwks_file", "audience", "user_claim", "leeway"]);
        out.jwt = Some(JwtSettings { hs256_key_file, jwks_file, audience, user_claim, leeway_secs });
    }
    if let Some(mut m) = a.table(r, "munge") {
        m.what = "`[auth.munge]`".into();
        let mut s = MungeSettings::default();
        if let Some((p, _)) = m.str(r, "socket") {
            s.socket = Some(path_in(base, &p));
        }
        if let Some((p, _)) = m.str(r, "unmunge") {
            s.unmunge = PathBuf::from(p);
        }
        if let Some((p, _)) = m.str(r, "munge") {
            s.munge = PathBuf::from(p);
        }
        m.finish(r, &["socket", "unmunge", "munge"]);
        out.munge = Some(s);
    }
    if let Some(mut p) = a.table(r, "proxy") {
        p.what = "`[auth.proxy]`".into();
        let mut addresses = Vec::new();
        for (a, span) in p.str_list(r, "addresses").unwrap_or_default() {
            match a.parse::<IpAddr>() {
                Ok(ip) => addresses.push(ip),
                Err(_) => r.error(span, format!("`{a}` is not an IP address")),
            }
        }
        if addresses.is_empty() {
            r.error_help(
                p.span.clone(),
                "`[auth.proxy]` names no proxy address".to_owned(),
                "the user header is believed only from these addresses, e.g. `addresses = [\"127.0.0.1\"]`",
            );
        }
        let header = p.str(r, "header").map(|(h, _)| h).unwrap_or_else(|| "X-Forwarded-User".to_owned());
        p.finish(r, &["addresses", "header"]);
        out.proxy = Some(ProxySettings { addresses, header });
    }
}

fn principal(r: &mut Reader<'_>, mut f: Fields<'_, '_>) -> Option<PrincipalDecl> {
    let (name, span) = f.req_str(r, "name", "every principal needs a `name`, e.g. `name = \"slurmctld\"`")?;
    if let Err(e) = bursar_model::names::check_name("name", &name) {
        r.error(span.clone(), e.message);
    }
    if name.contains(NAMESPACE_SEPARATOR) {
        r.error_help(
            span,
            format!("principal name `{name}` holds `:`"),
            "bursar keeps a principal's event ids as `<name>:<id>`; use letters, digits, `-`, `_`, `.`",
        );
    }
    f.what = format!("principal `{name}`");
    let roles = roles(r, &mut f, "roles");
    if roles.is_none() {
        r.error_help(
            f.span.clone(),
            format!("{} is missing `roles`", f.what),
            format!("give it one or more of {}", one_of(&Role::NAMES)),
        );
    }
    let jobs = f.str_list(r, "jobs").unwrap_or_default().into_iter().map(|(j, _)| j).collect();
    let cert_subjects = f.str_list(r, "cert_subjects").unwrap_or_default().into_iter().map(|(s, _)| s).collect();
    let mut tokens = Vec::new();
    if let Some(v) = f.get("tokens") {
        let items: Vec<&toml::Spanned<DeValue<'_>>> = match v.get_ref() {
            DeValue::Array(a) => a.iter().collect(),
            _ => vec![v],
        };
        for item in items {
            if let Some(t) = token(r, item) {
                tokens.push(t);
            }
        }
    }
    f.finish(r, &["name", "roles", "jobs", "tokens", "cert_subjects"]);
    Some(PrincipalDecl { name, roles: roles.unwrap_or_default(), jobs, tokens, cert_subjects })
}

/// The separator of the ids bursar keeps per principal (`bursar_session::NAMESPACE_SEPARATOR`,
/// which this crate does not depend on).
const NAMESPACE_SEPARATOR: char = ':';

fn token(r: &mut Reader<'_>, v: &toml::Spanned<DeValue<'_>>) -> Option<TokenDecl> {
    let hash = |r: &mut Reader<'_>, text: &str, span| match TokenHash::parse(text) {
        Ok(h) => Some(h),
        Err(e) => {
            let mut d =
                r.diagnostic(span, e).with_help("`bursar auth token` makes a token and prints the hash to put here");
            // The line may hold a secret: point at it without printing it.
            d.source_line = None;
            r.errors.push(d);
            None
        }
    };
    match v.get_ref() {
        DeValue::String(s) => hash(r, s, v.span()).map(|h| TokenDecl { hash: h, expires: None }),
        DeValue::Table(t) => {
            let mut f = Fields::new(t, v.span(), "a token");
            let h = f.req_str(r, "sha256", "`{ sha256 = \"sha256:…\", expires = \"2027-01-01T00:00:00Z\" }`");
            let expires = match f.str(r, "expires") {
                Some((e, span)) => match Timestamp::parse(&e) {
                    Ok(t) => Some(t),
                    Err(err) => {
                        r.error(span, format!("`expires`: {err}"));
                        None
                    }
                },
                None => None,
            };
            f.finish(r, &["sha256", "expires"]);
            let (text, span) = h?;
            hash(r, &text, span).map(|h| TokenDecl { hash: h, expires })
        }
        _ => {
            r.error(v.span(), "a token must be `\"sha256:…\"` or `{ sha256 = \"sha256:…\", expires = \"…\" }`");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(text: &str) -> Vec<String> {
        match parse("bursar.toml", text, Path::new("/etc/bursar")) {
            Ok(_) => Vec::new(),
            Err(ds) => ds.iter().map(|d| d.to_string()).collect(),
        }
    }

    const HASH: &str = "sha256:8f434346648f6b96df89dda901c5176b10a6d83961dd3c1ac88b59b2dc327aa4";

    #[test]
    fn a_whole_configuration_reads() {
        let text = format!(
            "[clock]\nmax_skew = \"2m\"\n[auth]\npeople = [\"user\"]\n[auth.munge]\nsocket = \"munge.sock\"\n[auth.jwt]\nhs256_key_file = \"jwt.key\"\naudience = \"bursar\"\n[auth.proxy]\naddresses = [\"127.0.0.1\"]\n\n[[principal]]\nname = \"slurmctld\"\nroles = [\"scheduler\"]\njobs = [\"lab-*\"]\ntokens = [\"{HASH}\", {{ sha256 = \"{HASH}\", expires = \"2027-01-01T00:00:00Z\" }}]\n"
        );
        let c = parse("bursar.toml", &text, Path::new("/etc/bursar")).unwrap();
        assert_eq!(c.clock.max_skew, Duration::minutes(2));
        assert_eq!(c.auth.munge.unwrap().socket, Some(PathBuf::from("/etc/bursar/munge.sock")));
        let jwt = c.auth.jwt.unwrap();
        assert_eq!((jwt.user_claim.as_str(), jwt.audience.as_deref()), ("sun", Some("bursar")));
        let p = &c.auth.principals[0];
        assert_eq!((p.name.as_str(), p.jobs.len(), p.tokens.len()), ("slurmctld", 1, 2));
        assert!(p.roles.has(Role::Scheduler) && p.tokens[1].expires.is_some());
        assert!(c.auth.people.has(Role::User) && !c.auth.people.has(Role::Approver));
    }

    #[test]
    fn mistakes_are_reported_where_they_are_with_a_did_you_mean() {
        let e = errors("[[principal]]\nname = \"x\"\nroles = [\"schedular\"]\n");
        assert!(e[0].starts_with("bursar.toml:3:10:") && e[0].contains("did you mean `scheduler`"), "{e:?}");
        let e = errors("[[principal]]\nname = \"x\"\nroles = [\"reader\"]\ntokns = []\n");
        assert!(e[0].contains("unknown field `tokns`") && e[0].contains("did you mean `tokens`"), "{e:?}");
        let e = errors("[[principal]]\nname = \"x\"\nroles = [\"reader\"]\ntokens = [\"bursar_plaintextsecret\"]\n");
        assert!(e[0].contains("never the token itself") && !e[0].contains("plaintextsecret"), "{e:?}");
        let e = errors("[clok]\n");
        assert!(e[0].contains("did you mean `clock`"), "{e:?}");
        let e = errors("[[principal]]\nname = \"a:b\"\nroles = []\n");
        assert!(e[0].contains("holds `:`"), "{e:?}");
        let e = errors("[auth.proxy]\nheader = \"X-User\"\n");
        assert!(e[0].contains("names no proxy address"), "{e:?}");
    }
}
