//! An in-test Kubernetes API server (feature `kubeapi`): no kube-apiserver can be installed on these
//! machines, so bursar's Kubernetes agents are tested with their real client (kube-rs) against this
//! server, which implements the parts of the API they use with the API's own semantics, written
//! from the Kubernetes 1.33 API reference and "API Concepts" page:
//!
//! - **resources**: `v1` Pods, `batch/v1` Jobs, and Kueue's `kueue.x-k8s.io/v1beta1` Workloads,
//!   AdmissionChecks and ResourceFlavors (custom resources with the status subresource), namespaced
//!   or cluster-scoped as the real ones, at the real paths (`/api/v1/namespaces/{ns}/pods`,
//!   `/apis/kueue.x-k8s.io/v1beta1/workloads`, …);
//! - **resourceVersion**: one counter for the whole store; every write that changes an object gives
//!   it the next version; a write that changes nothing keeps it (and sends no event);
//! - **list**: items sorted by namespace and name, `labelSelector` (`k`, `!k`, `k=v`, `k!=v`),
//!   `limit` + `continue` (a token older than the compaction point is `410 Expired`);
//! - **watch**: `watch=true&resourceVersion=RV` streams (chunked JSON lines) every change after RV,
//!   then live ones; `allowWatchBookmarks=true` gets a `BOOKMARK` of the current version every
//!   bookmark interval (each one sent is kept, [`KubeApi::bookmarks`]);
//!   `timeoutSeconds` ends it; a version older than the compaction point gets an `ERROR` event with a
//!   `410` Status ("too old resource version"), as kube-apiserver sends; [`KubeApi::disconnect_watches`]
//!   breaks every open watch mid-stream (the connection is shut, no last chunk);
//! - **writes**: `POST` (201, `409 AlreadyExists`), `PUT` (a stale `metadata.resourceVersion` is `409
//!   Conflict`), `DELETE`, and `PATCH` by content type: `application/merge-patch+json` (RFC 7386),
//!   `application/apply-patch+yaml` (server-side apply: needs `fieldManager`, merges `listType=map`
//!   lists by key — `admissionChecks` by `name`, `conditions` by `type`), `application/strategic-
//!   merge-patch+json` (refused with `415` for custom resources, as the API server does); anything
//!   else is `415`. A patch carrying `metadata.resourceVersion` that is not the current one is `409
//!   Conflict`. The `status` subresource changes only `status`; the main resource never does, and
//!   `create` drops it.
//! - **auth**: a bearer token on every request (`401` otherwise), one per user the test adds
//!   ([`KubeApi::add_user`]), each with its RBAC rules: a verb on a resource its rules do not grant
//!   is `403 Forbidden` (no rules: every verb).
//!
//! The test plays the other controllers (Kueue, the Job controller, the scheduler, the kubelet)
//! through the direct methods ([`KubeApi::create`], [`KubeApi::update`], [`KubeApi::delete`]), which go
//! through the same store and make the same events. [`KubeApi::conflict_next_write`] makes the next
//! write to an object race with a change of its own (a real concurrent modification, so the write's
//! precondition fails with a real `409`).

use std::collections::{BTreeMap, VecDeque};
use std::io::{self, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::tls::{Leaf, TestCa};

/// A kind of resource the server keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resource {
    /// API group (`""` for the core group).
    pub group: &'static str,
    /// Version.
    pub version: &'static str,
    /// Plural (the path segment).
    pub plural: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Namespaced (else cluster-scoped).
    pub namespaced: bool,
    /// A custom resource (strategic merge patch refused).
    pub custom: bool,
}

/// `v1` Pods.
pub const PODS: Resource =
    Resource { group: "", version: "v1", plural: "pods", kind: "Pod", namespaced: true, custom: false };
/// `batch/v1` Jobs.
pub const JOBS: Resource =
    Resource { group: "batch", version: "v1", plural: "jobs", kind: "Job", namespaced: true, custom: false };
/// Kueue Workloads.
pub const WORKLOADS: Resource = Resource {
    group: "kueue.x-k8s.io",
    version: "v1beta1",
    plural: "workloads",
    kind: "Workload",
    namespaced: true,
    custom: true,
};
/// Kueue AdmissionChecks.
pub const ADMISSION_CHECKS: Resource = Resource {
    group: "kueue.x-k8s.io",
    version: "v1beta1",
    plural: "admissionchecks",
    kind: "AdmissionCheck",
    namespaced: false,
    custom: true,
};
/// Kueue ResourceFlavors.
pub const RESOURCE_FLAVORS: Resource = Resource {
    group: "kueue.x-k8s.io",
    version: "v1beta1",
    plural: "resourceflavors",
    kind: "ResourceFlavor",
    namespaced: false,
    custom: true,
};

/// Kueue ClusterQueues (their `status` is written by the test, playing Kueue).
pub const CLUSTER_QUEUES: Resource = Resource {
    group: "kueue.x-k8s.io",
    version: "v1beta1",
    plural: "clusterqueues",
    kind: "ClusterQueue",
    namespaced: false,
    custom: true,
};
/// `v1` Nodes (cluster-scoped; their `status` is written by the test, playing the kubelet).
pub const NODES: Resource =
    Resource { group: "", version: "v1", plural: "nodes", kind: "Node", namespaced: false, custom: false };

