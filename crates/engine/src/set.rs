//! A policy set: the compiled policies in force, immutable, swapped whole on reload.

use std::sync::Arc;

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use crate::policy::Policy;

/// A file a policy set was loaded from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceFile {
    /// Path as given to the loader.
    pub path: String,
    /// SHA-256 of its content, hex.
    pub digest: String,
}

/// Why policies cannot form a set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetError {
    /// Two policies share an id.
    #[error("policy id `{id}` is defined twice: in {first} and in {second}")]
    DuplicateId {
        /// The id.
        id: String,
        /// Where it was first defined.
        first: String,
        /// Where it was defined again.
        second: String,
    },
}

/// The policies in force, indexed by the event types they want.
#[derive(Debug, Default)]
pub struct PolicySet {
    policies: Vec<Arc<dyn Policy>>,
    by_type: [Vec<usize>; 10],
    by_id: FxHashMap<Arc<str>, usize>,
    files: Vec<SourceFile>,
    digest: String,
}

impl PolicySet {
    /// Builds a set. `digest` identifies the set (the loader hashes the files); `files` lists them.
    pub fn new(policies: Vec<Arc<dyn Policy>>, files: Vec<SourceFile>, digest: String) -> Result<PolicySet, SetError> {
        let mut by_id: FxHashMap<Arc<str>, usize> = FxHashMap::default();
        let mut by_type: [Vec<usize>; 10] = Default::default();
        for (i, p) in policies.iter().enumerate() {
            let meta = p.meta();
            if let Some(&j) = by_id.get(&meta.id) {
                return Err(SetError::DuplicateId {
                    id: meta.id.to_string(),
                    first: policies[j].meta().source.clone(),
                    second: meta.source.clone(),
                });
            }
            by_id.insert(meta.id.clone(), i);
            for (t, list) in by_type.iter_mut().enumerate() {
                if meta.events.0 & (1 << t) != 0 {
                    list.push(i);
                }
            }
        }
        Ok(PolicySet { policies, by_type, by_id, files, digest })
    }

    /// An empty set.
    pub fn empty() -> PolicySet {
        PolicySet::default()
    }

    /// All policies, in load order.
    pub fn policies(&self) -> &[Arc<dyn Policy>] {
        &self.policies
    }

    /// Indices of the policies that want event type `index` (see [`crate::EventMask::index`]).
    pub fn for_type(&self, index: usize) -> &[usize] {
        self.by_type.get(index).map_or(&[], Vec::as_slice)
    }

    /// The policy with id `id`.
    pub fn get(&self, id: &str) -> Option<&Arc<dyn Policy>> {
        self.by_id.get(id).and_then(|&i| self.policies.get(i))
    }

    /// The files the set came from.
    pub fn files(&self) -> &[SourceFile] {
        &self.files
    }

    /// The set's digest.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// Number of policies.
    pub fn len(&self) -> usize {
        self.policies.len()
    }

    /// True when the set has no policy.
    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }
}
