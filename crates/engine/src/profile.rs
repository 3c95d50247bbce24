//! Job profiles: the names a job shares with every other job its submitter sends the same way (project,
//! user, queue, stage, GPU type and tags), interned as one value, so a job record holds one pointer for
//! all of them and an admission looks them up with one hash.
//!
//! A pool has few profiles and many jobs: a user submits to a handful of projects and queues with the
//! same tags, thousands of times. A record used to hold five [`Sym`]s and its own tag list (56 bytes
//! and an allocation per tagged job); it now holds one [`Arc<Profile>`] (8 bytes). Each profile is
//! created on its first submission from the names interner; a profile no job holds any more is freed
//! by a sweep that runs when the table doubles (amortised: the table is never more than twice the
//! profiles in use plus [`SWEEP_MIN`]).

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use bursar_model::JobSpec;
use hashbrown::HashTable;
use rustc_hash::FxHasher;
use serde::{Deserialize, Serialize};

use crate::intern::{Interner, Sym};
use crate::state::JobFacts;

/// One tag of a job: its key, its value, and the tag ledger (`key=value`) it counts in, all interned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobTag {
    /// Key.
    pub key: Sym,
    /// Value.
    pub value: Sym,
    /// The tag ledger's name, `key=value`, computed once at submission.
    pub ledger: Sym,
    /// Where that ledger is in the state's book of tag ledgers.
    #[serde(skip)]
    pub(crate) slot: Slot,
}

/// Where a profile's ledger was last found in its [`crate::state::Book`], so reserving and releasing
/// GPU-hours reach it with one pointer compare instead of hashing its name. Only a hint: the book
/// checks that the name at that position is this very ledger's before using it, so a stale slot (a
/// state cloned and grown differently, a profile re-interned) costs one look-up by name, never a
/// wrong ledger. Not serialized; equal to every other slot.
#[derive(Debug, Default)]
pub struct Slot(AtomicU32);

impl Slot {
    pub(crate) fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed) as usize
    }

    pub(crate) fn set(&self, at: usize) {
        self.0.store(u32::try_from(at).unwrap_or(u32::MAX), Ordering::Relaxed);
    }
}

impl Clone for Slot {
    fn clone(&self) -> Slot {
        Slot(AtomicU32::new(self.0.load(Ordering::Relaxed)))
    }
}

impl PartialEq for Slot {
    fn eq(&self, _: &Slot) -> bool {
        true
    }
}

/// The names a job was submitted with. Serialized as the record's own fields (a record's JSON did not
/// change when profiles were introduced).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Project.
    pub(crate) project: Sym,
    /// User.
    pub(crate) user: Sym,
    /// Queue.
    pub(crate) queue: Option<Sym>,
    /// Stage.
    pub(crate) stage: Option<Sym>,
    /// GPU model.
    pub(crate) gpu_type: Option<Sym>,
    /// Tags, in the order submitted.
    pub(crate) tags: Box<[JobTag]>,
    /// Where the project's ledger is in the state's book of project ledgers.
    #[serde(skip)]
    pub(crate) project_slot: Slot,
    /// Where the user's ledger is in the state's book of user ledgers.
    #[serde(skip)]
    pub(crate) user_slot: Slot,
}

/// A profile's names, wherever they are read from: a submission, or a profile being re-interned. The
/// five single names are the selector's [`JobFacts`]; the tags are read in order.
pub(crate) trait Names: JobFacts {
    fn tag_count(&self) -> usize;
    fn tags(&self) -> impl Iterator<Item = (&str, &str)>;
}