const RESOURCES: [Resource; 7] = [PODS, JOBS, WORKLOADS, ADMISSION_CHECKS, RESOURCE_FLAVORS, CLUSTER_QUEUES, NODES];

impl Resource {
    /// `apiVersion` of its objects.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.to_owned() } else { format!("{}/{}", self.group, self.version) }
    }
}

/// One RBAC rule: verbs on resources of a group (`workloads`, `workloads/status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// API group.
    pub group: String,
    /// Resources (with `/subresource`).
    pub resources: Vec<String>,
    /// Verbs: get, list, watch, create, update, patch, delete.
    pub verbs: Vec<String>,
}

/// One `BOOKMARK` the server sent on a watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bookmark {
    /// The user watching.
    pub user: String,
    /// The resource watched (its plural).
    pub resource: &'static str,
    /// The version it carried.
    pub version: u64,
}

/// One request the server answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// Method.
    pub method: String,
    /// Path and query.
    pub target: String,
    /// The request's content type.
    pub content_type: String,
    /// The status answered.
    pub status: u16,
    /// The RBAC verb.
    pub verb: String,
    /// The user (empty: not authenticated).
    pub user: String,
}

type Key = (&'static str, String, String);

#[derive(Debug)]
struct Change {
    rv: u64,
    res: &'static str,
    ns: String,
    kind: &'static str,
    object: Value,
}

/// One write: to `status` or the main resource, how (`PUT`, or a patch's content type), the body,
/// and the apply patch's field manager.
#[derive(Debug, Clone, Copy)]
struct Op<'a> {
    status: bool,
    how: &'a str,
    body: &'a Value,
    field_manager: Option<&'a str>,
}

#[derive(Debug, Default)]
struct Store {
    rv: u64,
    uid: u64,
    objects: BTreeMap<Key, Value>,
    history: VecDeque<Change>,
    compacted: u64,
    epoch: u64,
    bookmark_every: Option<Duration>,
    /// Token → (user name, rules).
    users: BTreeMap<String, (String, Option<Vec<Rule>>)>,
    conflict_next: Vec<(&'static str, String, String)>,
    seen: Vec<Seen>,
    bookmarks: Vec<Bookmark>,
}

#[derive(Debug)]
struct Shared {
    store: Mutex<Store>,
    changed: Condvar,
    stop: AtomicBool,
}

fn lock(s: &Mutex<Store>) -> MutexGuard<'_, Store> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// A Kubernetes API error, as a `Status` object.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status.
    pub code: u16,
    /// `NotFound`, `AlreadyExists`, `Conflict`, `Expired`, …
    pub reason: &'static str,
    /// The message.
    pub message: String,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { code, reason, message: message.into() }
    }

    fn status(&self) -> Value {
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": self.message, "reason": self.reason, "code": self.code})
    }
}

fn now_text() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    rfc3339(secs)
}

/// Seconds since the epoch as RFC 3339 (UTC).
pub fn rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = json!({});
            }
            if let Value::Object(t) = target {
                for (k, v) in p {
                    if v.is_null() {
                        t.remove(k);
                    } else {
                        merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                    }
                }
            }
        }
        other => *target = other.clone(),
    }
}

/// Server-side apply, as far as the test needs it: maps merge, `listType=map` lists merge by key
/// (`admissionChecks` by `name`, `conditions` by `type`), other values are replaced.
pub fn apply_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = json!({});
            }
            if let Value::Object(t) = target {
                for (k, v) in p {
                    let key = match k.as_str() {
                        "admissionChecks" => Some("name"),
                        "conditions" => Some("type"),
                        _ => None,
                    };
                    match (key, v) {
                        (Some(key), Value::Array(items)) => {
                            let list = t.entry(k.clone()).or_insert_with(|| json!([]));
                            if !list.is_array() {
                                *list = json!([]);
                            }
                            if let Value::Array(existing) = list {
                                for item in items {
                                    match existing.iter_mut().find(|e| e.get(key) == item.get(key)) {
                                        Some(e) => apply_patch(e, item),
                                        None => existing.push(item.clone()),
                                    }
                                }
                            }
                        }
                        _ => apply_patch(t.entry(k.clone()).or_insert(Value::Null), v),
                    }
                }
            }
        }
        other => *target = other.clone(),
    }
}

fn flow_list(text: &str) -> Vec<String> {
    text.trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .split(',')
        .map(|x| x.trim().trim_matches('"').to_owned())
        .filter(|x| !x.is_empty() || text.contains("\"\""))
        .collect()
}

/// The rules of ClusterRole `name` in a manifest (YAML documents separated by `---`), written as
/// the repository's manifests write them: one `- apiGroups: [...]` line, then `resources: [...]`
/// and `verbs: [...]` lines in flow style. So a test runs an agent under exactly the verbs the
/// shipped manifest grants.
pub fn cluster_role_rules(manifest: &str, name: &str) -> Vec<Rule> {
    for doc in manifest.split("\n---") {
        let is_role = doc.lines().any(|l| l.trim() == "kind: ClusterRole");
        let named = doc.lines().any(|l| l.trim() == format!("name: {name}"));
        if !(is_role && named) {
            continue;
        }
        let mut rules: Vec<Rule> = Vec::new();
        for line in doc.lines() {
            let t = line.trim();
            if let Some(g) = t.strip_prefix("- apiGroups:") {
                let group = flow_list(g).into_iter().next().unwrap_or_default();
                rules.push(Rule { group, resources: Vec::new(), verbs: Vec::new() });
            } else if let (Some(r), Some(last)) = (t.strip_prefix("resources:"), rules.last_mut()) {
                last.resources = flow_list(r);
            } else if let (Some(v), Some(last)) = (t.strip_prefix("verbs:"), rules.last_mut()) {
                last.verbs = flow_list(v);
            }
        }
        return rules;
    }
    Vec::new()
}

