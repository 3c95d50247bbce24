//! The site's configuration file, `bursar.toml` (`/etc/bursar/bursar.toml` by convention, `bursar
//! serve --config FILE` anywhere): what `bursar serve`'s flags say (`[serve]`, `[tls]`, `[witness]`,
//! `[cluster]`), who may call the server and what each may do (`[auth]`, `[[principal]]`,
//! `[[person]]`) and how much each may write (`[budget]`), how far an
//! event may run ahead of the clock (`[clock]`), what the pool has where no scheduler's agent
//! reports it (`[[capacity]]`), and the utilisation source and the notifier
//! (`[utilisation]`, `[notify]`, read by their own crates from this file's text: [`section`]). A
//! flag given on the command line overrides the file.
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

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use bursar_auth::{
    AuthSettings, Budget, JwtSettings, MungeSettings, PersonDecl, PrincipalDecl, ProxySettings, Role, Roles, TokenDecl,
    TokenHash,
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

/// `[serve]`: what serve's flags say, each absent unless the file sets it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServeSection {
    /// `policies`: the policy directory.
    pub policies: Option<PathBuf>,
    /// `audit`: the audit database.
    pub audit: Option<PathBuf>,
    /// `listen`: the main listener's address.
    pub listen: Option<SocketAddr>,
    /// `admit_listen`: the scheduler's own listener.
    pub admit_listen: Option<SocketAddr>,
    /// `port_file`.
    pub port_file: Option<PathBuf>,
    /// `log_format`: `human` or `json`.
    pub log_format: Option<String>,
    /// `log_level`: `error` … `trace`.
    pub log_level: Option<String>,
    /// `tick`.
    pub tick: Option<Duration>,
    /// `snapshot_every`.
    pub snapshot_every: Option<Duration>,
    /// `debounce`.
    pub debounce: Option<Duration>,
    /// `watch`: watch the policy directory (`--no-watch` is `watch = false`).
    pub watch: Option<bool>,
    /// `socket`: the event socket.
    pub socket: Option<PathBuf>,
    /// `socket_mode`: its permission bits, octal text (`"660"`).
    pub socket_mode: Option<u32>,
    /// `prices`: a price file for the report routes.
    pub prices: Option<PathBuf>,
    /// `allow_empty`.
    pub allow_empty: Option<bool>,
    /// `max_body`, bytes.
    pub max_body: Option<usize>,
    /// `max_connections`.
    pub max_connections: Option<usize>,
    /// `max_connections_per_address`: open connections from one address at most.
    pub max_connections_per_address: Option<usize>,
    /// `max_unfinished_per_address`: connections from one address whose request head is not
    /// complete yet, at most.
    pub max_unfinished_per_address: Option<usize>,
    /// `origins`: the origins (`https://bursar.example.org`) a browser may send state-changing
    /// requests from besides the server's own (the public address of a proxy in front of it).
    pub origins: Option<Vec<String>>,
    /// `header_timeout`.
    pub header_timeout: Option<Duration>,
    /// `body_timeout`.
    pub body_timeout: Option<Duration>,
    /// `queue`: the engine queue's length.
    pub queue: Option<usize>,
    /// `fast_commit`.
    pub fast_commit: Option<bool>,
    /// `dedupe_window`.
    pub dedupe_window: Option<Duration>,
    /// `stale_after`: how long an admitted job may wait to start before its reservation is released
    /// (`0s`: never).
    pub stale_after: Option<Duration>,
}

/// `[tls]`: serve terminates TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSection {
    /// `cert`: the PEM certificate chain.
    pub cert: PathBuf,
    /// `key`: its PEM key.
    pub key: PathBuf,
    /// `client_ca`: client certificates issued by these CAs are accepted.
    pub client_ca: Option<PathBuf>,
    /// `require_client_cert`.
    pub require_client_cert: bool,
}

