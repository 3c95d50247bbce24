//! Canonical row content and the hash chain over it.
//!
//! Each chained row's hash is `SHA-256(previous hash ‖ canonical content)`, the content being the
//! row's columns (its sequence number first) in schema order, each written as a type tag and its bytes:
//! `0` NULL; `1` integer, 8 bytes big-endian; `2` real, the 8 bytes of its IEEE-754 bits; `3` text and
//! `4` blob, an 8-byte length then the bytes. The writer feeds the values it inserts; `verify` feeds
//! the values SQLite returns, so any edit of any column, a removed row or rows swapped changes a hash.
//! The first row of a chain starts from 32 zero bytes (or from a prune checkpoint's hash).

use rusqlite::types::ValueRef;
use sha2::{Digest, Sha256};

/// A chain hash.
pub type Hash = [u8; 32];

/// The hash a chain starts from.
pub const GENESIS: Hash = [0u8; 32];

/// Feeds canonical values into a hash that continues a chain.
#[derive(Debug, Clone)]
pub struct Canon {
    h: Sha256,
}

impl Canon {
    /// Starts the hash of the row that follows the row whose hash is `prev`.
    pub fn after(prev: &Hash) -> Canon {
        let mut h = Sha256::new();
        h.update(prev);
        Canon { h }
    }

    /// A NULL.
    pub fn null(&mut self) -> &mut Self {
        self.h.update([0u8]);
        self
    }

    /// An integer.
    pub fn int(&mut self, v: i64) -> &mut Self {
        self.h.update([1u8]);
        self.h.update(v.to_be_bytes());
        self
    }

    /// A real.
    pub fn real(&mut self, v: f64) -> &mut Self {
        self.h.update([2u8]);
        self.h.update(v.to_bits().to_be_bytes());
        self
    }

    /// A text.
    pub fn text(&mut self, v: &str) -> &mut Self {
        self.bytes(3, v.as_bytes())
    }

    /// A blob.
    pub fn blob(&mut self, v: &[u8]) -> &mut Self {
        self.bytes(4, v)
    }

    fn bytes(&mut self, tag: u8, v: &[u8]) -> &mut Self {
        self.h.update([tag]);
        self.h.update((v.len() as u64).to_be_bytes());
        self.h.update(v);
        self
    }

    /// An optional integer (NULL when absent).
    pub fn opt_int(&mut self, v: Option<i64>) -> &mut Self {
        match v {
            Some(v) => self.int(v),
            None => self.null(),
        }
    }

    /// An optional real.
    pub fn opt_real(&mut self, v: Option<f64>) -> &mut Self {
        match v {
            Some(v) => self.real(v),
            None => self.null(),
        }
    }

    /// An optional text.
    pub fn opt_text(&mut self, v: Option<&str>) -> &mut Self {
        match v {
            Some(v) => self.text(v),
            None => self.null(),
        }
    }

    /// A value as SQLite returned it.
    pub fn value(&mut self, v: ValueRef<'_>) -> &mut Self {
        match v {
            ValueRef::Null => self.null(),
            ValueRef::Integer(i) => self.int(i),
            ValueRef::Real(r) => self.real(r),
            ValueRef::Text(t) => self.bytes(3, t),
            ValueRef::Blob(b) => self.blob(b),
        }
    }

    /// The row's hash.
    pub fn finish(self) -> Hash {
        let out = self.h.finalize();
        let mut h = GENESIS;
        h.copy_from_slice(&out);
        h
    }
}

/// Lower-case hex of a hash.
pub fn hex(h: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(h.len() * 2);
    for b in h {
        let _ = write!(s, "{b:02x}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_values_do_not_collide() {
        // "1" as text, 1 as integer and 1.0 as real must hash differently, and so must a NULL and "".
        let h = |f: &dyn Fn(&mut Canon)| {
            let mut c = Canon::after(&GENESIS);
            f(&mut c);
            c.finish()
        };
        let all = [
            h(&|c| {
                c.text("1");
            }),
            h(&|c| {
                c.int(1);
            }),
            h(&|c| {
                c.real(1.0);
            }),
            h(&|c| {
                c.null();
            }),
            h(&|c| {
                c.text("");
            }),
            h(&|c| {
                c.text("ab").text("c");
            }),
            h(&|c| {
                c.text("a").text("bc");
            }),
        ];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn value_ref_matches_typed_feed() {
        let mut a = Canon::after(&GENESIS);
        a.int(7).real(0.5).text("x").null().blob(b"\x01");
        let mut b = Canon::after(&GENESIS);
        b.value(ValueRef::Integer(7))
            .value(ValueRef::Real(0.5))
            .value(ValueRef::Text(b"x"))
            .value(ValueRef::Null)
            .value(ValueRef::Blob(b"\x01"));
        assert_eq!(a.finish(), b.finish());
        assert_eq!(hex(&[0xab, 0x01]), "ab01");
    }
}
