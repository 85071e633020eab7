//! Lower-case hex, the only text form SigV4 uses for digests and signatures.

const HEX_LOWER: &[u8; 16] = b"0123456789abcdef";

/// Lower-case hex of `bytes`.
pub fn encode(bytes: &[u8]) -> String {
    let mut out = Vec::with_capacity(bytes.len() * 2);
    for &b in bytes {
        for nibble in [b >> 4, b & 0x0f] {
            // A nibble is < 16, so the lookup always hits.
            out.push(HEX_LOWER.get(usize::from(nibble)).copied().unwrap_or(b'0'));
        }
    }
    // Only ASCII hex digits were pushed.
    String::from_utf8(out).unwrap_or_default()
}

/// Decodes exactly 64 *lower-case* hex digits (a SigV4 signature) into 32 bytes.
pub fn decode_signature(s: &str) -> Option<[u8; 32]> {
    let b = s.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (slot, pair) in out.iter_mut().zip(b.chunks_exact(2)) {
        let hi = lower_hex_value(*pair.first()?)?;
        let lo = lower_hex_value(*pair.get(1)?)?;
        *slot = hi << 4 | lo;
    }
    Some(out)
}

fn lower_hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

/// Compares two equal-length byte arrays in time independent of where they differ, so a
/// verifier does not leak how many leading signature bytes an attacker guessed.
pub fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b.iter()) {
        diff |= x ^ y;
    }
    // black_box keeps the optimizer from turning the fold into an early-exit comparison.
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_strictness() {
        let bytes: Vec<u8> = (0u8..32).map(|i| i.wrapping_mul(37)).collect();
        let hex = encode(&bytes);
        assert_eq!(decode_signature(&hex).unwrap().as_slice(), bytes.as_slice());
        assert!(decode_signature(&hex.to_uppercase()).is_none() || hex == hex.to_uppercase());
        assert!(decode_signature(&hex[..62]).is_none());
        assert!(decode_signature(&format!("{}zz", &hex[..62])).is_none());
        let a = decode_signature(&hex).unwrap();
        let mut b = a;
        assert!(constant_time_eq(&a, &b));
        b[31] ^= 1;
        assert!(!constant_time_eq(&a, &b));
    }
}