/// `[witness]`: the audit log's head is signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WitnessSection {
    /// `signing_key`.
    pub signing_key: PathBuf,
    /// `file`: the witness.
    pub file: PathBuf,
    /// `adopt_unsigned`.
    pub adopt_unsigned: bool,
}

/// `[cluster]`: serve is one instance of a cluster on NATS JetStream.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterSection {
    /// `urls`: the NATS servers, comma-separated or a list.
    pub urls: String,
    /// `instance`.
    pub instance: Option<String>,
    /// `partitions`.
    pub partitions: Option<u32>,
    /// `replicas`.
    pub replicas: Option<usize>,
    /// `lease_ttl`.
    pub lease_ttl: Option<Duration>,
    /// `admit_timeout`.
    pub admit_timeout: Option<Duration>,
    /// `stream_dedupe_window`.
    pub stream_dedupe_window: Option<Duration>,
}

/// Everything the file says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SiteConfig {
    /// The file it came from.
    pub path: PathBuf,
    /// Its text (the `[utilisation]` and `[notify]` sections are read from it by their crates).
    pub text: String,
    /// `[serve]`.
    pub serve: ServeSection,
    /// `[tls]`.
    pub tls: Option<TlsSection>,
    /// `[witness]`.
    pub witness: Option<WitnessSection>,
    /// `[cluster]`.
    pub cluster: Option<ClusterSection>,
    /// `[auth]` and `[[principal]]`.
    pub auth: AuthSettings,
    /// `[clock]`.
    pub clock: ClockSettings,
    /// Whether the file has `[utilisation]`.
    pub utilisation: bool,
    /// Whether the file has `[notify]`.
    pub notify: bool,
    /// `[[capacity]]`: what the pool has where no scheduler's agent reports it (`pool.inventory`),
    /// one row per region, GPU type and queue.
    pub capacity: Vec<CapacityDecl>,
}

/// A `[[capacity]]` table: a partition of the pool (a region's GPU type in one queue) that no
/// scheduler's agent reports, as the site declares it. serve uses it for the pool page's capacity,
/// the queue's estimates and `GET /v1/estimate` where no `pool.inventory` names the same (region,
/// GPU type, queue); it counts the GPUs of bursar's own running jobs there as allocated.
///
/// ```toml
/// [[capacity]]
/// region = "cn-east"
/// gpu_type = "H100"
/// queue = "gpu"          # optional: the GPU type's capacity in the region whatever the queue
/// gpus = 16              # in service; a partition of MIG slices counts their share: "30/7"
/// drained = 0            # optional
/// backfill = "easy"      # optional: easy, strict, best_effort
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapacityDecl {
    /// `region`.
    pub region: String,
    /// `gpu_type`.
    pub gpu_type: String,
    /// `queue` (empty: any).
    pub queue: String,
    /// `gpus`: in service (a share, `"30/7"`, for a partition of MIG slices).
    pub gpus: bursar_model::Gpus,
    /// `drained`.
    pub drained: bursar_model::Gpus,
    /// `backfill`.
    pub backfill: Option<String>,
}

/// The keys of a `[[capacity]]` table.
pub const CAPACITY_KEYS: &[&str] = &["region", "gpu_type", "queue", "gpus", "drained", "backfill"];

/// The `backfill` rules a `[[capacity]]` may name (`bursar_estimate::Backfill`).
const BACKFILLS: &[&str] = &["easy", "strict", "best_effort"];

