//! Exact decimals as a bill writes them (FOCUS `NumericFormat`: `-100.2`, `4`, `35.2E-7`), turned into
//! the integer units bursar counts in — money in micro-units (10⁻⁶ of the currency), card-hours in
//! GPU-milliseconds — with one rounding, half to even, at the end. No float ever holds a bill value
//! on the way, so `0.1 + 0.2` card-hours are exactly 1,080,000 GPU-ms.

/// A decimal `mantissa × 10^-scale` (scale may be negative after an exponent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decimal {
    mantissa: i128,
    scale: i32,
}

/// The most significant digits a value may have (more is not a bill's number).
const MAX_DIGITS: usize = 30;

impl Decimal {
    /// Parses `[-]digits[.digits][(E|e)[-]digits]`. No `+`, no thousands separators, no spaces inside.
    pub fn parse(s: &str) -> Option<Decimal> {
        let s = s.trim();
        let (neg, rest) = match s.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, s),
        };
        let (num, exp) = match rest.find(['e', 'E']) {
            Some(i) => (&rest[..i], Some(&rest[i + 1..])),
            None => (rest, None),
        };
        let (int, frac) = match num.split_once('.') {
            Some((a, b)) => (a, b),
            None => (num, ""),
        };
        if (int.is_empty() && frac.is_empty()) || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
            return None;
        }
        let digits = int.trim_start_matches('0').len() + frac.len();
        if digits > MAX_DIGITS {
            return None;
        }
        let mut mantissa: i128 = 0;
        for b in int.bytes().chain(frac.bytes()) {
            mantissa = mantissa.checked_mul(10)?.checked_add(i128::from(b - b'0'))?;
        }
        let mut scale = i32::try_from(frac.len()).ok()?;
        if let Some(e) = exp {
            let (eneg, edigits) = match e.strip_prefix('-') {
                Some(d) => (true, d),
                None => (false, e),
            };
            if edigits.is_empty() || edigits.len() > 3 || !edigits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let n: i32 = edigits.parse().ok()?;
            scale = if eneg { scale.checked_add(n)? } else { scale.checked_sub(n)? };
        }
        Some(Decimal { mantissa: if neg { -mantissa } else { mantissa }, scale })
    }

    /// `round(self × factor × 10^-decimals)`, half to even; `None` when it does not fit an `i64`.
    /// `scaled(1_000_000, 0)` is the value in micro-units; `scaled(3_600_000, 0)` hours in ms.
    pub fn scaled(self, factor: i128, decimals: u32) -> Option<i64> {
        let num = self.mantissa.checked_mul(factor)?;
        // value = num × 10^-(scale + decimals)
        let shift = self.scale.checked_add(i32::try_from(decimals).ok()?)?;
        let v = if shift <= 0 {
            num.checked_mul(10i128.checked_pow(shift.unsigned_abs())?)?
        } else {
            let Some(d) = 10i128.checked_pow(shift.unsigned_abs()) else {
                return Some(0); // far below one unit
            };
            let q = num / d;
            let r = num % d;
            let twice = r.unsigned_abs().saturating_mul(2);
            let half = d.unsigned_abs();
            let up = twice > half || (twice == half && q % 2 != 0);
            if up { q + num.signum() } else { q }
        };
        i64::try_from(v).ok()
    }

    /// A canonical text of the value (`1.50` and `15E-1` both give `15e-1`), for line identities.
    pub fn normalised(self) -> String {
        let (mut m, mut scale) = (self.mantissa, self.scale);
        if m == 0 {
            return "0".into();
        }
        while m % 10 == 0 {
            m /= 10;
            scale -= 1;
        }
        format!("{m}e{}", -scale)
    }

    /// Whether the value is zero.
    pub fn is_zero(self) -> bool {
        self.mantissa == 0
    }
}

/// Micro-units as a decimal text without float noise: `48947.12`, `-0.000001`, `3`.
pub fn micros_text(v: i64) -> String {
    let neg = v < 0;
    let a = v.unsigned_abs();
    let (int, frac) = (a / 1_000_000, a % 1_000_000);
    let mut s = if neg { format!("-{int}") } else { int.to_string() };
    if frac != 0 {
        let f = format!("{frac:06}");
        s.push('.');
        s.push_str(f.trim_end_matches('0'));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn micros(s: &str) -> Option<i64> {
        Decimal::parse(s).and_then(|d| d.scaled(1_000_000, 0))
    }

    #[test]
    fn parses_the_spec_examples_exactly() {
        assert_eq!(micros("-100.2"), Some(-100_200_000));
        assert_eq!(micros("4"), Some(4_000_000));
        assert_eq!(micros("35.2E-7"), Some(4)); // 3.52 micro-units, rounded
        assert_eq!(micros("1.234"), Some(1_234_000));
        assert_eq!(micros("0.0000005"), Some(0), "half to even");
        assert_eq!(micros("0.0000015"), Some(2), "half to even");
        assert_eq!(micros("-0.0000015"), Some(-2));
        assert_eq!(micros("1E3"), Some(1_000_000_000));
        assert_eq!(micros(".5"), Some(500_000));
        for bad in ["", "-", "1 1/2", "35.2E+7", "+3", "1,000", "12a", "1e", "NaN", "inf", "1.2.3"] {
            assert_eq!(Decimal::parse(bad), None, "{bad}");
        }
        assert_eq!(micros("99999999999999999999"), None, "beyond an i64 of micro-units");
    }

    #[test]
    fn hours_become_exact_milliseconds() {
        let ms = |s: &str| Decimal::parse(s).and_then(|d| d.scaled(3_600_000, 0));
        assert_eq!(ms("0.1").zip(ms("0.2")).map(|(a, b)| a + b), ms("0.3"));
        assert_eq!(ms("8"), Some(28_800_000));
        assert_eq!(ms("1e-9"), Some(0));
    }

    #[test]
    fn micro_units_print_as_decimals() {
        assert_eq!(micros_text(48_947_120_000), "48947.12");
        assert_eq!(micros_text(-1), "-0.000001");
        assert_eq!(micros_text(3_000_000), "3");
        assert_eq!(micros_text(0), "0");
    }
}
