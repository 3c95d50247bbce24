//! How many GPUs a pod asks for, exact to a MIG slice ([`bursar_model::Gpus`]).
//!
//! A resource counts when it is
//!
//! - an `nvidia.com/mig-<profile>` resource (the device plugin's `mixed` MIG strategy), always: one
//!   is the share of a GPU its profile is, its compute slices over seven (A100, H100, H200, B200)
//!   or over four (the A30's `1g.6gb`, `2g.12gb`, `4g.24gb`), [`bursar_model::mig_share`]; or
//! - one of the site's `--gpu-resource` names ([`Mapping::gpu_resources`], `nvidia.com/gpu` by
//!   default): one is a whole GPU, or its share when its name holds a MIG profile.
//!
//! The site's table (`--mig-share PROFILE=SHARE`, [`MigShares`]) overrides the built-in share of a
//! profile, for a GPU whose profiles do not follow the rule (`1g.24gb=1/4` on a GPU cut in four).
//! A `nvidia.com/mig-*` name without a profile bursar can read counts as a whole GPU (the safe side
//! for a cap).
//!
//! Per resource as Kubernetes counts a pod's request: each container by its limit (an extended
//! resource needs one), else its request; the larger of the containers' sum and the largest init
//! container. A pod's GPUs are the sum over the resources that count of that number × the share.
//! Two `nvidia.com/mig-1g.10gb` are `2/7`; with one `nvidia.com/gpu` beside them, `9/7`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use bursar_model::Gpus;
use bursar_model::gpus::mig_profile;
use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::submit::{Mapping, whole};

/// The prefix of the device plugin's MIG resources (`mixed` strategy): `nvidia.com/mig-1g.10gb`.
pub const MIG_PREFIX: &str = "nvidia.com/mig-";

/// One entry of the site's MIG table: a profile and the share of a GPU one slice of it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigShare {
    /// The profile as the site wrote it (`1g.24gb`).
    pub profile: String,
    /// Its `(compute slices, memory GB)`: what it matches in a resource's name.
    key: (u64, u64),
    /// The share of a GPU one slice is.
    pub share: Gpus,
}

impl MigShare {
    /// Reads `PROFILE=SHARE`: `1g.24gb=1/4`, `nvidia.com/mig-2g.20gb=0.25`.
    pub fn parse(text: &str) -> Result<MigShare, String> {
        let help = "help: --mig-share PROFILE=SHARE, e.g. --mig-share 1g.24gb=1/4 (a profile <compute slices>g.<memory>gb, a share of one GPU)";
        let Some((profile, share)) = text.split_once('=') else {
            return Err(format!("`{text}` is not PROFILE=SHARE\n  {help}"));
        };
        let (profile, share) = (profile.trim(), share.trim());
        let Some(key) = mig_profile(profile) else {
            return Err(format!(
                "`{profile}` holds no MIG profile (<compute slices>g.<memory>gb, e.g. 1g.10gb)\n  {help}"
            ));
        };
        let share = Gpus::parse(share).map_err(|e| format!("the share of `{profile}`: {e}\n  {help}"))?;
        if share.is_zero() {
            return Err(format!("the share of `{profile}` is 0: a slice is part of a GPU, more than none\n  {help}"));
        }
        if share > Gpus::whole(1) {
            return Err(format!("the share of `{profile}` is {share}: a slice is at most one GPU\n  {help}"));
        }
        Ok(MigShare { profile: profile.to_owned(), key, share })
    }
}

impl FromStr for MigShare {
    type Err = String;
    fn from_str(s: &str) -> Result<MigShare, String> {
        MigShare::parse(s)
    }
}

impl fmt::Display for MigShare {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.profile, self.share)
    }
}

/// The site's MIG table (`--mig-share`, repeated): a profile's share over the built-in one, matched
/// by its compute slices and memory wherever the profile is in a resource's name.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MigShares(Vec<MigShare>);

