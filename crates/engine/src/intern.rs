//! String interning for the names that repeat across millions of jobs (projects, users, queues,
//! stages, GPU types, tag pairs): each distinct name is stored once and shared as an `Arc<str>`, so a
//! job record holds pointers rather than copies.

use std::sync::Arc;

use rustc_hash::FxHashSet;

/// A shared, interned name.
pub type Sym = Arc<str>;

/// The set of interned names. Names are never freed: their number is bounded by the distinct projects,
/// users, queues and tags a pool has, not by the number of jobs.
#[derive(Debug, Default, Clone)]
pub struct Interner {
    names: FxHashSet<Sym>,
}

impl Interner {
    /// The shared copy of `s`, created on first use.
    pub fn intern(&mut self, s: &str) -> Sym {
        if let Some(found) = self.names.get(s) {
            return found.clone();
        }
        let sym: Sym = Arc::from(s);
        self.names.insert(sym.clone());
        sym
    }

    /// How many distinct names are stored.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// True when nothing is interned.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}
