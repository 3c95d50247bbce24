//! GPU counts exact to a slice: whole GPUs, and MIG slices counted as their share of a GPU.
//!
//! A [`Gpus`] is a whole number of 840ths of a GPU. 840 is the least common multiple of 1 to 8, so
//! every share a GPU is cut into — sevenths of an A100, H100, H200 or B200 (seven compute slices),
//! quarters of an A30, halves, thirds, fifths, tenths of a site's own table — is exact: caps compare
//! integers and two slices of `1/7` add up to exactly `2/7`, never to 0.2857….
//!
//! On the wire (v1.x) a count is what it always was, a JSON integer, when it is whole; a count with a
//! fraction is a string: `"2/7"`, `"1/4"`, `"0.5"`. A decoder also takes a JSON number with a fraction
//! when it is within a millionth of a share of 840 (`0.5`, `0.25`); `0.2857` is refused with the
//! fraction to send instead. Old integer producers are unaffected.
//!
//! [`mig_share`] reads a MIG profile (`1g.10gb`, `nvidia.com/mig-3g.40gb`, Slurm's `a100_1g.10gb`) as
//! its compute slices over the GPU's: seven, or four for the A30's profiles (`1g.6gb`, `2g.12gb`,
//! `4g.24gb`, the only ones with 6 GB per compute slice).

use std::fmt;
use std::ops::{Add, AddAssign};

use serde::{Deserialize, Deserializer, Serialize, Serializer, de};

/// A GPU count, in 840ths of a GPU. See the [module documentation](self).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Gpus(u64);

/// Why a GPU count could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GpusError {
    /// Not a count at all.
    #[error("`{0}` is not a GPU count (a whole number, or a share such as \"2/7\" or \"0.5\")")]
    Unreadable(String),
    /// A share bursar cannot count exactly.
    #[error(
        "`{0}` is not a whole number of 840ths of a GPU; send the share as a fraction whose denominator divides 840 (e.g. \"1/7\")"
    )]
    Inexact(String),
    /// Above [`crate::limits::GPUS`].
    #[error("`{0}` GPUs is above the largest value bursar accepts ({max})", max = crate::limits::GPUS)]
    TooLarge(String),
}

impl Gpus {
    /// Parts of a GPU a count is made of.
    pub const PARTS: u64 = 840;
    /// No GPU.
    pub const ZERO: Gpus = Gpus(0);

    /// `n` whole GPUs.
    #[inline]
    pub const fn whole(n: u32) -> Gpus {
        Gpus(n as u64 * Self::PARTS)
    }

    /// A count of `parts` 840ths.
    #[inline]
    pub const fn from_parts(parts: u64) -> Gpus {
        Gpus(parts)
    }

    /// `num / den` of a GPU, when it is a whole number of 840ths.
    pub fn fraction(num: u64, den: u64) -> Option<Gpus> {
        if den == 0 {
            return None;
        }
        let parts = num.checked_mul(Self::PARTS)?;
        (parts % den == 0).then_some(Gpus(parts / den))
    }

    /// The count in 840ths.
    #[inline]
    pub const fn parts(self) -> u64 {
        self.0
    }

    /// True for no GPU.
    #[inline]
    pub const fn is_zero(self) -> bool {
        self.0 == 0
    }

    /// True when the count has no fraction.
    #[inline]
    pub const fn is_whole(self) -> bool {
        self.0.is_multiple_of(Self::PARTS)
    }

    /// The whole GPUs the count occupies: a slice occupies (part of) one GPU. Saturates at `u32::MAX`.
    #[inline]
    pub fn ceil(self) -> u32 {
        u32::try_from(self.0.div_ceil(Self::PARTS)).unwrap_or(u32::MAX)
    }

    /// The whole GPUs in the count, rounded down.
    #[inline]
    pub fn floor(self) -> u32 {
        u32::try_from(self.0 / Self::PARTS).unwrap_or(u32::MAX)
    }