fn labels_match(obj: &Value, selector: &str) -> bool {
    let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
    let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    selector.split(',').map(str::trim).filter(|t| !t.is_empty()).all(|term| {
        if let Some(k) = term.strip_prefix('!') {
            get(k).is_none()
        } else if let Some((k, v)) = term.split_once("!=") {
            get(k.trim()) != Some(v.trim())
        } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            get(k.trim()) == Some(v.trim())
        } else {
            get(term).is_some()
        }
    })
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata").and_then(|m| m.get(field)).and_then(Value::as_str)
}

impl Store {
    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    fn record(&mut self, res: &Resource, ns: &str, kind: &'static str, object: &Value) {
        let rv = self.rv;
        self.history.push_back(Change { rv, res: res.plural, ns: ns.to_owned(), kind, object: object.clone() });
    }

    fn create(&mut self, res: &Resource, ns: &str, mut obj: Value) -> Result<Value, ApiError> {
        let name = meta_str(&obj, "name").map(str::to_owned).filter(|n| !n.is_empty());
        let name = match (name, meta_str(&obj, "generateName")) {
            (Some(n), _) => n,
            (None, Some(prefix)) => {
                self.uid += 1;
                format!("{prefix}{:05x}", self.uid * 7919 % 0xfffff)
            }
            (None, None) => return Err(ApiError::new(422, "Invalid", "metadata.name: Required value")),
        };
        let key = (res.plural, ns.to_owned(), name.clone());
        if self.objects.contains_key(&key) {
            return Err(ApiError::new(
                409,
                "AlreadyExists",
                format!("{}.{} \"{name}\" already exists", res.plural, res.group),
            ));
        }
        self.uid += 1;
        let rv = self.next_rv();
        let uid = format!("{:08x}-0000-4000-8000-{:012x}", 0xb0_5a_00_00u32 + self.uid as u32, self.uid);
        if let Value::Object(o) = &mut obj {
            o.insert("apiVersion".into(), res.api_version().into());
            o.insert("kind".into(), res.kind.into());
            o.remove("status");
        }
        let m = &mut obj["metadata"];
        m["name"] = name.clone().into();
        if res.namespaced {
            m["namespace"] = ns.into();
        }
        m["uid"] = m.get("uid").filter(|u| u.is_string()).cloned().unwrap_or_else(|| uid.into());
        m["resourceVersion"] = rv.to_string().into();
        m["generation"] = 1.into();
        m["creationTimestamp"] = now_text().into();
        self.objects.insert(key, obj.clone());
        self.record(res, ns, "ADDED", &obj);
        Ok(obj)
    }