impl MigShares {
    /// The table of `entries`; the same profile twice with two shares is an error.
    pub fn new(entries: impl IntoIterator<Item = MigShare>) -> Result<MigShares, String> {
        let mut out: Vec<MigShare> = Vec::new();
        for e in entries {
            match out.iter().find(|o| o.key == e.key) {
                Some(o) if o.share != e.share => {
                    return Err(format!(
                        "--mig-share gives profile `{}` two shares, {} (`{o}`) and {} (`{e}`)\n  help: give each profile once",
                        e.profile, o.share, e.share
                    ));
                }
                Some(_) => {}
                None => out.push(e),
            }
        }
        Ok(MigShares(out))
    }

    /// The site's share of the profile in `resource`'s name, if it gave one.
    pub fn get(&self, resource: &str) -> Option<Gpus> {
        let key = mig_profile(resource)?;
        self.0.iter().find(|e| e.key == key).map(|e| e.share)
    }

    /// Whether the site gave none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Mapping {
    /// The `--gpu-resource` names.
    pub fn gpu_resources(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.gpu_resource.as_str()).chain(self.more_gpu_resources.iter().map(String::as_str))
    }

    /// The GPUs one of `resource` is, `None` when it does not count (see the [module](self)).
    pub fn gpu_share(&self, resource: &str) -> Option<Gpus> {
        if !resource.starts_with(MIG_PREFIX) && !self.gpu_resources().any(|r| r == resource) {
            return None;
        }
        Some(self.mig_shares.get(resource).or_else(|| bursar_model::mig_share(resource)).unwrap_or(Gpus::whole(1)))
    }

    /// Whether `resource` counts GPUs.
    pub fn counts(&self, resource: &str) -> bool {
        self.gpu_share(resource).is_some()
    }
}

type Resources = BTreeMap<String, Quantity>;

fn lists(c: &Container) -> impl Iterator<Item = &Resources> {
    let r = c.resources.as_ref();
    r.and_then(|r| r.limits.as_ref()).into_iter().chain(r.and_then(|r| r.requests.as_ref()))
}

/// How many of `resource` container `c` asks for: its limit, else its request (whole numbers only).
fn container_count(c: &Container, resource: &str) -> u32 {
    let r = c.resources.as_ref();
    let pick = |m: Option<&Resources>| m.and_then(|m| m.get(resource)).and_then(|q| whole(&q.0));
    r.and_then(|r| pick(r.limits.as_ref()).or_else(|| pick(r.requests.as_ref()))).unwrap_or(0)
}

/// How many of `resource` one pod of `spec` asks for: the larger of its containers' sum and its
/// largest init container, each container counted by its limit, else its request.
pub fn pod_count(spec: &PodSpec, resource: &str) -> u32 {
    let main = spec.containers.iter().map(|c| container_count(c, resource)).fold(0, u32::saturating_add);
    let init = spec.init_containers.iter().flatten().map(|c| container_count(c, resource)).max().unwrap_or(0);
    main.max(init)
}

/// GPUs one pod of `spec` asks for: over every resource that counts, [`pod_count`] × its share.
pub fn pod_gpus(spec: &PodSpec, mapping: &Mapping) -> Gpus {
    let names: BTreeSet<&str> = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .flat_map(lists)
        .flat_map(|m| m.keys().map(String::as_str))
        .collect();
    names.into_iter().filter_map(|r| Some(mapping.gpu_share(r)?.saturating_mul(pod_count(spec, r)))).sum()
}

/// Whether container `c` names a resource that counts GPUs (in its limits or requests).
pub fn asks_for_gpus(c: &Container, mapping: &Mapping) -> bool {
    lists(c).any(|m| m.keys().any(|r| mapping.counts(r)))
}

