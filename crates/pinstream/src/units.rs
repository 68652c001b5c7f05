//! Sizes as users type them (`10GiB`, `256MiB`, `1G`, `4096`) and as reports print them.

use std::fmt;

/// A size that could not be parsed, with the forms that are accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid size `{input}`: {why}; write a whole number of bytes or a number with a unit, e.g. 4096, 256MiB, 10GiB, 1G (K/M/G/T and KiB/MiB/GiB/TiB are powers of 1024; KB/MB/GB/TB are powers of 1000)")]
pub struct SizeError {
    /// What the user typed.
    pub input: String,
    /// What is wrong with it.
    pub why: &'static str,
}

fn unit_factor(unit: &str) -> Option<u64> {
    Some(match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return None,
    })
}

/// Parses a byte size; fractions are allowed with a unit (`1.5GiB`). Zero is allowed here:
/// callers that need a positive size say so themselves.
pub fn parse_size(input: &str) -> Result<u64, SizeError> {
    let err = |why| SizeError {
        input: input.to_string(),
        why,
    };
    let s = input.trim().replace('_', "");
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    if num.is_empty() {
        return Err(err("no number"));
    }
    let factor = unit_factor(unit.trim()).ok_or_else(|| err("unknown unit"))?;
    let bytes = exact_bytes(num, factor).map_err(err)?;
    u64::try_from(bytes).map_err(|_| err("too large"))
}

/// `num` (digits with at most one `.`) times `factor`, exactly: the whole part and the
/// fraction are taken as integers, never through a float, so a fraction that is not a whole
/// number of bytes is refused however many digits it has, and nothing rounds into range.
fn exact_bytes(num: &str, factor: u64) -> Result<u128, &'static str> {
    let (whole, frac) = num.split_once('.').unwrap_or((num, ""));
    if frac.contains('.') || (whole.is_empty() && frac.is_empty()) {
        return Err("not a number");
    }
    let frac = frac.trim_end_matches('0');
    let whole: u128 = match whole {
        "" => 0,
        w => w.parse::<u64>().map_err(|_| "too large")?.into(),
    };
    let whole = whole * u128::from(factor);
    if frac.is_empty() {
        return Ok(whole);
    }
    // frac / 10^k * factor is whole when 2^k and 5^k divide frac * factor. Every factor is
    // 2^a * 5^b (1024^n or 1000^n), so frac must hold the twos and fives the factor lacks;
    // what is left of them, and of the factor, multiplies out. A fraction whose last digit is
    // not 0 is not a multiple of 10, so k digits need k twos or k fives from the factor, at
    // most 40 (1024^4): 38 digits fit a u128, and longer ones are refused as such.
    let k = frac.len() as u32;
    let digits: u128 = match k {
        0..=38 => frac.parse().map_err(|_| "not a number")?,
        _ => return Err("more than 38 digits after the point"),
    };
    let (a, b) = (factor.trailing_zeros(), fives(factor));
    let (need2, need5) = (k.saturating_sub(a), k.saturating_sub(b));
    let divisor = 2u128.pow(need2) * 5u128.pow(need5);
    if !digits.is_multiple_of(divisor) {
        return Err("not a whole number of bytes");
    }
    let rest = (digits / divisor) * 2u128.pow(a + need2 - k) * 5u128.pow(b + need5 - k);
    Ok(whole + rest)
}

/// How many times 5 divides `n` (n > 0).
fn fives(mut n: u64) -> u32 {
    let mut k = 0;
    while n.is_multiple_of(5) {
        n /= 5;
        k += 1;
    }
    k
}

/// Bytes printed with a binary unit: `10.0 GiB`, `256 MiB`, `512 B`.
#[derive(Debug, Clone, Copy)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"];
        let mut v = self.0 as f64;
        let mut i = 0;
        while v >= 1024.0 && i + 1 < units.len() {
            v /= 1024.0;
            i += 1;
        }
        if i == 0 || v.fract() == 0.0 {
            write!(f, "{v:.0} {}", units[i])
        } else {
            write!(f, "{v:.1} {}", units[i])
        }
    }
}