    /// Writes `new` (already merged) in place of the object, if it changed.
    fn store(&mut self, res: &Resource, ns: &str, name: &str, old: &Value, mut new: Value) -> Value {
        let strip = |v: &Value| {
            let mut v = v.clone();
            if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("resourceVersion");
            }
            v
        };
        if strip(old) == strip(&new) {
            return old.clone();
        }
        let rv = self.next_rv();
        if old.get("spec") != new.get("spec") {
            let g = old.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(1);
            new["metadata"]["generation"] = (g + 1).into();
        }
        new["metadata"]["resourceVersion"] = rv.to_string().into();
        for f in ["uid", "creationTimestamp", "name", "namespace"] {
            if let Some(v) = old.get("metadata").and_then(|m| m.get(f)) {
                new["metadata"][f] = v.clone();
            }
        }
        self.objects.insert((res.plural, ns.to_owned(), name.to_owned()), new.clone());
        self.record(res, ns, "MODIFIED", &new);
        new
    }

    fn touch_if_asked(&mut self, res: &Resource, ns: &str, name: &str) {
        let asked = (res.plural, ns.to_owned(), name.to_owned());
        if let Some(i) = self.conflict_next.iter().position(|k| *k == asked) {
            self.conflict_next.remove(i);
            if let Some(old) = self.objects.get(&asked).cloned() {
                let mut new = old.clone();
                let n = self.rv;
                new["metadata"]["annotations"]["testkit.bursar.dev/touched"] = n.to_string().into();
                self.store(res, ns, name, &old, new);
            }
        }
    }

    /// Applies a write to the main resource or `status`.
    fn write(&mut self, res: &Resource, ns: &str, name: &str, op: Op<'_>) -> Result<Value, ApiError> {
        let Op { status, how, body, field_manager } = op;
        let key = (res.plural, ns.to_owned(), name.to_owned());
        let Some(old) = self.objects.get(&key).cloned() else {
            return Err(ApiError::new(404, "NotFound", format!("{}.{} \"{name}\" not found", res.plural, res.group)));
        };
        let current = meta_str(&old, "resourceVersion").unwrap_or("").to_owned();
        let conflict = |asked: &str| {
            ApiError::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {}.{} \"{name}\": the object has been modified; please apply your changes to the latest version and try again (asked {asked}, now {current})",
                    res.plural, res.group
                ),
            )
        };
        if let Some(asked) = meta_str(body, "resourceVersion")
            && asked != current
        {
            return Err(conflict(asked));
        }
        let mut merged = old.clone();
        match how {
            "PUT" => {
                if meta_str(body, "resourceVersion").is_none() {
                    return Err(ApiError::new(
                        422,
                        "Invalid",
                        "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update",
                    ));
                }
                merged = body.clone();
            }
            "application/merge-patch+json" => merge_patch(&mut merged, body),
            "application/strategic-merge-patch+json" if !res.custom => merge_patch(&mut merged, body),
            "application/strategic-merge-patch+json" => {
                return Err(ApiError::new(
                    415,
                    "UnsupportedMediaType",
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
                ));
            }
            "application/apply-patch+yaml" => {
                if field_manager.is_none_or(str::is_empty) {
                    return Err(ApiError::new(
                        400,
                        "BadRequest",
                        "PATCH requests with apply content type must supply fieldManager",
                    ));
                }
                if body.get("apiVersion").and_then(Value::as_str) != Some(&res.api_version())
                    || body.get("kind").and_then(Value::as_str) != Some(res.kind)
                {
                    return Err(ApiError::new(
                        400,
                        "BadRequest",
                        "apply patches must name the object's apiVersion and kind",
                    ));
                }
                apply_patch(&mut merged, body);
            }
            other => {
                return Err(ApiError::new(
                    415,
                    "UnsupportedMediaType",
                    format!("the body of the request was in an unknown format: `{other}`"),
                ));
            }
        }
        // The status subresource changes only status; the main resource never does.
        let mut new = old.clone();
        if status {
            new["status"] = merged.get("status").cloned().unwrap_or(Value::Null);
        } else {
            let keep = old.get("status").cloned();
            new = merged;
            match keep {
                Some(s) => new["status"] = s,
                None => {
                    if let Some(o) = new.as_object_mut() {
                        o.remove("status");
                    }
                }
            }
        }
        new["metadata"]["resourceVersion"] = current.clone().into();
        Ok(self.store(res, ns, name, &old, new))
    }

    fn delete(&mut self, res: &Resource, ns: &str, name: &str) -> Result<Value, ApiError> {
        let key = (res.plural, ns.to_owned(), name.to_owned());
        let Some(mut old) = self.objects.remove(&key) else {
            return Err(ApiError::new(404, "NotFound", format!("{}.{} \"{name}\" not found", res.plural, res.group)));
        };
        let rv = self.next_rv();
        old["metadata"]["resourceVersion"] = rv.to_string().into();
        self.record(res, ns, "DELETED", &old);
        Ok(old)
    }

    fn list(&self, res: &Resource, ns: Option<&str>, selector: Option<&str>) -> Vec<Value> {
        self.objects
            .iter()
            .filter(|((p, n, _), o)| {
                *p == res.plural && ns.is_none_or(|ns| ns == n) && selector.is_none_or(|s| labels_match(o, s))
            })
            .map(|(_, o)| o.clone())
            .collect()
    }

    fn allowed(&self, rules: Option<&Vec<Rule>>, res: &Resource, sub: Option<&str>, verb: &str) -> bool {
        let Some(rules) = rules else { return true };
        let name = match sub {
            Some(s) => format!("{}/{s}", res.plural),
            None => res.plural.to_owned(),
        };
        rules.iter().any(|r| r.group == res.group && r.resources.contains(&name) && r.verbs.iter().any(|v| v == verb))
    }
}

/// The in-test API server. Stops its threads on `Drop`.
#[derive(Debug)]
pub struct KubeApi {
    addr: SocketAddr,
    shared: Arc<Shared>,
    ca: String,
    thread: Option<JoinHandle<()>>,
}

/// A parsed request path.
struct Target {
    res: Resource,
    ns: Option<String>,
    name: Option<String>,
    sub: Option<String>,
    query: BTreeMap<String, String>,
}

fn decode(s: &str) -> String {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                    out.push(v);
                    i += 2;
                } else {
                    out.push(b'%');
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_target(target: &str) -> Option<Target> {
    let (path, q) = target.split_once('?').unwrap_or((target, ""));
    let query = q.split('&').filter(|p| !p.is_empty()).map(|p| {
        let (k, v) = p.split_once('=').unwrap_or((p, ""));
        (decode(k), decode(v))
    });
    let query: BTreeMap<String, String> = query.collect();
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest): (&str, &str, &[&str]) = match parts.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return None,
    };
    let (ns, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some((*ns).to_owned()), rest),
        _ => (None, rest),
    };
    let (plural, name, sub) = match rest {
        [p] => (*p, None, None),
        [p, n] => (*p, Some((*n).to_owned()), None),
        [p, n, s] => (*p, Some((*n).to_owned()), Some((*s).to_owned())),
        _ => return None,
    };
    let res = RESOURCES.iter().find(|r| r.group == group && r.version == version && r.plural == plural).copied()?;
    Some(Target { res, ns, name, sub, query })
}

enum Body {
    Json(u16, Value),
    Watch(WatchReq),
}

/// A watch request's parameters.
struct WatchReq {
    user: String,
    res: Resource,
    ns: Option<String>,
    selector: Option<String>,
    from: Option<u64>,
    bookmarks: bool,
    timeout: Duration,
}

fn list_kind(res: &Resource) -> String {
    format!("{}List", res.kind)
}