/// The flavor Kueue assigned to the GPUs of a pod set, from its `flavors` (resource → flavor): the
/// first `--gpu-resource` name's, else that of the first other resource that counts (a MIG slice).
pub fn gpu_flavor<'a>(flavors: &'a BTreeMap<String, String>, mapping: &Mapping) -> Option<&'a String> {
    mapping
        .gpu_resources()
        .find_map(|r| flavors.get(r))
        .or_else(|| flavors.iter().find(|(r, _)| mapping.counts(r)).map(|(_, f)| f))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn g(text: &str) -> Gpus {
        Gpus::parse(text).unwrap()
    }

    fn spec(v: serde_json::Value) -> PodSpec {
        serde_json::from_value(v).unwrap()
    }

    fn limits(m: serde_json::Value) -> PodSpec {
        spec(json!({"containers": [{"name": "c", "resources": {"limits": m}}]}))
    }

    #[test]
    fn two_slices_of_an_a100_are_two_sevenths() {
        let m = Mapping::default();
        assert_eq!(pod_gpus(&limits(json!({"nvidia.com/mig-1g.10gb": "2"})), &m), g("2/7"));
        assert_eq!(pod_gpus(&limits(json!({"nvidia.com/mig-3g.40gb": "1"})), &m), g("3/7"));
        assert_eq!(pod_gpus(&limits(json!({"nvidia.com/mig-1g.6gb": "2"})), &m), g("1/2"), "A30: quarters");
        assert_eq!(pod_gpus(&limits(json!({"nvidia.com/mig-7g.80gb": "1"})), &m), g("1"));
        assert_eq!(pod_gpus(&limits(json!({"nvidia.com/mig-unknown": "2"})), &m), g("2"), "no profile: whole GPUs");
        assert_eq!(pod_gpus(&limits(json!({"example.com/fpga-1g.10gb": "2"})), &m), Gpus::ZERO, "not a GPU resource");
        assert_eq!(pod_gpus(&limits(json!({"cpu": "4", "memory": "16Gi"})), &m), Gpus::ZERO);
    }

    #[test]
    fn slices_add_to_whole_gpus_and_to_other_profiles() {
        let m = Mapping::default();
        let mixed =
            limits(json!({"nvidia.com/gpu": "1", "nvidia.com/mig-1g.10gb": "2", "nvidia.com/mig-2g.20gb": "1"}));
        assert_eq!(pod_gpus(&mixed, &m), g("11/7"));
        let two = spec(json!({"containers": [
            {"name": "a", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "3"}}},
            {"name": "b", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}));
        assert_eq!(pod_gpus(&two, &m), g("17/7"));
        assert_eq!(pod_gpus(&limits(json!({"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "1"})), &m), g("1/7"));
    }

    #[test]
    fn limits_win_over_requests_and_init_containers_count_per_resource() {
        let m = Mapping::default();
        let both = spec(json!({"containers": [{"name": "c", "resources": {
            "limits": {"nvidia.com/mig-1g.10gb": "2"}, "requests": {"nvidia.com/mig-1g.10gb": "5"}}}]}));
        assert_eq!(pod_gpus(&both, &m), g("2/7"), "the limit");
        let requests =
            spec(json!({"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/mig-1g.10gb": "3"}}}]}));
        assert_eq!(pod_gpus(&requests, &m), g("3/7"), "no limit: the request");
        let milli = limits(json!({"nvidia.com/mig-1g.10gb": "2000m"}));
        assert_eq!(pod_gpus(&milli, &m), g("2/7"));
        // Per resource, the larger of the containers' sum and the largest init container: slices 4
        // (init) over 1 + 1; whole GPUs 1 (the containers) over none.
        let init = spec(json!({
            "initContainers": [{"name": "warm", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "4"}}},
                               {"name": "fetch", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}],
            "containers": [{"name": "a", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1", "nvidia.com/gpu": "1"}}},
                           {"name": "b", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}]}));
        assert_eq!(pod_count(&init, "nvidia.com/mig-1g.10gb"), 4);
        assert_eq!(pod_count(&init, "nvidia.com/gpu"), 1);
        assert_eq!(pod_gpus(&init, &m), g("11/7"));
    }

    #[test]
    fn several_gpu_resources_each_count() {
        let m = Mapping {
            gpu_resource: "nvidia.com/gpu".into(),
            more_gpu_resources: vec!["amd.com/gpu".into(), "example.com/a100-1g.10gb".into()],
            ..Mapping::default()
        };
        let pod = limits(json!({"nvidia.com/gpu": "1", "amd.com/gpu": "2", "example.com/a100-1g.10gb": "2"}));
        assert_eq!(pod_gpus(&pod, &m), g("23/7"), "1 + 2 whole, and 2 slices of a name with a profile");
        assert_eq!(pod_gpus(&pod, &Mapping::default()), g("1"), "only nvidia.com/gpu by default");
        let c: Container =
            serde_json::from_value(json!({"name": "c", "resources": {"requests": {"amd.com/gpu": "1"}}})).unwrap();
        assert!(asks_for_gpus(&c, &m) && !asks_for_gpus(&c, &Mapping::default()));
    }

    #[test]
    fn the_site_table_overrides_a_profile() {
        let shares =
            MigShares::new(["1g.24gb=1/4".parse().unwrap(), "nvidia.com/mig-2g.20gb=1/4".parse().unwrap()]).unwrap();
        let m = Mapping { mig_shares: shares, ..Mapping::default() };
        assert_eq!(pod_gpus(&limits(json!({"nvidia.com/mig-1g.24gb": "2"})), &m), g("1/2"));
        assert_eq!(pod_gpus(&limits(json!({"nvidia.com/mig-1g.24gb": "2"})), &Mapping::default()), g("2/7"));
        assert_eq!(pod_gpus(&limits(json!({"nvidia.com/mig-2g.20gb+me": "1"})), &m), g("1/4"), "matched by profile");
        assert_eq!(pod_gpus(&limits(json!({"nvidia.com/mig-1g.10gb": "1"})), &m), g("1/7"), "the others built in");
        assert_eq!(m.mig_shares.get("nvidia.com/gpu"), None);
        assert_eq!(MigShare::parse(" 1g.24gb = 0.25 ").unwrap().to_string(), "1g.24gb=1/4");
        let same = MigShares::new(["1g.24gb=1/4".parse().unwrap(), "1g.24gb=0.25".parse().unwrap()]).unwrap();
        assert_eq!(same.get("1g.24gb"), Some(g("1/4")), "the same share twice is one entry");
    }

    #[test]
    fn bad_mig_shares_are_refused_with_what_to_write() {
        let err = |t: &str| MigShare::parse(t).unwrap_err();
        for (text, says) in [
            ("1g.24gb", "is not PROFILE=SHARE"),
            ("h100=1/4", "holds no MIG profile"),
            ("=1/4", "holds no MIG profile"),
            ("1g.24gb=", "not a GPU count"),
            ("1g.24gb=a quarter", "not a GPU count"),
            ("1g.24gb=1/9", "840ths"),
            ("1g.24gb=0", "is 0"),
            ("1g.24gb=0/4", "is 0"),
            ("1g.24gb=8/7", "at most one GPU"),
            ("1g.24gb=2", "at most one GPU"),
        ] {
            let e = err(text);
            assert!(e.contains(says) && e.contains("help: --mig-share PROFILE=SHARE"), "{text}: {e}");
        }
        let twice = MigShares::new(["1g.24gb=1/4".parse().unwrap(), "1g.24gb=1/7".parse().unwrap()]).unwrap_err();
        assert!(twice.contains("two shares") && twice.contains("1/4") && twice.contains("1/7"), "{twice}");
    }

    #[test]
    fn the_gpu_flavor_is_the_gpu_resources_then_a_slices() {
        let m = Mapping::default();
        let f = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs.iter().map(|(r, f)| ((*r).to_owned(), (*f).to_owned())).collect()
        };
        let mig = f(&[("cpu", "default"), ("nvidia.com/mig-1g.10gb", "a100-mig")]);
        assert_eq!(gpu_flavor(&mig, &m).map(String::as_str), Some("a100-mig"));
        let both = f(&[("nvidia.com/gpu", "h100"), ("nvidia.com/mig-1g.10gb", "a100-mig")]);
        assert_eq!(gpu_flavor(&both, &m).map(String::as_str), Some("h100"));
        assert_eq!(gpu_flavor(&f(&[("cpu", "default")]), &m), None);
    }
}
