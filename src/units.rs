//! Sizes and durations as people write and read them: `1.5 MiB`, `16M`, `500ms`.

use std::time::Duration;

/// `1.5 GiB`, `12.0 MiB`, `512 B`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

/// Why a size or a duration could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UnitError {
    /// No number where one was expected.
    #[error("invalid {what} '{}' (e.g. {example})", crate::names::escape(input))]
    Number {
        /// `size` or `duration`.
        what: &'static str,
        /// The text given.
        input: String,
        /// Forms that are read.
        example: &'static str,
    },
    /// A unit that is not one of those read.
    #[error(
        "invalid {what} unit in '{}' (use {units})",
        crate::names::escape(input)
    )]
    Unit {
        /// `size` or `duration`.
        what: &'static str,
        /// The text given.
        input: String,
        /// The units read.
        units: &'static str,
    },
    /// Too small or too large.
    #[error("{what} '{}' out of range ({range})", crate::names::escape(input))]
    Range {
        /// `size` or `duration`.
        what: &'static str,
        /// The text given.
        input: String,
        /// The range accepted.
        range: &'static str,
    },
}

/// Splits `1.5MiB` into its number and its unit; `example` shows the form in the error.
fn number_and_unit<'a>(
    s: &'a str,
    what: &'static str,
    example: &'static str,
) -> Result<(f64, &'a str), UnitError> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n = num.parse().map_err(|_| UnitError::Number {
        what,
        input: s.to_string(),
        example,
    })?;
    Ok((n, unit.trim()))
}

/// Parses a duration: `500ms`, `2s`, `1.5s`, `10m`, `1h`; a bare number is seconds.
pub fn parse_duration(s: &str) -> Result<Duration, UnitError> {
    let (n, unit) = number_and_unit(s, "duration", "500ms, 2s, 10m")?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "" | "s" => n,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => {
            return Err(UnitError::Unit {
                what: "duration",
                input: s.to_string(),
                units: "ms, s, m or h",
            })
        }
    };
    if !(0.0..=7.0 * 86400.0).contains(&secs) {
        return Err(UnitError::Range {
            what: "duration",
            input: s.to_string(),
            range: "0 to 7 days",
        });
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parses a size: `16M`, `1MiB`, `512k`, `2G`, `1000000`: K/M/G (with or without `iB`) are powers of
/// 1024, KB/MB/GB powers of 1000.
pub fn parse_size(s: &str) -> Result<u64, UnitError> {
    let (n, unit) = number_and_unit(s, "size", "16M, 1MiB, 524288")?;
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        _ => {
            return Err(UnitError::Unit {
                what: "size",
                input: s.to_string(),
                units: "K, M, G, KiB, MiB, GiB",
            })
        }
    };
    let v = n * mult as f64;
    if !(1.0..=(1u64 << 40) as f64).contains(&v) {
        return Err(UnitError::Range {
            what: "size",
            input: s.to_string(),
            range: "1 B to 1 TiB",
        });
    }
    Ok(v as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("16M").unwrap(), 16 << 20);
        assert_eq!(parse_size("1MiB").unwrap(), 1 << 20);
        assert_eq!(parse_size("512k").unwrap(), 512 << 10);
        assert_eq!(parse_size("2MB").unwrap(), 2_000_000);
        assert_eq!(parse_size("1048576").unwrap(), 1 << 20);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert!(parse_size("0").is_err());
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert!(parse_duration("3 fortnights").is_err());
        assert!(parse_duration("ms").is_err());
        assert!(parse_duration("8d").is_err());
    }

    #[test]
    fn human() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(3 << 19), "1.5 MiB");
    }
}