impl Shared {
    fn handle(&self, method: &str, target: &str, headers: &[(String, String)], body: &[u8]) -> (Body, String, String) {
        let header = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        let content_type = header("content-type").unwrap_or("").split(';').next().unwrap_or("").trim().to_owned();
        let token = header("authorization").and_then(|a| a.strip_prefix("Bearer ")).unwrap_or("").to_owned();
        let Some((user, rules)) = lock(&self.store).users.get(&token).cloned() else {
            let e = ApiError::new(401, "Unauthorized", "Unauthorized");
            return (Body::Json(401, e.status()), String::new(), String::new());
        };
        let fail = |e: ApiError| (Body::Json(e.code, e.status()), String::new(), user.clone());
        let Some(t) = parse_target(target) else {
            return fail(ApiError::new(
                404,
                "NotFound",
                format!("the server could not find the requested resource ({target})"),
            ));
        };
        let watch = t.query.get("watch").is_some_and(|v| v == "true" || v == "1");
        let verb = match (method, &t.name, watch) {
            ("GET", _, true) => "watch",
            ("GET", Some(_), _) => "get",
            ("GET", None, _) => "list",
            ("POST", None, _) => "create",
            ("PUT", Some(_), _) => "update",
            ("PATCH", Some(_), _) => "patch",
            ("DELETE", Some(_), _) => "delete",
            _ => return fail(ApiError::new(405, "MethodNotAllowed", format!("{method} is not allowed here"))),
        }
        .to_owned();
        let ns = if t.res.namespaced { t.ns.clone() } else { None };
        if t.res.namespaced && t.name.is_some() && ns.is_none() {
            return fail(ApiError::new(404, "NotFound", "a namespaced object needs its namespace in the path"));
        }
        let nsk = ns.clone().unwrap_or_default();
        let mut st = lock(&self.store);
        if !st.allowed(rules.as_ref(), &t.res, t.sub.as_deref(), &verb) {
            let what = match &t.sub {
                Some(s) => format!("{}/{s}", t.res.plural),
                None => t.res.plural.to_owned(),
            };
            return (
                Body::Json(
                    403,
                    ApiError::new(403, "Forbidden", format!("{what}.{} is forbidden: User \"{user}\" cannot {verb} resource \"{what}\" in API group \"{}\"", t.res.group, t.res.group)).status(),
                ),
                verb,
                user,
            );
        }
        let parsed: Result<Value, ApiError> = if body.is_empty() {
            Ok(Value::Null)
        } else {
            serde_json::from_slice(body)
                .map_err(|e| ApiError::new(400, "BadRequest", format!("the body is not JSON: {e}")))
        };
        let result = match (verb.as_str(), parsed) {
            (_, Err(e)) => Err(e),
            ("watch", _) => {
                let from = t
                    .query
                    .get("resourceVersion")
                    .filter(|v| !v.is_empty() && *v != "0")
                    .map(|v| v.parse::<u64>().unwrap_or(0));
                let timeout = t
                    .query
                    .get("timeoutSeconds")
                    .and_then(|v| v.parse().ok())
                    .map_or(Duration::from_secs(1800), Duration::from_secs);
                return (
                    Body::Watch(WatchReq {
                        user: user.clone(),
                        res: t.res,
                        ns,
                        selector: t.query.get("labelSelector").cloned(),
                        from,
                        bookmarks: t.query.get("allowWatchBookmarks").is_some_and(|v| v == "true"),
                        timeout,
                    }),
                    verb,
                    user,
                );
            }
            ("get", _) => {
                let key = (t.res.plural, nsk.clone(), t.name.clone().unwrap_or_default());
                st.objects.get(&key).cloned().map(|o| (200, o)).ok_or_else(|| {
                    ApiError::new(404, "NotFound", format!("{}.{} \"{}\" not found", t.res.plural, t.res.group, key.2))
                })
            }
            ("list", _) => {
                let all = st.list(&t.res, ns.as_deref(), t.query.get("labelSelector").map(String::as_str));
                let limit: usize =
                    t.query.get("limit").and_then(|v| v.parse().ok()).filter(|l| *l > 0).unwrap_or(usize::MAX);
                let start = match t.query.get("continue") {
                    Some(token) => {
                        let (rv, offset) = token.split_once(':').unwrap_or(("0", "0"));
                        let rv: u64 = rv.parse().unwrap_or(0);
                        if rv < st.compacted {
                            let e = ApiError::new(
                                410,
                                "Expired",
                                "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                            );
                            return (Body::Json(410, e.status()), verb, user);
                        }
                        offset.parse().unwrap_or(0)
                    }
                    None => 0,
                };
                let items: Vec<Value> = all.iter().skip(start).take(limit).cloned().collect();
                let mut meta = json!({"resourceVersion": st.rv.to_string()});
                if start + items.len() < all.len() {
                    meta["continue"] = format!("{}:{}", st.rv, start + items.len()).into();
                }
                Ok((
                    200,
                    json!({"apiVersion": t.res.api_version(), "kind": list_kind(&t.res), "metadata": meta, "items": items}),
                ))
            }
            ("create", Ok(b)) => st.create(&t.res, &nsk, b).map(|o| (201, o)),
            ("update", Ok(b)) => {
                let name = t.name.clone().unwrap_or_default();
                st.touch_if_asked(&t.res, &nsk, &name);
                st.write(
                    &t.res,
                    &nsk,
                    &name,
                    Op { status: t.sub.as_deref() == Some("status"), how: "PUT", body: &b, field_manager: None },
                )
                .map(|o| (200, o))
            }
            ("patch", Ok(b)) => {
                let name = t.name.clone().unwrap_or_default();
                st.touch_if_asked(&t.res, &nsk, &name);
                let fm = t.query.get("fieldManager").map(String::as_str);
                st.write(
                    &t.res,
                    &nsk,
                    &name,
                    Op { status: t.sub.as_deref() == Some("status"), how: &content_type, body: &b, field_manager: fm },
                )
                .map(|o| (200, o))
            }
            ("delete", _) => st.delete(&t.res, &nsk, &t.name.clone().unwrap_or_default()).map(|o| (200, o)),
            _ => Err(ApiError::new(405, "MethodNotAllowed", "not allowed")),
        };
        drop(st);
        self.changed.notify_all();
        match result {
            Ok((code, v)) => (Body::Json(code, v), verb, user),
            Err(e) => (Body::Json(e.code, e.status()), verb, user),
        }
    }
}

fn write_chunk(w: &mut dyn Write, data: &[u8]) -> io::Result<()> {
    write!(w, "{:x}\r\n", data.len())?;
    w.write_all(data)?;
    w.write_all(b"\r\n")?;
    w.flush()
}

/// Streams a watch; returns `Ok(true)` when the connection must be dropped without the last chunk.
fn stream_watch(shared: &Shared, w: &mut dyn Write, req: WatchReq) -> io::Result<bool> {
    let WatchReq { user, res, ns, selector, from, bookmarks, timeout } = req;
    write!(w, "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")?;
    w.flush()?;
    let deadline = Instant::now() + timeout;
    let mut st = lock(&shared.store);
    let epoch = st.epoch;
    let mut at = match from {
        Some(rv) if rv < st.compacted => {
            let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": format!("too old resource version: {rv} ({})", st.compacted), "reason": "Expired", "code": 410});
            let line = format!("{}\n", json!({"type": "ERROR", "object": status}));
            drop(st);
            write_chunk(w, line.as_bytes())?;
            write_chunk(w, b"")?;
            return Ok(false);
        }
        Some(rv) => rv,
        None => {
            // No version: the current objects as ADDED, then what follows.
            let items = st.list(&res, ns.as_deref(), selector.as_deref());
            let rv = st.rv;
            drop(st);
            for o in items {
                write_chunk(w, format!("{}\n", json!({"type": "ADDED", "object": o})).as_bytes())?;
            }
            st = lock(&shared.store);
            rv
        }
    };
    let mut last_bookmark = Instant::now();
    loop {
        if shared.stop.load(Ordering::Relaxed) || st.epoch != epoch {
            return Ok(true);
        }
        let lines: Vec<String> = st
            .history
            .iter()
            .filter(|c| c.rv > at)
            .filter(|c| c.res == res.plural && ns.as_deref().is_none_or(|n| n == c.ns))
            .filter(|c| selector.as_deref().is_none_or(|s| labels_match(&c.object, s)))
            .map(|c| format!("{}\n", json!({"type": c.kind, "object": c.object})))
            .collect();
        at = st.rv;
        let bookmark = st.bookmark_every.filter(|_| bookmarks).is_some_and(|every| last_bookmark.elapsed() >= every);
        drop(st);
        for l in lines {
            write_chunk(w, l.as_bytes())?;
        }
        if bookmark {
            let b = json!({"type": "BOOKMARK", "object": {"apiVersion": res.api_version(), "kind": res.kind, "metadata": {"resourceVersion": at.to_string()}}});
            write_chunk(w, format!("{b}\n").as_bytes())?;
            last_bookmark = Instant::now();
            let sent = Bookmark { user: user.clone(), resource: res.plural, version: at };
            lock(&shared.store).bookmarks.push(sent);
        }
        if Instant::now() >= deadline {
            write_chunk(w, b"")?;
            return Ok(false);
        }
        st = lock(&shared.store);
        let (guard, _) = shared.changed.wait_timeout(st, Duration::from_millis(50)).unwrap_or_else(|p| p.into_inner());
        st = guard;
    }
}

fn serve_conn(shared: &Shared, stream: TcpStream, config: Option<Arc<rustls::ServerConfig>>) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let sock = stream.try_clone()?;
    let mut conn: Box<dyn ReadWrite> = match config {
        Some(c) => {
            Box::new(rustls::StreamOwned::new(rustls::ServerConnection::new(c).map_err(io::Error::other)?, stream))
        }
        None => Box::new(stream),
    };
    loop {
        let mut r = BufReader::new(&mut conn);
        let Some(crate::process::Request { method, target, headers, body }) = crate::process::read_request(&mut r)?
        else {
            return Ok(());
        };
        drop(r);
        let content_type =
            headers.iter().find(|(k, _)| k == "content-type").map(|(_, v)| v.clone()).unwrap_or_default();
        let (answer, verb, user) = shared.handle(&method, &target, &headers, &body);
        let status = match &answer {
            Body::Json(code, _) => *code,
            Body::Watch(_) => 200,
        };
        lock(&shared.store).seen.push(Seen {
            method: method.clone(),
            target: target.clone(),
            content_type,
            status,
            verb,
            user,
        });
        match answer {
            Body::Json(code, v) => {
                let text = v.to_string();
                write!(
                    conn,
                    "HTTP/1.1 {code} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{text}",
                    text.len()
                )?;
                conn.flush()?;
            }
            Body::Watch(req) => {
                let broken = stream_watch(shared, &mut conn, req)?;
                if broken {
                    let _ = sock.shutdown(std::net::Shutdown::Both);
                    return Ok(());
                }
            }
        }
    }
}

