//! Element types of streamed data and typed kernel scalars.

use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// The element type of a region or block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// 32-bit float.
    F32,
    /// 16-bit float.
    F16,
    /// 64-bit float.
    F64,
    /// Signed 8-bit.
    I8,
    /// Unsigned 8-bit.
    U8,
    /// Signed 16-bit.
    I16,
    /// Unsigned 16-bit.
    U16,
    /// Signed 32-bit.
    I32,
    /// Unsigned 32-bit.
    U32,
    /// Signed 64-bit.
    I64,
    /// Unsigned 64-bit.
    U64,
}

const ALL: [(DType, &str, &str, usize); 11] = [
    (DType::F32, "f32", "float", 4),
    (DType::F16, "f16", "half", 2),
    (DType::F64, "f64", "double", 8),
    (DType::I8, "i8", "char", 1),
    (DType::U8, "u8", "uchar", 1),
    (DType::I16, "i16", "short", 2),
    (DType::U16, "u16", "ushort", 2),
    (DType::I32, "i32", "int", 4),
    (DType::U32, "u32", "uint", 4),
    (DType::I64, "i64", "long", 8),
    (DType::U64, "u64", "ulong", 8),
];

impl DType {
    fn row(self) -> (DType, &'static str, &'static str, usize) {
        *ALL.iter()
            .find(|r| r.0 == self)
            .expect("every dtype has a row")
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        self.row().3
    }

    /// The name users type, e.g. `f16`.
    pub fn name(self) -> &'static str {
        self.row().1
    }

    /// The OpenCL C type name, e.g. `half`.
    pub fn cl_name(self) -> &'static str {
        self.row().2
    }

    /// The type of an OpenCL C scalar type name (`float`, `uint`, `size_t` as u64, …).
    pub fn from_cl(name: &str) -> Option<DType> {
        let name = name.trim().trim_start_matches("const ").trim();
        let name = match name {
            "size_t" | "unsigned long" => "ulong",
            "unsigned int" => "uint",
            "unsigned char" => "uchar",
            "unsigned short" => "ushort",
            n => n,
        };
        ALL.iter().find(|r| r.2 == name).map(|r| r.0)
    }

    /// True for integer types.
    pub fn is_integer(self) -> bool {
        !matches!(self, DType::F32 | DType::F16 | DType::F64)
    }

    /// Encodes `text` as a value of this type in native byte order.
    pub fn encode(self, text: &str) -> Result<Vec<u8>, String> {
        let t = text.trim();
        let bad = || format!("`{text}` is not a valid {} value", self.cl_name());
        Ok(match self {
            // Checked in f64, then parsed as f32 itself (no double rounding).
            DType::F32 => {
                self.float(text)?;
                t.parse::<f32>().map_err(|_| bad())?.to_ne_bytes().to_vec()
            }
            DType::F64 => self.float(text)?.to_ne_bytes().to_vec(),
            DType::F16 => half::f16::from_f64(self.float(text)?)
                .to_ne_bytes()
                .to_vec(),
            DType::I8 => t.parse::<i8>().map_err(|_| bad())?.to_ne_bytes().to_vec(),
            DType::U8 => t.parse::<u8>().map_err(|_| bad())?.to_ne_bytes().to_vec(),
            DType::I16 => t.parse::<i16>().map_err(|_| bad())?.to_ne_bytes().to_vec(),
            DType::U16 => t.parse::<u16>().map_err(|_| bad())?.to_ne_bytes().to_vec(),
            DType::I32 => t.parse::<i32>().map_err(|_| bad())?.to_ne_bytes().to_vec(),
            DType::U32 => t.parse::<u32>().map_err(|_| bad())?.to_ne_bytes().to_vec(),
            DType::I64 => t.parse::<i64>().map_err(|_| bad())?.to_ne_bytes().to_vec(),
            DType::U64 => t.parse::<u64>().map_err(|_| bad())?.to_ne_bytes().to_vec(),
        })
    }

    /// `text` as a value of this float type, refused where rounding would make it infinite
    /// or zero (`1e40` as a float, `1e-50` as a float).
    fn float(self, text: &str) -> Result<f64, String> {
        let v: f64 = text
            .trim()
            .parse()
            .map_err(|_| format!("`{text}` is not a valid {} value", self.cl_name()))?;
        let (max, min_positive) = match self {
            DType::F32 => (f32::MAX as f64, f32::from_bits(1) as f64),
            DType::F16 => (half::f16::MAX.to_f64(), half::f16::from_bits(1).to_f64()),
            _ => (f64::MAX, f64::from_bits(1)),
        };
        float_in_range(text, v, max, min_positive, self.cl_name())?;
        Ok(v)
    }

    /// Encodes an integer count (`n`, `block`, `offset`) as this integer type.
    pub fn encode_count(self, v: u64) -> Option<Vec<u8>> {
        Some(match self {
            DType::I32 => i32::try_from(v).ok()?.to_ne_bytes().to_vec(),
            DType::U32 => u32::try_from(v).ok()?.to_ne_bytes().to_vec(),
            DType::I64 => i64::try_from(v).ok()?.to_ne_bytes().to_vec(),
            DType::U64 => v.to_ne_bytes().to_vec(),
            _ => return None,
        })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A dtype name that is not known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown dtype `{0}`: choose one of f32, f16, f64, i8, u8, i16, u16, i32, u32, i64, u64")]
pub struct UnknownDType(pub String);

impl FromStr for DType {
    type Err = UnknownDType;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let l = s.trim().to_ascii_lowercase();
        ALL.iter()
            .find(|r| r.1 == l || r.2 == l)
            .map(|r| r.0)
            .ok_or_else(|| UnknownDType(s.to_string()))
    }
}

