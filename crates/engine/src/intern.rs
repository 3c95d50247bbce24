//! String interning for the names that repeat across millions of jobs (projects, users, queues,
//! stages, GPU types, tag pairs): each distinct name is stored once and shared, so a job record holds
//! one pointer per name rather than a copy.
//!
//! A [`Sym`] is a *thin* pointer (8 bytes, and `Option<Sym>` too) to a shared `Arc<str>`, where an
//! `Arc<str>` itself would be a 16-byte fat pointer; [`Sym::to_arc`] hands out the inner `Arc<str>`
//! without copying, which is how a decision names its project. A job record holds five names and a tag list, so the
//! difference is 40 bytes per tracked job (see `docs/performance.md`, memory per job); the price is one
//! more indirection when a name is read, paid only by policies that compare names.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use rustc_hash::FxHashSet;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A shared, interned name; derefs to `str`. Equality, ordering and hashing are those of the string.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Sym(Arc<Arc<str>>);

impl Sym {
    /// A name that is not interned (for tests and one-off values).
    pub fn new(s: &str) -> Sym {
        Sym(Arc::new(Arc::from(s)))
    }

    /// The name as an `Arc<str>`, shared, not copied.
    pub fn to_arc(&self) -> Arc<str> {
        Arc::clone(&self.0)
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `a` and `b` are the same interned name (one pointer compare; two names interned by
    /// different interners are never the same, even when equal).
    pub fn ptr_eq(a: &Sym, b: &Sym) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }
}

impl Deref for Sym {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Sym {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Sym {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Sym {
    fn from(s: &str) -> Sym {
        Sym::new(s)
    }
}

impl PartialEq<str> for Sym {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Sym {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl fmt::Debug for Sym {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Sym {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Sym {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Sym {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Sym, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Ok(Sym::new(&s))
    }
}

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
        let sym = Sym::new(s);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_one_pointer_wide() {
        assert_eq!(size_of::<Sym>(), size_of::<usize>());
        assert_eq!(size_of::<Option<Sym>>(), size_of::<usize>());
    }

    #[test]
    fn interning_shares_and_compares_as_the_string() {
        let mut names = Interner::default();
        let a = names.intern("nlp");
        let b = names.intern("nlp");
        assert!(Arc::ptr_eq(&a.0, &b.0));
        assert_eq!(names.len(), 1);
        assert_eq!(a, Sym::new("nlp"));
        assert_eq!(&*a, "nlp");
        let set: FxHashSet<Sym> = [a].into_iter().collect();
        assert!(set.contains("nlp"), "hashes like the string, so a &str finds it");
    }

    #[test]
    fn serializes_as_a_string() {
        let s = Sym::new("vision");
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(json, "\"vision\"");
        let back: Sym = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
    }
}