trait ReadWrite: Read + Write + Send {}
impl<T: Read + Write + Send> ReadWrite for T {}

fn b64(input: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in input.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            out.push(if i <= chunk.len() { char::from(ABC[((n >> shift) & 63) as usize]) } else { '=' });
        }
    }
    out
}

impl KubeApi {
    /// Starts a server on `127.0.0.1:0` over TLS with a certificate of a CA made here; it knows no
    /// user until [`KubeApi::add_user`].
    pub fn start() -> io::Result<KubeApi> {
        let ca = TestCa::new("kube test CA")?;
        let leaf: Leaf = ca.server()?;
        let config = crate::tls::server_config(&leaf)?;
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            store: Mutex::new(Store { bookmark_every: Some(Duration::from_secs(1)), ..Store::default() }),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new().name("kubeapi".into()).spawn(move || {
            for conn in listener.incoming() {
                if s.stop.load(Ordering::Relaxed) {
                    return;
                }
                if let Ok(c) = conn {
                    let (s, config) = (s.clone(), config.clone());
                    let _ = std::thread::Builder::new().name("kubeapi-conn".into()).spawn(move || {
                        let _ = serve_conn(&s, c, Some(config));
                    });
                }
            }
        })?;
        Ok(KubeApi { addr, shared, ca: ca.cert_pem(), thread: Some(thread) })
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Writes a kubeconfig naming this server, its CA and `token`; returns its path.
    pub fn write_kubeconfig(&self, dir: &Path, token: &str) -> io::Result<PathBuf> {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {}\n    certificate-authority-data: {}\nusers:\n- name: agent\n  user:\n    token: {token}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: agent\ncurrent-context: test\n",
            self.url(),
            b64(self.ca.as_bytes())
        );
        std::fs::write(&path, text)?;
        Ok(path)
    }