fn capacity(r: &mut Reader<'_>, mut f: Fields<'_, '_>) -> Option<CapacityDecl> {
    f.what = "a `[[capacity]]`".into();
    let region = f.req_str(r, "region", "name the region (a pool or cluster), e.g. `region = \"cn-east\"`");
    let gpu_type = f.req_str(r, "gpu_type", "name the GPU model, e.g. `gpu_type = \"H100\"`");
    for (key, v) in [("region", &region), ("gpu_type", &gpu_type)] {
        if let Some((text, span)) = v
            && let Err(e) = bursar_model::names::check_name(key, text)
        {
            r.error(span.clone(), e.message);
        }
    }
    let queue = f.str(r, "queue").map(|(q, _)| q).unwrap_or_default();
    if !f.has("gpus") {
        r.error_help(
            f.span.clone(),
            "a `[[capacity]]` is missing `gpus`",
            "give the GPUs in service, e.g. `gpus = 16`",
        );
    }
    // Whole GPUs or a share exact to a MIG slice, at most the wire format's bound, errors placed.
    let gpus = f.gpus(r, "gpus");
    let drained = f.gpus(r, "drained").unwrap_or_default();
    let backfill = match f.str(r, "backfill") {
        Some((b, span)) if !BACKFILLS.contains(&b.as_str()) => {
            let help = match did_you_mean(&b, BACKFILLS) {
                Some(m) => format!("did you mean `{m}`?"),
                None => format!("use {}", one_of(BACKFILLS)),
            };
            r.error_help(span, format!("unknown backfill `{b}`"), help);
            None
        }
        other => other.map(|(b, _)| b),
    };
    f.finish(r, CAPACITY_KEYS);
    Some(CapacityDecl { region: region?.0, gpu_type: gpu_type?.0, queue, gpus: gpus?, drained, backfill })
}

impl SiteConfig {
    /// What differs between this configuration and `newer` that a reload cannot take: every
    /// section but `[auth]`, `[[principal]]`, `[[person]]` and `[budget]` (which a reload swaps in)
    /// needs a restart.
    pub fn needs_restart(&self, newer: &SiteConfig) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.serve != newer.serve {
            out.push("[serve]");
        }
        if self.tls != newer.tls {
            out.push("[tls]");
        }
        if self.witness != newer.witness {
            out.push("[witness]");
        }
        if self.cluster != newer.cluster {
            out.push("[cluster]");
        }
        if self.clock != newer.clock {
            out.push("[clock]");
        }
        if self.capacity != newer.capacity {
            out.push("[[capacity]]");
        }
        for (key, had, has) in
            [("[utilisation]", self.utilisation, newer.utilisation), ("[notify]", self.notify, newer.notify)]
        {
            if had != has || (has && section_text(&self.text, key) != section_text(&newer.text, key)) {
                out.push(key);
            }
        }
        out
    }
}

/// The text of a top-level table (`[notify]` and its sub-tables), for comparing two files.
fn section_text(text: &str, header: &str) -> String {
    let name = header.trim_matches(|c| c == '[' || c == ']');
    let mut out = String::new();
    let mut inside = false;
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with('[') {
            let h = t.trim_start_matches('[').split([']', '.']).next().unwrap_or("").trim();
            inside = h == name;
        }
        if inside {
            out.push_str(line.trim());
            out.push('\n');
        }
    }
    out
}

