//! Human-readable numbers, shared by the command line and the pages' server-side text.

/// Bytes in binary units with three significant digits: `512 B`, `1.50 KiB`, `7.57 GiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    let digits = if value >= 100.0 {
        0
    } else if value >= 10.0 {
        1
    } else {
        2
    };
    format!("{value:.digits$} {}", UNITS[unit])
}

/// An integer with thousands separators: `3,199,230`.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A span of microseconds: `850 µs`, `12.3 ms`, `4.56 s`, `3 min 20 s`.
pub fn duration_us(us: i64) -> String {
    let sign = if us < 0 { "-" } else { "" };
    let us = us.unsigned_abs();
    if us < 1_000 {
        format!("{sign}{us} µs")
    } else if us < 1_000_000 {
        format!("{sign}{:.1} ms", us as f64 / 1e3)
    } else if us < 60_000_000 {
        format!("{sign}{:.2} s", us as f64 / 1e6)
    } else {
        let seconds = us / 1_000_000;
        format!("{sign}{} min {} s", seconds / 60, seconds % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_like_a_person_would_say_them() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.50 KiB");
        assert_eq!(bytes(8_127_203_336), "7.57 GiB");
        assert_eq!(bytes(286_650_809), "273 MiB");
    }

    #[test]
    fn counts_and_durations() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(3_199_230), "3,199,230");
        assert_eq!(duration_us(850), "850 µs");
        assert_eq!(duration_us(12_345), "12.3 ms");
        assert_eq!(duration_us(200_000_000), "3 min 20 s");
    }
}