    fn with<T>(&self, f: impl FnOnce(&mut Store) -> T) -> T {
        let out = f(&mut lock(&self.shared.store));
        self.shared.changed.notify_all();
        out
    }

    /// Creates an object (as another controller or a user would).
    pub fn create(&self, res: Resource, ns: &str, obj: Value) -> Result<Value, ApiError> {
        self.with(|s| s.create(&res, ns, obj))
    }

    /// The object, if it exists.
    pub fn get(&self, res: Resource, ns: &str, name: &str) -> Option<Value> {
        self.with(|s| s.objects.get(&(res.plural, ns.to_owned(), name.to_owned())).cloned())
    }

    /// Every object of `res`.
    pub fn list(&self, res: Resource) -> Vec<Value> {
        self.with(|s| s.list(&res, None, None))
    }

    /// Merge-patches an object (`status`: its status subresource), as a controller would.
    pub fn update(&self, res: Resource, ns: &str, name: &str, status: bool, patch: Value) -> Result<Value, ApiError> {
        self.with(|s| {
            s.write(
                &res,
                ns,
                name,
                Op { status, how: "application/merge-patch+json", body: &patch, field_manager: None },
            )
        })
    }

    /// Deletes an object.
    pub fn delete(&self, res: Resource, ns: &str, name: &str) -> Result<Value, ApiError> {
        self.with(|s| s.delete(&res, ns, name))
    }

    /// Forgets history up to now: a watch or a list continue from an older version gets `410`.
    pub fn compact(&self) {
        self.with(|s| {
            s.compacted = s.rv;
            s.history.clear();
        });
    }

    /// Compacts and breaks every open watch at once: every watch resumed from its last version gets
    /// `410 Gone`. One step, so no watch sends a bookmark of the compacted version between the two
    /// (a watcher resuming from that would rightly not be told its version is gone); compacted past
    /// anything a watcher has seen, as etcd is when another resource was written just before.
    pub fn compact_and_break_watches(&self) {
        self.with(|s| {
            s.rv += 1;
            s.compacted = s.rv;
            s.history.clear();
            s.epoch += 1;
        });
    }

    /// Breaks every open watch mid-stream.
    pub fn disconnect_watches(&self) {
        self.with(|s| s.epoch += 1);
    }

    /// Bookmarks on watches that ask for them: every `every`, or never.
    pub fn set_bookmarks(&self, every: Option<Duration>) {
        self.with(|s| s.bookmark_every = every);
    }

    /// Adds user `name` with bearer token `token` and its RBAC rules (`None`: every verb).
    pub fn add_user(&self, name: &str, token: &str, rules: Option<Vec<Rule>>) {
        self.with(|s| s.users.insert(token.to_owned(), (name.to_owned(), rules)));
    }

    /// The next write to this object over HTTP (an agent's) races with a change of it made just
    /// before.
    pub fn conflict_next_write(&self, res: Resource, ns: &str, name: &str) {
        self.with(|s| s.conflict_next.push((res.plural, ns.to_owned(), name.to_owned())));
    }