    /// The count as a number of GPUs (for GPU-hours and display; compare counts as [`Gpus`]).
    #[inline]
    pub fn as_f64(self) -> f64 {
        self.0 as f64 / Self::PARTS as f64
    }

    /// The count in 840ths as a signed number, for differences.
    #[inline]
    pub fn signed(self) -> i64 {
        i64::try_from(self.0).unwrap_or(i64::MAX)
    }

    /// The count of `parts` 840ths given as a signed number, negative taken as zero.
    #[inline]
    pub fn from_signed(parts: i64) -> Gpus {
        Gpus(u64::try_from(parts).unwrap_or(0))
    }

    /// `self + other`, at most `u64::MAX` parts.
    #[inline]
    pub const fn saturating_add(self, other: Gpus) -> Gpus {
        Gpus(self.0.saturating_add(other.0))
    }

    /// `self - other`, at least zero.
    #[inline]
    pub const fn saturating_sub(self, other: Gpus) -> Gpus {
        Gpus(self.0.saturating_sub(other.0))
    }

    /// `self × n` (e.g. per task × tasks).
    #[inline]
    pub const fn saturating_mul(self, n: u32) -> Gpus {
        Gpus(self.0.saturating_mul(n as u64))
    }

    /// `self + delta` parts, clamped to zero.
    #[inline]
    pub fn offset(self, delta: i64) -> Gpus {
        Gpus::from_signed(self.signed().saturating_add(delta))
    }

    /// The count as `(numerator, denominator)` in lowest terms.
    pub fn reduced(self) -> (u64, u64) {
        let g = gcd(self.0, Self::PARTS);
        (self.0 / g, Self::PARTS / g)
    }

    /// Reads a count as people and producers write it: `3`, `2/7`, `0.5`, `1.25`.
    pub fn parse(text: &str) -> Result<Gpus, GpusError> {
        let t = text.trim();
        let unreadable = || GpusError::Unreadable(text.to_owned());
        let digits = |s: &str| !s.is_empty() && s.len() <= 19 && s.bytes().all(|b| b.is_ascii_digit());
        let g = if let Some((n, d)) = t.split_once('/') {
            let (n, d) = (n.trim(), d.trim());
            if !digits(n) || !digits(d) {
                return Err(unreadable());
            }
            let (n, d): (u64, u64) = (n.parse().map_err(|_| unreadable())?, d.parse().map_err(|_| unreadable())?);
            if d == 0 {
                return Err(unreadable());
            }
            Gpus::fraction(n, d).ok_or_else(|| GpusError::Inexact(text.to_owned()))?
        } else if let Some((w, f)) = t.split_once('.') {
            if !digits(w) || !(f.is_empty() || digits(f)) || f.len() > 12 {
                return Err(unreadable());
            }
            let whole: u64 = w.parse().map_err(|_| unreadable())?;
            let frac: u64 = if f.is_empty() { 0 } else { f.parse().map_err(|_| unreadable())? };
            let den = 10u64.pow(f.len() as u32);
            let part = Gpus::fraction(frac, den).ok_or_else(|| GpusError::Inexact(text.to_owned()))?;
            Gpus(whole.checked_mul(Self::PARTS).ok_or_else(|| GpusError::TooLarge(text.to_owned()))? + part.0)
        } else {
            if !digits(t) {
                return Err(unreadable());
            }
            Gpus(
                t.parse::<u64>()
                    .map_err(|_| unreadable())?
                    .checked_mul(Self::PARTS)
                    .ok_or_else(|| GpusError::TooLarge(text.to_owned()))?,
            )
        };
        g.bounded(text)
    }

    /// A JSON number as a count: exact when within a millionth of a part of a whole number of parts.
    pub fn from_f64(v: f64) -> Result<Gpus, GpusError> {
        if !v.is_finite() || v < 0.0 {
            return Err(GpusError::Unreadable(v.to_string()));
        }
        let parts = v * Self::PARTS as f64;
        let rounded = parts.round();
        if (parts - rounded).abs() > 1e-6 {
            return Err(GpusError::Inexact(v.to_string()));
        }
        if rounded > (crate::limits::GPUS as u64 * Self::PARTS) as f64 {
            return Err(GpusError::TooLarge(v.to_string()));
        }
        Ok(Gpus(rounded as u64))
    }