/// Reads the top-level table `key` of a configuration's `text` as a `T` (the `[utilisation]` and
/// `[notify]` sections, whose types their own crates define with serde), or `None` when the file has
/// no such table. A mistake inside it is reported at its place in the whole file, with a
/// did-you-mean for an unknown field.
pub fn section<T: serde::de::DeserializeOwned>(file: &str, text: &str, key: &str) -> Result<Option<T>, Diagnostic> {
    struct Pick<'k, T>(&'k str, std::marker::PhantomData<T>);
    impl<'de, T: serde::de::DeserializeOwned> serde::de::Visitor<'de> for Pick<'_, T> {
        type Value = Option<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a configuration file")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Option<T>, A::Error> {
            let mut found = None;
            while let Some(k) = map.next_key::<String>()? {
                if k == self.0 {
                    found = Some(map.next_value::<T>()?);
                } else {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
            Ok(found)
        }
    }
    impl<'de, T: serde::de::DeserializeOwned> serde::de::DeserializeSeed<'de> for Pick<'_, T> {
        type Value = Option<T>;
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Option<T>, D::Error> {
            d.deserialize_map(self)
        }
    }
    let at = |e: toml::de::Error| {
        let message = e.message().trim().to_owned();
        let mut d = match e.span() {
            Some(span) => Diagnostic::at(file, text, span, format!("[{key}]: {message}")),
            None => Diagnostic::file(file, format!("[{key}]: {message}")),
        };
        if let Some(rest) = message.strip_prefix("unknown field `")
            && let Some((name, expected)) = rest.split_once("`, expected one of ")
        {
            let options: Vec<&str> = expected.split(", ").map(|o| o.trim_matches('`')).collect();
            if let Some(m) = did_you_mean(name, &options) {
                d = d.with_help(format!("did you mean `{m}`?"));
            }
        }
        d
    };
    let de = toml::de::Deserializer::parse(text).map_err(at)?;
    serde::de::DeserializeSeed::deserialize(Pick::<T>(key, std::marker::PhantomData), de).map_err(at)
}