impl Names for JobSpec {
    fn tag_count(&self) -> usize {
        self.tags.len()
    }
    fn tags(&self) -> impl Iterator<Item = (&str, &str)> {
        self.tags.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

impl JobFacts for Profile {
    fn project(&self) -> &str {
        &self.project
    }
    fn user(&self) -> &str {
        &self.user
    }
    fn queue(&self) -> Option<&str> {
        self.queue.as_deref()
    }
    fn stage(&self) -> Option<&str> {
        self.stage.as_deref()
    }
    fn gpu_type(&self) -> Option<&str> {
        self.gpu_type.as_deref()
    }
    fn tag(&self, key: &str) -> Option<&str> {
        self.tags.iter().find(|t| &*t.key == key).map(|t| &*t.value)
    }
}

impl Names for Profile {
    fn tag_count(&self) -> usize {
        self.tags.len()
    }
    fn tags(&self) -> impl Iterator<Item = (&str, &str)> {
        self.tags.iter().map(|t| (&*t.key, &*t.value))
    }
}

fn hash_of(n: &impl Names) -> u64 {
    let mut h = FxHasher::default();
    n.project().hash(&mut h);
    n.user().hash(&mut h);
    n.queue().hash(&mut h);
    n.stage().hash(&mut h);
    n.gpu_type().hash(&mut h);
    for (k, v) in n.tags() {
        k.hash(&mut h);
        v.hash(&mut h);
    }
    h.finish()
}

fn same(p: &Profile, n: &impl Names) -> bool {
    *p.project == *n.project()
        && *p.user == *n.user()
        && p.queue.as_deref() == n.queue()
        && p.stage.as_deref() == n.stage()
        && p.gpu_type.as_deref() == n.gpu_type()
        && p.tags.len() == n.tag_count()
        && p.tags.iter().zip(n.tags()).all(|(t, (k, v))| *t.key == *k && *t.value == *v)
}

/// Below this many profiles the table is never swept.
pub(crate) const SWEEP_MIN: usize = 1024;

/// The set of profiles in use, each stored once.
#[derive(Debug, Clone)]
pub struct Profiles {
    /// Each profile with its hash (kept so growing the table never rehashes names).
    table: HashTable<(u64, Arc<Profile>)>,
    /// Sweep profiles no job holds when the table reaches this size.
    sweep_at: usize,
}

impl Default for Profiles {
    fn default() -> Profiles {
        Profiles { table: HashTable::new(), sweep_at: SWEEP_MIN }
    }
}

impl Profiles {
    /// The shared profile of these names, created (its names interned in `names`) on first use.
    /// `buf` is scratch space for the tag ledgers' names.
    pub(crate) fn intern(&mut self, names: &mut Interner, key: &impl Names, buf: &mut String) -> Arc<Profile> {
        let hash = hash_of(key);
        if let Some((_, p)) = self.table.find(hash, |(h, p)| *h == hash && same(p, key)) {
            return Arc::clone(p);
        }
        if self.table.len() >= self.sweep_at {
            self.table.retain(|(_, p)| Arc::strong_count(p) > 1);
            self.sweep_at = (self.table.len() * 2).max(SWEEP_MIN);
        }
        let tags = key
            .tags()
            .map(|(k, v)| {
                buf.clear();
                buf.push_str(k);
                buf.push('=');
                buf.push_str(v);
                JobTag {
                    key: names.intern(k),
                    value: names.intern(v),
                    ledger: names.intern(buf),
                    slot: Slot::default(),
                }
            })
            .collect();
        let profile = Arc::new(Profile {
            project: names.intern(key.project()),
            user: names.intern(key.user()),
            queue: key.queue().map(|q| names.intern(q)),
            stage: key.stage().map(|s| names.intern(s)),
            gpu_type: key.gpu_type().map(|g| names.intern(g)),
            tags,
            project_slot: Slot::default(),
            user_slot: Slot::default(),
        });
        self.table.insert_unique(hash, (hash, Arc::clone(&profile)), |(h, _)| *h);
        profile
    }

    /// How many profiles are stored (some may be held by no job until the next sweep).
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// True when none is stored.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(project: &str, user: &str, tags: &[(&str, &str)]) -> JobSpec {
        JobSpec {
            id: "j".into(),
            project: project.into(),
            user: user.into(),
            gpus: 1.into(),
            tags: tags.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            ..JobSpec::default()
        }
    }

    #[test]
    fn the_same_names_share_one_profile() {
        let (mut names, mut profiles, mut buf) = (Interner::default(), Profiles::default(), String::new());
        let a = profiles.intern(&mut names, &spec("nlp", "ada", &[("team", "x")]), &mut buf);
        let b = profiles.intern(&mut names, &spec("nlp", "ada", &[("team", "x")]), &mut buf);
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(profiles.len(), 1);
        assert_eq!(&*a.tags[0].ledger, "team=x");
        // Re-interning a profile finds itself.
        let c = profiles.intern(&mut names, &*a, &mut buf);
        assert!(Arc::ptr_eq(&a, &c));
    }

    #[test]
    fn any_difference_is_another_profile() {
        let (mut names, mut profiles, mut buf) = (Interner::default(), Profiles::default(), String::new());
        let base = profiles.intern(&mut names, &spec("nlp", "ada", &[("team", "x")]), &mut buf);
        let mut queue = spec("nlp", "ada", &[("team", "x")]);
        queue.queue = Some("short".into());
        let others = [
            spec("nlpx", "ada", &[("team", "x")]),
            spec("nlp", "bob", &[("team", "x")]),
            spec("nlp", "ada", &[]),
            spec("nlp", "ada", &[("team", "y")]),
            spec("nlp", "ada", &[("team", "x"), ("a", "b")]),
            // The same strings split differently across the fields.
            spec("nl", "pada", &[("team", "x")]),
            queue,
        ];
        for o in &others {
            let p = profiles.intern(&mut names, o, &mut buf);
            assert!(!Arc::ptr_eq(&base, &p), "{o:?}");
            assert!(same(&p, o));
        }
        assert_eq!(profiles.len(), 1 + others.len());
    }

    #[test]
    fn profiles_no_job_holds_are_swept() {
        let (mut names, mut profiles, mut buf) = (Interner::default(), Profiles::default(), String::new());
        let kept = profiles.intern(&mut names, &spec("kept", "u", &[]), &mut buf);
        for i in 0..10 * SWEEP_MIN {
            drop(profiles.intern(&mut names, &spec(&format!("p{i}"), "u", &[]), &mut buf));
        }
        assert!(profiles.len() <= 2 * SWEEP_MIN, "{} profiles stored", profiles.len());
        let again = profiles.intern(&mut names, &spec("kept", "u", &[]), &mut buf);
        assert!(Arc::ptr_eq(&kept, &again), "a profile still held is never swept");
    }
}