    fn bounded(self, text: &str) -> Result<Gpus, GpusError> {
        if self > Gpus::whole(crate::limits::GPUS) {
            return Err(GpusError::TooLarge(text.to_owned()));
        }
        Ok(self)
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

impl From<u32> for Gpus {
    fn from(n: u32) -> Gpus {
        Gpus::whole(n)
    }
}

impl Add for Gpus {
    type Output = Gpus;
    fn add(self, other: Gpus) -> Gpus {
        self.saturating_add(other)
    }
}

impl AddAssign for Gpus {
    fn add_assign(&mut self, other: Gpus) {
        *self = self.saturating_add(other);
    }
}

impl std::iter::Sum for Gpus {
    fn sum<I: Iterator<Item = Gpus>>(iter: I) -> Gpus {
        iter.fold(Gpus::ZERO, Gpus::saturating_add)
    }
}

/// `3`, or a share in lowest terms: `2/7`, `10/7`. A width pads it as text (`{:>6}` in a table).
impl fmt::Display for Gpus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (n, d) = self.reduced();
        match (d, f.width()) {
            (1, None) => write!(f, "{n}"),
            (_, None) => write!(f, "{n}/{d}"),
            (1, Some(_)) => f.pad(&n.to_string()),
            (_, Some(_)) => f.pad(&format!("{n}/{d}")),
        }
    }
}

impl fmt::Debug for Gpus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gpus({self})")
    }
}

impl PartialEq<u32> for Gpus {
    fn eq(&self, other: &u32) -> bool {
        *self == Gpus::whole(*other)
    }
}

impl PartialOrd<u32> for Gpus {
    fn partial_cmp(&self, other: &u32) -> Option<std::cmp::Ordering> {
        Some(self.cmp(&Gpus::whole(*other)))
    }
}

/// A JSON integer when whole (as v1 wrote every count), else the share as a string, `"2/7"`.
impl Serialize for Gpus {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.is_whole() { s.serialize_u64(self.0 / Self::PARTS) } else { s.collect_str(self) }
    }
}