/// The top-level tables.
const TOP: &[&str] = &[
    "serve",
    "tls",
    "witness",
    "cluster",
    "clock",
    "auth",
    "budget",
    "principal",
    "person",
    "utilisation",
    "notify",
    "capacity",
];

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
    let mut out = SiteConfig { text: text.to_owned(), ..SiteConfig::default() };
    if let Some(mut f) = top.table(&mut r, "serve") {
        f.what = "`[serve]`".into();
        out.serve = serve_section(&mut r, f, base);
    }
    if let Some(mut f) = top.table(&mut r, "tls") {
        f.what = "`[tls]`".into();
        let cert = f.req_str(
            &mut r,
            "cert",
            "the PEM certificate chain serve presents, e.g. `cert = \"/etc/bursar/tls/server.crt\"`",
        );
        let key = f.req_str(&mut r, "key", "its PEM private key, e.g. `key = \"/etc/bursar/tls/server.key\"`");
        let client_ca = f.str(&mut r, "client_ca").map(|(p, _)| path_in(base, &p));
        let require_client_cert = f.bool(&mut r, "require_client_cert").unwrap_or(false);
        if require_client_cert && client_ca.is_none() {
            r.error(
                f.span.clone(),
                "`require_client_cert = true` needs `client_ca`: the CA client certificates are checked against",
            );
        }
        f.finish(&mut r, &["cert", "key", "client_ca", "require_client_cert"]);
        if let (Some((c, _)), Some((k, _))) = (cert, key) {
            out.tls =
                Some(TlsSection { cert: path_in(base, &c), key: path_in(base, &k), client_ca, require_client_cert });
        }
    }
    if let Some(mut f) = top.table(&mut r, "witness") {
        f.what = "`[witness]`".into();
        let key = f.req_str(&mut r, "signing_key", "the Ed25519 key from `bursar audit keygen`");
        let file = f.req_str(&mut r, "file", "the append-only witness file, where the database's editors cannot write");
        let adopt_unsigned = f.bool(&mut r, "adopt_unsigned").unwrap_or(false);
        f.finish(&mut r, &["signing_key", "file", "adopt_unsigned"]);
        if let (Some((k, _)), Some((w, _))) = (key, file) {
            out.witness =
                Some(WitnessSection { signing_key: path_in(base, &k), file: path_in(base, &w), adopt_unsigned });
        }
    }
    if let Some(mut f) = top.table(&mut r, "cluster") {
        f.what = "`[cluster]`".into();
        let urls = f.str_list(&mut r, "urls").map(|v| v.into_iter().map(|(u, _)| u).collect::<Vec<_>>().join(","));
        if urls.is_none() && !f.has("urls") {
            r.error_help(
                f.span.clone(),
                "`[cluster]` is missing `urls`".to_owned(),
                "the NATS servers, e.g. `urls = [\"nats://n1:4222\", \"nats://n2:4222\"]`",
            );
        }
        let c = ClusterSection {
            urls: urls.unwrap_or_default(),
            instance: f.str(&mut r, "instance").map(|(s, _)| s),
            partitions: f.count(&mut r, "partitions"),
            replicas: f.count(&mut r, "replicas").map(|n| n as usize),
            lease_ttl: f.duration(&mut r, "lease_ttl"),
            admit_timeout: f.duration(&mut r, "admit_timeout"),
            stream_dedupe_window: f.duration(&mut r, "stream_dedupe_window"),
        };
        f.finish(
            &mut r,
            &["urls", "instance", "partitions", "replicas", "lease_ttl", "admit_timeout", "stream_dedupe_window"],
        );
        out.cluster = Some(c);
    }
    // Read by their own crates (`section`); here only noted, so they are not unknown.
    out.utilisation = top.get("utilisation").is_some();
    out.notify = top.get("notify").is_some();
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
    if let Some(mut b) = top.table(&mut r, "budget") {
        b.what = "`[budget]`".into();
        let d = out.auth.budget;
        let mut get = |r: &mut Reader<'_>, key: &str, default: u64| b.count(r, key).map_or(default, u64::from);
        out.auth.budget.principal.events_per_minute =
            get(&mut r, "principal_events_per_minute", d.principal.events_per_minute);
        out.auth.budget.principal.bytes_per_minute =
            get(&mut r, "principal_bytes_per_minute", d.principal.bytes_per_minute);
        out.auth.budget.person.events_per_minute = get(&mut r, "person_events_per_minute", d.person.events_per_minute);
        out.auth.budget.person.bytes_per_minute = get(&mut r, "person_bytes_per_minute", d.person.bytes_per_minute);
        b.finish(
            &mut r,
            &[
                "principal_events_per_minute",
                "principal_bytes_per_minute",
                "person_events_per_minute",
                "person_bytes_per_minute",
            ],
        );
    }
    for p in top.tables(&mut r, "principal") {
        if let Some(d) = principal(&mut r, p, out.auth.budget) {
            if out.auth.principals.iter().any(|q| q.name == d.name) {
                r.errors.push(Diagnostic::file(file, format!("principal `{}` is declared twice", d.name)));
            }
            out.auth.principals.push(d);
        }
    }
    for p in top.tables(&mut r, "person") {
        if let Some(d) = person(&mut r, p, out.auth.budget) {
            if out.auth.persons.iter().any(|q| q.name == d.name) {
                r.errors.push(Diagnostic::file(file, format!("person `{}` is declared twice", d.name)));
            }
            out.auth.persons.push(d);
        }
    }
    for c in top.tables(&mut r, "capacity") {
        if let Some(d) = capacity(&mut r, c) {
            if out.capacity.iter().any(|e| (&e.region, &e.gpu_type, &e.queue) == (&d.region, &d.gpu_type, &d.queue)) {
                r.errors.push(Diagnostic::file(
                    file,
                    format!(
                        "`[[capacity]]` of region `{}`, GPU type `{}`, queue `{}` is declared twice",
                        d.region, d.gpu_type, d.queue
                    ),
                ));
            }
            out.capacity.push(d);
        }
    }
    top.finish(&mut r, TOP);
    if r.errors.is_empty() { Ok(out) } else { Err(r.errors) }
}

