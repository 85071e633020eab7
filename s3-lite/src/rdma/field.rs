//! Strict scalar field parsers shared by every RDMA header codec.
//!
//! The header family is full of small hex and decimal fields whose peers disagree on width and
//! case. Keeping one set of checked parsers here means every codec rejects the same things the
//! same way (no sign, no whitespace, no `0x`, no silent truncation) and reports *where* a value
//! went wrong through [`FieldError`], which the per-codec errors wrap together with a field name.

use thiserror::Error;

/// Why one scalar field of an RDMA header was rejected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum FieldError {
    /// The field is empty.
    #[error("empty field")]
    Empty,
    /// The field has a fixed width and this is not it.
    #[error("{found} characters where exactly {expected} are required")]
    WrongLength {
        /// Required number of characters.
        expected: usize,
        /// Number of characters found.
        found: usize,
    },
    /// The field is longer than its format allows.
    #[error("{found} characters where at most {max} are allowed")]
    TooLong {
        /// Maximum number of characters.
        max: usize,
        /// Number of characters found.
        found: usize,
    },
    /// A character that is not a hex digit.
    #[error("non-hex character at offset {offset}")]
    NotHex {
        /// Byte offset inside the field.
        offset: usize,
    },
    /// An upper-case hex digit in a field whose producers always write lower case.
    #[error("upper-case hex digit at offset {offset} where lower case is required")]
    UpperCase {
        /// Byte offset inside the field.
        offset: usize,
    },
    /// A character that is not a decimal digit (signs and spaces included).
    #[error("non-decimal character at offset {offset}")]
    NotDecimal {
        /// Byte offset inside the field.
        offset: usize,
    },
    /// The digits do not fit the 64-bit integer the field is parsed into.
    #[error("value does not fit in 64 bits")]
    Overflow,
    /// The value is syntactically fine but outside the range the protocol allows.
    #[error("value {value} outside {min}..={max}")]
    OutOfRange {
        /// The parsed value.
        value: u64,
        /// Smallest allowed value.
        min: u64,
        /// Largest allowed value.
        max: u64,
    },
}

/// Which hex digit case a field accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Case {
    /// Only `0-9a-f` (fields minted by `printf("%x")` and compared verbatim).
    Lower,
    /// `0-9a-fA-F` (fields some peers write in upper case, e.g. Ceph's PSN).
    Any,
}

/// Value of one hex digit, honouring `case`.
fn nibble(b: u8, offset: usize, case: Case) -> Result<u8, FieldError> {
    match b {
        b'0'..=b'9' => Ok(b - b'0'),
        b'a'..=b'f' => Ok(b - b'a' + 10),
        b'A'..=b'F' if case == Case::Any => Ok(b - b'A' + 10),
        b'A'..=b'F' => Err(FieldError::UpperCase { offset }),
        _ => Err(FieldError::NotHex { offset }),
    }
}

/// True when every byte is a hex digit of either case (a cheap shape test for dispatch).
pub(crate) fn is_hex(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Checks the character count of a field: `min..=max` (fixed width when equal).
fn check_len(s: &str, min: usize, max: usize) -> Result<(), FieldError> {
    let found = s.len();
    if found == 0 {
        return Err(FieldError::Empty);
    }
    if min == max && found != min {
        return Err(FieldError::WrongLength {
            expected: min,
            found,
        });
    }
    if found < min {
        return Err(FieldError::WrongLength {
            expected: min,
            found,
        });
    }
    if found > max {
        return Err(FieldError::TooLong { max, found });
    }
    Ok(())
}

/// Parses `min_len..=max_len` hex digits (`max_len` ≤ 16) into a `u64`. No `0x`, no sign.
pub(crate) fn hex_u64(
    s: &str,
    min_len: usize,
    max_len: usize,
    case: Case,
) -> Result<u64, FieldError> {
    check_len(s, min_len.max(1), max_len.min(16))?;
    let mut value: u64 = 0;
    for (offset, b) in s.bytes().enumerate() {
        value = (value << 4) | u64::from(nibble(b, offset, case)?);
    }
    Ok(value)
}

/// Parses hex into a `u32`, rejecting values above `max`.
pub(crate) fn hex_u32(
    s: &str,
    min_len: usize,
    max_len: usize,
    case: Case,
    max: u32,
) -> Result<u32, FieldError> {
    let value = hex_u64(s, min_len, max_len.min(8), case)?;
    in_range(value, 0, u64::from(max))
        .and_then(|v| u32::try_from(v).map_err(|_| FieldError::Overflow))
}

/// Parses exactly `2 * N` hex digits into `N` bytes, first byte first.
pub(crate) fn hex_array<const N: usize>(s: &str, case: Case) -> Result<[u8; N], FieldError> {
    check_len(s, 2 * N, 2 * N)?;
    let mut out = [0u8; N];
    for ((i, pair), slot) in s.as_bytes().chunks_exact(2).enumerate().zip(out.iter_mut()) {
        let (hi, lo) = match pair {
            [hi, lo] => (*hi, *lo),
            _ => {
                return Err(FieldError::WrongLength {
                    expected: 2 * N,
                    found: s.len(),
                });
            }
        };
        *slot = (nibble(hi, 2 * i, case)? << 4) | nibble(lo, 2 * i + 1, case)?;
    }
    Ok(out)
}

/// Parses an even number of hex digits (at most `max_bytes` bytes) into a byte vector.
pub(crate) fn hex_vec(s: &str, max_bytes: usize, case: Case) -> Result<Vec<u8>, FieldError> {
    check_len(s, 1, max_bytes.saturating_mul(2))?;
    if !s.len().is_multiple_of(2) {
        return Err(FieldError::WrongLength {
            expected: s.len() + 1,
            found: s.len(),
        });
    }
    let mut out = Vec::with_capacity(s.len() / 2);
    for (i, pair) in s.as_bytes().chunks_exact(2).enumerate() {
        if let [hi, lo] = pair {
            out.push((nibble(*hi, 2 * i, case)? << 4) | nibble(*lo, 2 * i + 1, case)?);
        }
    }
    Ok(out)
}

/// Parses 1..=`max_digits` ASCII decimal digits into a `u64`. Leading zeros are accepted (a
/// whole-string integer parse accepts them too); signs, spaces and `_` are not.
pub(crate) fn decimal_u64(s: &str, max_digits: usize) -> Result<u64, FieldError> {
    check_len(s, 1, max_digits)?;
    let mut value: u64 = 0;
    let mut overflow = false;
    for (offset, b) in s.bytes().enumerate() {
        if !b.is_ascii_digit() {
            return Err(FieldError::NotDecimal { offset });
        }
        match value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(b - b'0')))
        {
            Some(v) => value = v,
            None => overflow = true,
        }
    }
    if overflow {
        Err(FieldError::Overflow)
    } else {
        Ok(value)
    }
}