/// Bytes over seconds in GB/s (10^9 bytes per second, as bandwidthTest reports).
pub fn gb_per_s(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 / seconds / 1e9
    } else {
        0.0
    }
}

/// The median of `values` (mean of the middle two for an even count; 0 when empty).
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// A reproducible pseudo-random value for element `i` of a data set drawn with `seed`
/// (SplitMix64), so inputs can be regenerated for checking without keeping a copy.
pub fn value(seed: u64, i: u64) -> u64 {
    let mut z = seed.wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepted_forms() {
        assert_eq!(parse_size("10GiB").unwrap(), 10 << 30);
        assert_eq!(parse_size("256MiB").unwrap(), 256 << 20);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("2GB").unwrap(), 2_000_000_000);
        assert_eq!(parse_size("1.5KiB").unwrap(), 1536);
        assert_eq!(parse_size(" 8 mib ").unwrap(), 8 << 20);
    }

    #[test]
    fn rejected_forms() {
        for bad in [
            "",
            "GiB",
            "ten",
            "10XB",
            "1.2.3G",
            "0.5",
            "99999999999999999999T",
            "-1",
        ] {
            assert!(parse_size(bad).is_err(), "{bad} parsed");
        }
        assert!(parse_size("1x").unwrap_err().to_string().contains("256MiB"));
    }

    #[test]
    fn fractions_are_taken_exactly_not_through_a_float() {
        // A float rounded these to whole numbers of bytes (1000 and 2^54), or into range.
        for bad in [
            "1.00000000000000001KB",
            "16383.99999999999999999TiB",
            "0.3B",
        ] {
            let e = parse_size(bad).unwrap_err();
            assert_eq!(e.why, "not a whole number of bytes", "{bad}");
        }
        assert_eq!(parse_size("18446744073709551615").unwrap(), u64::MAX);
        assert_eq!(
            parse_size("16777215.999999999999TiB").unwrap_err().why,
            "not a whole number of bytes"
        );
        assert_eq!(parse_size("16777216TiB").unwrap_err().why, "too large");
        assert_eq!(parse_size("0.5KiB").unwrap(), 512);
        assert_eq!(parse_size(".5KiB").unwrap(), 512);
        assert_eq!(parse_size("1.250GB").unwrap(), 1_250_000_000);
        assert_eq!(parse_size("1.5.2GiB").unwrap_err().why, "not a number");
        // Exact binary fractions of many digits: 1 MiB + 1 byte, and 2^-40 TiB = 1 byte.
        assert_eq!(parse_size("1.00000095367431640625MiB").unwrap(), 1_048_577);
        assert_eq!(
            parse_size("0.0000000000009094947017729282379150390625TiB")
                .unwrap_err()
                .why,
            "more than 38 digits after the point"
        );
        assert_eq!(
            parse_size("0.000000000931322574615478515625GiB").unwrap(),
            1
        );
        assert_eq!(parse_size("0.001KB").unwrap(), 1);
        assert_eq!(
            parse_size("0.0001KB").unwrap_err().why,
            "not a whole number of bytes"
        );
        assert_eq!(parse_size(".").unwrap_err().why, "not a number");
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }

    #[test]
    fn display() {
        assert_eq!(Bytes(10 << 30).to_string(), "10 GiB");
        assert_eq!(Bytes(1536).to_string(), "1.5 KiB");
        assert_eq!(Bytes(12).to_string(), "12 B");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn round_trips(n in 0u64..(1 << 50), unit in prop::sample::select(vec!["", "KiB", "MiB", "GiB", "K", "M", "G"])) {
            let f = unit_factor(unit).unwrap();
            let n = n / f;
            prop_assert_eq!(parse_size(&format!("{n}{unit}")).unwrap(), n * f);
        }

        #[test]
        fn never_panics(s in "\\PC{0,12}") {
            let _ = parse_size(&s);
        }
    }
}