fn serve_section(r: &mut Reader<'_>, mut fields: Fields<'_, '_>, base: &Path) -> ServeSection {
    let f = &mut fields;
    let path = |r: &mut Reader<'_>, f: &mut Fields<'_, '_>, key: &str| f.str(r, key).map(|(p, _)| path_in(base, &p));
    let addr = |r: &mut Reader<'_>, f: &mut Fields<'_, '_>, key: &str| {
        let (a, span) = f.str(r, key)?;
        match a.parse::<SocketAddr>() {
            Ok(a) => Some(a),
            Err(_) => {
                r.error_help(
                    span,
                    format!("`{key}` `{a}` is not an address"),
                    "write it as `HOST:PORT` with an IP, e.g. `\"127.0.0.1:7878\"`",
                );
                None
            }
        }
    };
    let size = |r: &mut Reader<'_>, f: &mut Fields<'_, '_>, key: &str| f.count(r, key).map(|n| n as usize);
    let socket_mode =
        f.str(r, "socket_mode").and_then(|(m, span)| match u32::from_str_radix(m.trim_start_matches("0o"), 8) {
            Ok(v) if v <= 0o777 => Some(v),
            _ => {
                r.error_help(
                    span,
                    format!("`socket_mode` `{m}` is not a permission mode"),
                    "write it in octal as text, e.g. `\"660\"`",
                );
                None
            }
        });
    let s = ServeSection {
        policies: path(r, f, "policies"),
        audit: path(r, f, "audit"),
        listen: addr(r, f, "listen"),
        admit_listen: addr(r, f, "admit_listen"),
        port_file: path(r, f, "port_file"),
        log_format: f.keyword(r, "log_format", &["human", "json"]).map(str::to_owned),
        log_level: f.keyword(r, "log_level", &["error", "warn", "info", "debug", "trace"]).map(str::to_owned),
        tick: f.duration(r, "tick"),
        snapshot_every: f.duration(r, "snapshot_every"),
        debounce: f.duration(r, "debounce"),
        watch: f.bool(r, "watch"),
        socket: path(r, f, "socket"),
        socket_mode,
        prices: path(r, f, "prices"),
        allow_empty: f.bool(r, "allow_empty"),
        max_body: size(r, f, "max_body"),
        max_connections: size(r, f, "max_connections"),
        max_connections_per_address: size(r, f, "max_connections_per_address"),
        max_unfinished_per_address: size(r, f, "max_unfinished_per_address"),
        origins: f.str_list(r, "origins").map(|list| {
            list.into_iter()
                .filter_map(|(o, span)| match origin(&o) {
                    Some(o) => Some(o),
                    None => {
                        r.error_help(
                            span,
                            format!("`{o}` is not an origin"),
                            "write a scheme, a host and, if not the scheme's, a port: `https://bursar.example.org`",
                        );
                        None
                    }
                })
                .collect()
        }),
        header_timeout: f.duration(r, "header_timeout"),
        body_timeout: f.duration(r, "body_timeout"),
        queue: size(r, f, "queue"),
        fast_commit: f.bool(r, "fast_commit"),
        dedupe_window: f.duration(r, "dedupe_window"),
        stale_after: f.duration(r, "stale_after"),
    };
    fields.finish(r, SERVE_KEYS);
    s
}

/// The keys of `[serve]`.
pub const SERVE_KEYS: &[&str] = &[
    "policies",
    "audit",
    "listen",
    "admit_listen",
    "port_file",
    "log_format",
    "log_level",
    "tick",
    "snapshot_every",
    "debounce",
    "watch",
    "socket",
    "socket_mode",
    "prices",
    "allow_empty",
    "max_body",
    "max_connections",
    "max_connections_per_address",
    "max_unfinished_per_address",
    "origins",
    "header_timeout",
    "body_timeout",
    "queue",
    "fast_commit",
    "dedupe_window",
    "stale_after",
];

/// An origin as a browser sends it (`scheme://host[:port]`, lowercased, no path), if `text` is one.
fn origin(text: &str) -> Option<String> {
    let t = text.trim().trim_end_matches('/').to_ascii_lowercase();
    let (scheme, rest) = t.split_once("://")?;
    let ok = matches!(scheme, "http" | "https")
        && !rest.is_empty()
        && !rest.contains(['/', '?', '#', '@'])
        && rest.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
    ok.then_some(t)
}