/// Range check that reports the offending value.
pub(crate) fn in_range(value: u64, min: u64, max: u64) -> Result<u64, FieldError> {
    if (min..=max).contains(&value) {
        Ok(value)
    } else {
        Err(FieldError::OutOfRange { value, min, max })
    }
}

const HEX_LOWER: &[u8; 16] = b"0123456789abcdef";

/// Appends `bytes` as lower-case hex, two digits per byte.
pub(crate) fn push_hex(out: &mut String, bytes: &[u8]) {
    for &b in bytes {
        for nib in [b >> 4, b & 0x0f] {
            if let Some(&c) = HEX_LOWER.get(usize::from(nib)) {
                out.push(char::from(c));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_u64_checks_width_case_and_digits() {
        assert_eq!(hex_u64("00ff", 4, 4, Case::Lower), Ok(0xff));
        assert_eq!(
            hex_u64("ffffffffffffffff", 1, 16, Case::Lower),
            Ok(u64::MAX)
        );
        assert_eq!(
            hex_u64("00FF", 4, 4, Case::Lower),
            Err(FieldError::UpperCase { offset: 2 })
        );
        assert_eq!(hex_u64("00FF", 4, 4, Case::Any), Ok(0xff));
        assert_eq!(
            hex_u64("0x1", 1, 16, Case::Any),
            Err(FieldError::NotHex { offset: 1 })
        );
        assert_eq!(hex_u64("", 1, 16, Case::Any), Err(FieldError::Empty));
        assert_eq!(
            hex_u64("123", 4, 4, Case::Any),
            Err(FieldError::WrongLength {
                expected: 4,
                found: 3
            })
        );
        assert_eq!(
            hex_u64("12345678901234567", 1, 16, Case::Any),
            Err(FieldError::TooLong { max: 16, found: 17 })
        );
    }

    #[test]
    fn hex_u32_caps_value() {
        assert_eq!(hex_u32("ffffff", 1, 8, Case::Any, 0xff_ffff), Ok(0xff_ffff));
        assert_eq!(
            hex_u32("1000000", 1, 8, Case::Any, 0xff_ffff),
            Err(FieldError::OutOfRange {
                value: 0x100_0000,
                min: 0,
                max: 0xff_ffff
            })
        );
    }

    #[test]
    fn hex_arrays_and_vectors() {
        assert_eq!(hex_array::<2>("a0B1", Case::Any), Ok([0xa0, 0xb1]));
        assert_eq!(
            hex_array::<2>("a0B1", Case::Lower),
            Err(FieldError::UpperCase { offset: 2 })
        );
        assert_eq!(hex_vec("0102", 4, Case::Lower), Ok(vec![1, 2]));
        assert_eq!(
            hex_vec("010", 4, Case::Lower),
            Err(FieldError::WrongLength {
                expected: 4,
                found: 3
            })
        );
        let mut s = String::new();
        push_hex(&mut s, &[0x00, 0xab, 0x0f]);
        assert_eq!(s, "00ab0f");
    }

    #[test]
    fn decimal_is_strict() {
        assert_eq!(decimal_u64("0042", 20), Ok(42));
        assert_eq!(decimal_u64("18446744073709551615", 20), Ok(u64::MAX));
        assert_eq!(
            decimal_u64("18446744073709551616", 20),
            Err(FieldError::Overflow)
        );
        assert_eq!(
            decimal_u64("+1", 20),
            Err(FieldError::NotDecimal { offset: 0 })
        );
        assert_eq!(
            decimal_u64("1 ", 20),
            Err(FieldError::NotDecimal { offset: 1 })
        );
        assert_eq!(
            decimal_u64("-1", 20),
            Err(FieldError::NotDecimal { offset: 0 })
        );
        assert_eq!(
            decimal_u64("123", 2),
            Err(FieldError::TooLong { max: 2, found: 3 })
        );
    }
}