/// A float value the user typed, `text`, parsed as `value` of a type whose largest finite
/// value is `max` and whose smallest positive value is `min_positive`: it must not have
/// become infinite or zero by rounding (an explicit `inf` or `0` stays allowed).
pub fn float_in_range(
    text: &str,
    value: f64,
    max: f64,
    min_positive: f64,
    type_name: &str,
) -> Result<(), String> {
    let t = text.trim().to_ascii_lowercase();
    let said_inf = t.contains("inf");
    let said_zero = t
        .trim_start_matches(['+', '-'])
        .split(['e', 'E'])
        .next()
        .is_some_and(|m| m.chars().all(|c| c == '0' || c == '.'));
    if value.is_nan() || said_inf || said_zero {
        return Ok(());
    }
    if value.abs() > max {
        return Err(format!(
            "`{text}` is outside the {type_name} range (largest finite value ±{max:.4e}): it would become infinite"
        ));
    }
    if value == 0.0 || value.abs() < min_positive {
        return Err(format!(
            "`{text}` is closer to 0 than the smallest {type_name} ({min_positive:.4e}): it would become 0"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names_and_sizes() {
        for (d, n, c, size) in ALL {
            assert_eq!(n.parse::<DType>().unwrap(), d);
            assert_eq!(DType::from_cl(c), Some(d));
            assert_eq!(d.size(), size);
        }
        assert_eq!(DType::from_cl("size_t"), Some(DType::U64));
        assert!("f17"
            .parse::<DType>()
            .unwrap_err()
            .to_string()
            .contains("f32, f16"));
    }

    #[test]
    fn encodes_values() {
        assert_eq!(DType::F32.encode("1.5").unwrap(), 1.5f32.to_ne_bytes());
        assert_eq!(DType::U8.encode("255").unwrap(), vec![255]);
        assert!(DType::U8.encode("256").is_err());
        assert!(DType::F32
            .encode("abc")
            .unwrap_err()
            .contains("not a valid float"));
        assert_eq!(DType::U32.encode_count(7).unwrap(), 7u32.to_ne_bytes());
        assert!(DType::I32.encode_count(1 << 40).is_none());
        assert!(DType::F32.encode_count(1).is_none());
        // Rounding to infinity or to zero is refused; typed infinities and zeros are not.
        assert!(DType::F32.encode("1e40").unwrap_err().contains("infinite"));
        assert!(DType::F32.encode("1e-50").unwrap_err().contains("become 0"));
        assert!(DType::F16.encode("70000").unwrap_err().contains("infinite"));
        assert!(DType::F64.encode("1e400").unwrap_err().contains("infinite"));
        assert!(DType::F64
            .encode("-1e-400")
            .unwrap_err()
            .contains("become 0"));
        assert_eq!(
            DType::F32.encode("inf").unwrap(),
            f32::INFINITY.to_ne_bytes()
        );
        assert_eq!(DType::F32.encode("-0.0").unwrap(), (-0f32).to_ne_bytes());
        assert_eq!(
            DType::F16.encode("65504").unwrap(),
            half::f16::MAX.to_ne_bytes()
        );
        assert!(DType::F32.encode("1e-40").is_ok(), "subnormal, not zero");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]
        #[test]
        fn parsing_never_panics(s in "\\PC{0,10}", v in "\\PC{0,24}") {
            if let Ok(d) = s.parse::<DType>() {
                let _ = d.encode(&v);
            }
        }

        #[test]
        fn integers_round_trip(v in any::<i32>()) {
            prop_assert_eq!(DType::I32.encode(&v.to_string()).unwrap(), v.to_ne_bytes().to_vec());
        }
    }
}