/// A budget's keys in `f` (`events_per_minute`, `bytes_per_minute`), each defaulting to `default`'s.
fn budget(r: &mut Reader<'_>, f: &mut Fields<'_, '_>, default: Budget) -> Option<Budget> {
    let events = f.count(r, "events_per_minute");
    let bytes = f.count(r, "bytes_per_minute");
    (events.is_some() || bytes.is_some()).then(|| Budget {
        events_per_minute: events.map_or(default.events_per_minute, u64::from),
        bytes_per_minute: bytes.map_or(default.bytes_per_minute, u64::from),
    })
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
        let max_lifetime_secs = j
            .duration(r, "max_lifetime")
            .map_or(bursar_auth::jwt::DEFAULT_MAX_LIFETIME_SECS, |d| u64::try_from(d.millis() / 1000).unwrap_or(0));
        j.finish(r, &["hs256_key_file", "jwks_file", "audience", "user_claim", "leeway", "max_lifetime"]);
        out.jwt = Some(JwtSettings { hs256_key_file, jwks_file, audience, user_claim, leeway_secs, max_lifetime_secs });
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

fn principal(r: &mut Reader<'_>, mut f: Fields<'_, '_>, budgets: bursar_auth::BudgetSettings) -> Option<PrincipalDecl> {
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
    let unix_users = f.str_list(r, "unix_users").unwrap_or_default().into_iter().map(|(s, _)| s).collect();
    let budget = budget(r, &mut f, budgets.principal);
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
    f.finish(
        r,
        &["name", "roles", "jobs", "tokens", "cert_subjects", "unix_users", "events_per_minute", "bytes_per_minute"],
    );
    Some(PrincipalDecl { name, roles: roles.unwrap_or_default(), jobs, tokens, cert_subjects, unix_users, budget })
}

/// A `[[person]]` table: a person with roles (and a budget) of their own.
fn person(r: &mut Reader<'_>, mut f: Fields<'_, '_>, budgets: bursar_auth::BudgetSettings) -> Option<PersonDecl> {
    let (name, span) = f.req_str(r, "name", "every person needs a `name`, as their credentials name them")?;
    if let Err(e) = bursar_model::names::check_name("name", &name) {
        r.error(span, e.message);
    }
    f.what = format!("person `{name}`");
    let roles = roles(r, &mut f, "roles");
    if roles.is_none() {
        r.error_help(
            f.span.clone(),
            format!("{} is missing `roles`", f.what),
            format!("give them one or more of {}", one_of(&Role::NAMES)),
        );
    }
    let budget = budget(r, &mut f, budgets.person);
    f.finish(r, &["name", "roles", "events_per_minute", "bytes_per_minute"]);
    Some(PersonDecl { name, roles: roles.unwrap_or_default(), budget })
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
    fn budgets_people_and_listener_limits_read() {
        let text = format!(
            "[serve]\nmax_connections_per_address = 32\nmax_unfinished_per_address = 4\norigins = [\"https://Bursar.example.org/\"]\n[auth.jwt]\nhs256_key_file = \"k\"\nmax_lifetime = \"1h\"\n[budget]\nperson_events_per_minute = 10\n\n[[principal]]\nname = \"sched\"\nroles = [\"scheduler\"]\ntokens = [\"{HASH}\"]\nevents_per_minute = 5\nunix_users = [\"slurm\"]\n\n[[person]]\nname = \"carol\"\nroles = [\"admin\"]\nbytes_per_minute = 1000\n"
        );
        let c = parse("bursar.toml", &text, Path::new("/etc/bursar")).unwrap();
        assert_eq!((c.serve.max_connections_per_address, c.serve.max_unfinished_per_address), (Some(32), Some(4)));
        assert_eq!(c.serve.origins, Some(vec!["https://bursar.example.org".to_owned()]));
        assert_eq!(c.auth.jwt.unwrap().max_lifetime_secs, 3600);
        assert_eq!(c.auth.budget.person.events_per_minute, 10);
        assert_eq!(c.auth.budget.principal, Budget::PRINCIPAL);
        let p = &c.auth.principals[0];
        assert_eq!(
            p.budget.map(|b| (b.events_per_minute, b.bytes_per_minute)),
            Some((5, Budget::PRINCIPAL.bytes_per_minute))
        );
        assert_eq!(p.unix_users, ["slurm"]);
        let carol = &c.auth.persons[0];
        assert!(carol.roles.has(Role::Admin));
        assert_eq!(carol.budget.map(|b| (b.events_per_minute, b.bytes_per_minute)), Some((10, 1000)));
        let e = errors("[serve]\norigins = [\"evil.example/x\"]\n");
        assert!(e[0].contains("is not an origin"), "{e:?}");
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

    #[test]
    fn capacity_where_no_agent_reports_reads_and_its_mistakes_are_placed() {
        let c = parse(
            "bursar.toml",
            "[[capacity]]\nregion = \"cn-east\"\ngpu_type = \"H100\"\nqueue = \"gpu\"\ngpus = 16\ndrained = 2\nbackfill = \"strict\"\n\n[[capacity]]\nregion = \"cn-east\"\ngpu_type = \"A100\"\ngpus = 8\n",
            Path::new("."),
        )
        .unwrap();
        assert_eq!(c.capacity.len(), 2);
        assert_eq!(
            c.capacity[0],
            CapacityDecl {
                region: "cn-east".into(),
                gpu_type: "H100".into(),
                queue: "gpu".into(),
                gpus: bursar_model::Gpus::whole(16),
                drained: bursar_model::Gpus::whole(2),
                backfill: Some("strict".into())
            }
        );
        assert_eq!((c.capacity[1].queue.as_str(), c.capacity[1].backfill.as_deref()), ("", None));
        let e = errors("[[capacity]]\nregion = \"r\"\ngpu_type = \"H100\"\ngpus = 8\nbackfill = \"easi\"\n");
        assert!(e[0].starts_with("bursar.toml:5:12:") && e[0].contains("did you mean `easy`"), "{e:?}");
        let e = errors("[[capacity]]\nregion = \"r\"\ngpu_type = \"H100\"\ngpus = -1\n");
        assert!(e[0].starts_with("bursar.toml:4:8:") && e[0].contains("whole number of GPUs"), "{e:?}");
        let e = errors("[[capacity]]\nregion = \"r\"\ngpu_type = \"H100\"\n");
        assert!(e[0].contains("missing `gpus`"), "{e:?}");
        let c = parse(
            "bursar.toml",
            "[[capacity]]\nregion = \"r\"\ngpu_type = \"1G.10GB\"\ngpus = \"14/7\"\ndrained = \"3/7\"\n",
            Path::new("/etc/bursar"),
        )
        .expect("a partition of MIG slices reads");
        assert_eq!((c.capacity[0].gpus.reduced(), c.capacity[0].drained.reduced()), ((2, 1), (3, 7)));
        let e = errors("[[capacity]]\nregion = \"r\"\ngpu_type = \"H100\"\ngpus = \"1/11\"\n");
        assert!(e[0].starts_with("bursar.toml:4:8:") && e[0].contains("840ths"), "{e:?}");
        let e = errors("[[capacity]]\nregion = \"r\"\ngpu_type = \"H100\"\ngpus = 8\nqueu = \"gpu\"\n");
        assert!(e[0].contains("unknown field `queu`") && e[0].contains("did you mean `queue`"), "{e:?}");
        let e = errors(
            "[[capacity]]\nregion = \"r\"\ngpu_type = \"H100\"\ngpus = 8\n[[capacity]]\nregion = \"r\"\ngpu_type = \"H100\"\ngpus = 4\n",
        );
        assert!(e[0].contains("declared twice"), "{e:?}");
    }
}
