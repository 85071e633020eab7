//! Human byte sizes on the command line: `4096`, `64KiB`, `16MiB`, `1GiB`, `8M`, `1G`, `512k`.

/// Parses a byte size. Binary units (`K`/`KiB`/`k` = 1024, `M`/`MiB`, `G`/`GiB`, `T`/`TiB`),
/// decimal ones spelled `KB`/`MB`/`GB`/`TB` (1000-based), case-insensitive `B` suffix allowed.
pub fn parse_size(input: &str) -> Result<u64, String> {
    let s = input.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    if digits.is_empty() {
        return Err(format!("invalid size {input:?}: expected a number with an optional unit like 64KiB"));
    }
    let n: u64 = digits.parse().map_err(|_| format!("invalid size {input:?}: number too large"))?;
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return Err(format!("invalid size {input:?}: unknown unit {unit:?} (use KiB, MiB, GiB)")),
    };
    n.checked_mul(mult).ok_or_else(|| format!("invalid size {input:?}: too large"))
}

/// Formats a byte count with a binary unit, e.g. `20.0 MiB`.
pub fn format_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{n} B") } else { format!("{value:.1} {}", UNITS[unit]) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64KiB").unwrap(), 65536);
        assert_eq!(parse_size("16mib").unwrap(), 16 << 20);
        assert_eq!(parse_size("8M").unwrap(), 8 << 20);
        assert_eq!(parse_size("1GB").unwrap(), 1_000_000_000);
        assert!(parse_size("").is_err());
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("5 parsecs").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("99999999999T").is_err());
        assert_eq!(format_bytes(20 << 20), "20.0 MiB");
        assert_eq!(format_bytes(12), "12 B");
    }
}