    /// Every request answered so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.with(|s| s.seen.clone())
    }

    /// Every bookmark sent so far.
    pub fn bookmarks(&self) -> Vec<Bookmark> {
        self.with(|s| s.bookmarks.clone())
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.with(|s| s.rv)
    }

    /// Waits until `f` returns `Some`, for at most `timeout`.
    pub fn wait_for<T>(&self, timeout: Duration, mut f: impl FnMut(&KubeApi) -> Option<T>) -> Option<T> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = f(self) {
                return Some(v);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }
}

impl Drop for KubeApi {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.shared.changed.notify_all();
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_and_apply_patches() {
        let mut v = json!({"a": {"b": 1, "c": 2}, "l": [1, 2]});
        merge_patch(&mut v, &json!({"a": {"b": null, "d": 3}, "l": [3]}));
        assert_eq!(v, json!({"a": {"c": 2, "d": 3}, "l": [3]}));
        let mut w = json!({"status": {"admissionChecks": [{"name": "kueue", "state": "Ready"}, {"name": "bursar", "state": "Pending", "message": ""}]}});
        apply_patch(
            &mut w,
            &json!({"status": {"admissionChecks": [{"name": "bursar", "state": "Ready", "message": "ok"}]}}),
        );
        assert_eq!(w["status"]["admissionChecks"][0]["state"], "Ready");
        assert_eq!(w["status"]["admissionChecks"][1], json!({"name": "bursar", "state": "Ready", "message": "ok"}));
    }

    #[test]
    fn selectors_paths_and_times() {
        let o = json!({"metadata": {"labels": {"bursar.dev/job": "lab-1", "app": "x"}}});
        assert!(labels_match(&o, "bursar.dev/job"));
        assert!(labels_match(&o, "bursar.dev/job=lab-1,app"));
        assert!(!labels_match(&o, "bursar.dev/job!=lab-1"));
        assert!(labels_match(&o, "!other"));
        let t =
            parse_target("/apis/kueue.x-k8s.io/v1beta1/namespaces/nlp/workloads/w1/status?fieldManager=x&force=true")
                .unwrap();
        assert_eq!(
            (t.res.plural, t.ns.as_deref(), t.name.as_deref(), t.sub.as_deref()),
            ("workloads", Some("nlp"), Some("w1"), Some("status"))
        );
        assert_eq!(
            parse_target("/api/v1/pods?labelSelector=bursar.dev%2Fjob").unwrap().query["labelSelector"],
            "bursar.dev/job"
        );
        assert_eq!(rfc3339(1_796_018_054), "2026-11-30T05:54:14Z");
    }

    #[test]
    fn cluster_roles_are_read_from_a_manifest() {
        let m = "kind: Namespace\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: r\nrules:\n- apiGroups: [\"\"]\n  resources: [\"pods\"]\n  verbs: [\"list\", \"watch\"]\n- apiGroups: [\"kueue.x-k8s.io\"]\n  resources: [\"workloads/status\"]\n  verbs: [\"patch\"]\n";
        let rules = cluster_role_rules(m, "r");
        assert_eq!(rules.len(), 2);
        assert_eq!(
            (rules[0].group.as_str(), rules[0].resources.clone(), rules[0].verbs.clone()),
            ("", vec!["pods".to_owned()], vec!["list".to_owned(), "watch".to_owned()])
        );
        assert_eq!(rules[1].group, "kueue.x-k8s.io");
        assert!(cluster_role_rules(m, "other").is_empty());
    }

    #[test]
    fn writes_keep_versions_and_refuse_stale_ones() {
        let mut s = Store::default();
        let w = s
            .create(&WORKLOADS, "nlp", json!({"metadata": {"name": "w"}, "spec": {"active": true}, "status": {"x": 1}}))
            .unwrap();
        assert!(w.get("status").is_none(), "create drops status");
        let rv = w["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
        let patched = s
            .write(
                &WORKLOADS,
                "nlp",
                "w",
                Op {
                    status: true,
                    how: "application/merge-patch+json",
                    body: &json!({"status": {"s": 1}, "spec": {"active": false}}),
                    field_manager: None,
                },
            )
            .unwrap();
        assert_eq!(patched["status"]["s"], 1);
        assert_eq!(patched["spec"]["active"], true, "the status subresource changes only status");
        let stale = json!({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload", "metadata": {"resourceVersion": rv}, "status": {"s": 2}});
        let e = s
            .write(
                &WORKLOADS,
                "nlp",
                "w",
                Op { status: true, how: "application/apply-patch+yaml", body: &stale, field_manager: Some("m") },
            )
            .unwrap_err();
        assert_eq!((e.code, e.reason), (409, "Conflict"));
        let e = s
            .write(
                &WORKLOADS,
                "nlp",
                "w",
                Op {
                    status: false,
                    how: "application/strategic-merge-patch+json",
                    body: &json!({}),
                    field_manager: None,
                },
            )
            .unwrap_err();
        assert_eq!(e.code, 415);
        let e = s
            .write(
                &WORKLOADS,
                "nlp",
                "w",
                Op { status: true, how: "application/apply-patch+yaml", body: &json!({}), field_manager: None },
            )
            .unwrap_err();
        assert_eq!(e.code, 400, "apply needs a field manager");
        let before = s.rv;
        s.write(
            &WORKLOADS,
            "nlp",
            "w",
            Op {
                status: false,
                how: "application/merge-patch+json",
                body: &json!({"spec": {"active": true}}),
                field_manager: None,
            },
        )
        .unwrap();
        assert_eq!(s.rv, before, "a write that changes nothing keeps the version");
    }
}