impl<'de> Deserialize<'de> for Gpus {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Gpus, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = Gpus;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a GPU count: a whole number, or a share such as \"2/7\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Gpus, E> {
                if v > u64::from(crate::limits::GPUS) {
                    return Err(E::custom(GpusError::TooLarge(v.to_string())));
                }
                Ok(Gpus(v * Gpus::PARTS))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Gpus, E> {
                u64::try_from(v)
                    .map_err(|_| E::custom(GpusError::Unreadable(v.to_string())))
                    .and_then(|v| self.visit_u64(v))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Gpus, E> {
                Gpus::from_f64(v).map_err(E::custom)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Gpus, E> {
                Gpus::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// The share of a GPU a MIG profile is: its compute slices over the GPU's seven (A100, H100, H200,
/// B200), or four for the A30's profiles. Finds the profile anywhere in `name` — `1g.10gb`,
/// `nvidia.com/mig-3g.40gb`, `a100_1g.10gb`, `1g.10gb+me` — and gives `None` when it holds none.
pub fn mig_share(name: &str) -> Option<Gpus> {
    let (slices, mem) = mig_profile(name)?;
    let of = if mem == slices * 6 { 4 } else { 7 };
    if slices > of {
        return None;
    }
    Gpus::fraction(slices, of)
}

/// The `(compute slices, memory GB)` of the first `<n>g.<m>gb` in `name`.
pub fn mig_profile(name: &str) -> Option<(u64, u64)> {
    let b = name.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() && (i == 0 || !b[i - 1].is_ascii_alphanumeric()) {
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            let rest = &name[i..];
            if let Some(after) = rest.strip_prefix("g.") {
                let m_len = after.bytes().take_while(u8::is_ascii_digit).count();
                if m_len > 0 && after[m_len..].to_ascii_lowercase().starts_with("gb") {
                    let slices: u64 = name[start..i].parse().ok()?;
                    let mem: u64 = after[..m_len].parse().ok()?;
                    if slices > 0 {
                        return Some((slices, mem));
                    }
                }
            }
        } else {
            i += 1;
        }
    }
    None
}

/// GPUs in a Slurm TRES string (`AllocTRES`, `tres-alloc`: `cpu=64,mem=…,gres/gpu=8,gres/gpu:h100=8`);
/// `None` when it names none. `share(type)` is what one unit of a typed entry is to bursar (the
/// Slurm agents pass their site table; [`mig_share`] or a whole GPU without one).
///
/// The untyped `gres/gpu=N` counts every GPU unit the job holds, a MIG slice as one: the units of
/// typed entries that are not whole GPUs (`gres/gpu=3,gres/gpu:1g.10gb=2`, types tracked with
/// `AccountingStorageTRES=gres/gpu:1g.10gb`) count as their share and the rest of the untyped count
/// as whole GPUs (2/7 + 1 here). Without an untyped entry the typed ones are summed. In a pool with
/// MIG slices (`mig_pool`) the answer is `None` when the untyped count holds units no typed entry
/// names: slurmdbd tracking only `gres/gpu` writes two `1g.10gb` as `gres/gpu=2`, which are 2/7 of
/// a GPU, not 2 GPUs.
pub fn slurm_tres_gpus(tres: &str, share: impl Fn(&str) -> Gpus, mig_pool: bool) -> Option<Gpus> {
    let mut untyped: Option<u32> = None;
    let mut typed: Option<Gpus> = None;
    let mut typed_units = 0u32;
    // The units of typed entries that are not whole GPUs, and what they are.
    let (mut part_units, mut parts) = (0u32, Gpus::ZERO);
    for item in tres.split(',') {
        let Some((name, value)) = item.split_once('=') else { continue };
        let Ok(n) = value.trim().parse::<u32>() else { continue };
        if name == "gres/gpu" {
            untyped = Some(n);
        } else if let Some(ty) = name.strip_prefix("gres/gpu:") {
            let one = share(ty);
            let g = one.saturating_mul(n);
            typed = Some(typed.unwrap_or(Gpus::ZERO).saturating_add(g));
            typed_units = typed_units.saturating_add(n);
            if one != Gpus::whole(1) {
                part_units = part_units.saturating_add(n);
                parts = parts.saturating_add(g);
            }
        }
    }
    match untyped {
        Some(n) if mig_pool && typed_units < n => None,
        Some(n) => Some(Gpus::whole(n.saturating_sub(part_units)).saturating_add(parts)),
        None => typed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn shares_are_exact_and_print_in_lowest_terms() {
        let seventh = Gpus::fraction(1, 7).unwrap();
        assert_eq!(seventh + seventh, Gpus::fraction(2, 7).unwrap());
        assert_eq!((seventh.saturating_mul(7)), Gpus::whole(1));
        assert_eq!(seventh.to_string(), "1/7");
        assert_eq!(Gpus::fraction(10, 7).unwrap().to_string(), "10/7");
        assert_eq!(Gpus::whole(8).to_string(), "8");
        assert_eq!(Gpus::fraction(2, 4).unwrap().to_string(), "1/2");
        assert_eq!(
            (format!("[{:>5}]", Gpus::fraction(2, 7).unwrap()), format!("[{:<3}]", Gpus::whole(8))),
            ("[  2/7]".to_owned(), "[8  ]".to_owned()),
            "padded as text"
        );
        assert_eq!(Gpus::fraction(1, 9), None, "ninths are not 840ths");
        assert_eq!(seventh.ceil(), 1);
        assert_eq!(Gpus::fraction(15, 7).unwrap().ceil(), 3);
        assert_eq!(Gpus::fraction(15, 7).unwrap().floor(), 2);
    }

    #[test]
    fn reads_what_producers_send() {
        let ok = |s: &str| Gpus::parse(s).unwrap().to_string();
        assert_eq!(ok("3"), "3");
        assert_eq!(ok("2/7"), "2/7");
        assert_eq!(ok(" 14/7 "), "2");
        assert_eq!(ok("0.5"), "1/2");
        assert_eq!(ok("1.25"), "5/4");
        assert_eq!(ok("2."), "2");
        assert!(matches!(Gpus::parse("0.2857"), Err(GpusError::Inexact(_))));
        assert!(matches!(Gpus::parse("1/9"), Err(GpusError::Inexact(_))));
        for bad in ["", "x", "-1", "1/0", "1/", "/2", "1e3", "½", "1.2.3", "+1"] {
            assert!(matches!(Gpus::parse(bad), Err(GpusError::Unreadable(_))), "{bad}");
        }
        assert!(matches!(Gpus::parse("1000001"), Err(GpusError::TooLarge(_))));
        assert!(Gpus::parse("99999999999999999999").is_err());
    }

    #[test]
    fn json_is_an_integer_when_whole_and_a_string_otherwise() {
        assert_eq!(serde_json::to_string(&Gpus::whole(8)).unwrap(), "8");
        assert_eq!(serde_json::to_string(&Gpus::fraction(2, 7).unwrap()).unwrap(), r#""2/7""#);
        let back: Gpus = serde_json::from_str(r#""2/7""#).unwrap();
        assert_eq!(back, Gpus::fraction(2, 7).unwrap());
        let half: Gpus = serde_json::from_str("0.5").unwrap();
        assert_eq!(half, Gpus::fraction(1, 2).unwrap());
        assert!(serde_json::from_str::<Gpus>("0.2857").unwrap_err().to_string().contains("840ths"));
        assert!(serde_json::from_str::<Gpus>("-1").is_err());
        assert!(serde_json::from_str::<Gpus>("4000000000").is_err());
    }

    #[test]
    fn mig_profiles_are_their_compute_slices() {
        let s = |n| mig_share(n).map(|g| g.to_string());
        assert_eq!(s("1g.10gb").as_deref(), Some("1/7"), "A100 80 GB");
        assert_eq!(s("nvidia.com/mig-3g.40gb").as_deref(), Some("3/7"));
        assert_eq!(s("a100_1g.10gb").as_deref(), Some("1/7"), "Slurm's AutoDetect=nvml type");
        assert_eq!(s("1g.20gb").as_deref(), Some("1/7"), "one compute slice, two memory slices");
        assert_eq!(s("1g.5gb+me").as_deref(), Some("1/7"));
        assert_eq!(s("7g.80gb").as_deref(), Some("1"));
        assert_eq!(s("1g.6gb").as_deref(), Some("1/4"), "A30");
        assert_eq!(s("2g.12gb").as_deref(), Some("1/2"), "A30");
        assert_eq!(s("4g.24gb").as_deref(), Some("1"), "A30's whole GPU");
        assert_eq!(s("2g.24gb").as_deref(), Some("2/7"), "H100 94 GB");
        assert_eq!(s("h100"), None);
        assert_eq!(s("nvidia.com/gpu"), None);
        assert_eq!(s("9g.90gb"), None, "more slices than a GPU has");
        assert_eq!(s("x1g.10gb"), None, "not at a word's start");
    }

    proptest! {
        #[test]
        fn display_round_trips(parts in 0u64..(crate::limits::GPUS as u64 * Gpus::PARTS)) {
            let g = Gpus::from_parts(parts);
            prop_assert_eq!(Gpus::parse(&g.to_string()).unwrap(), g);
            let json = serde_json::to_string(&g).unwrap();
            prop_assert_eq!(serde_json::from_str::<Gpus>(&json).unwrap(), g);
        }

        #[test]
        fn sums_are_exact(a in 0u64..1_000_000, b in 0u64..1_000_000) {
            let (x, y) = (Gpus::from_parts(a), Gpus::from_parts(b));
            prop_assert_eq!((x + y).saturating_sub(y), x);
            prop_assert!((x + y).as_f64() - (x.as_f64() + y.as_f64()) < 1e-9);
        }
    }
}
