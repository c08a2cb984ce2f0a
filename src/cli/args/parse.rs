//! clap's value parsers for the flags whose values have a type of their own: devices,
//! addresses, counts, percentages, sizes and durations, read as people write them.

use super::DeviceArg;
use std::net::SocketAddr;
use std::time::Duration;

pub(super) fn parse_device(text: &str) -> Result<DeviceArg, String> {
    if text == "host" {
        return Ok(DeviceArg::Host);
    }
    text.parse()
        .map(DeviceArg::Ordinal)
        .map_err(|_| format!("{text:?} is neither a device number nor `host`"))
}

/// `--addr`: an IP address and a port.
pub(super) fn socket_address(text: &str) -> Result<SocketAddr, String> {
    text.parse()
        .map_err(|_| format!("{text:?} is not an address like 127.0.0.1:7878"))
}

/// A count that 0 would make useless (`--max-connections`, `--max-uploads`: nothing would be
/// served).
pub(super) fn at_least_one(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_owned()),
        Ok(count) => Ok(count),
        Err(_) => Err(format!("{text:?} is not a whole number")),
    }
}

/// `--max-peak-growth`: a percentage of 0 or more.
pub(super) fn percentage(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(pct) if pct.is_finite() && pct >= 0.0 => Ok(pct),
        _ => Err(format!("{text:?} is not a percentage of 0 or more")),
    }
}

/// `--database`'s URL, its scheme checked now (a typo is a usage error, before anything
/// starts).
pub(super) fn database_url(text: &str) -> Result<String, String> {
    crate::server::store::check_database_url(text.trim())?;
    Ok(text.trim().to_owned())
}

/// `--blobs`' URL, its scheme and bucket checked now.
pub(super) fn blobs_url(text: &str) -> Result<String, String> {
    crate::server::store::check_blobs_url(text.trim())?;
    Ok(text.trim().to_owned())
}

/// A size in bytes, as `bytesize` reads it: `8GiB`, `500MB`, `1.5GiB`, `1000000`. A bare
/// `K`, `M`, `G` or `T` is binary (`4G` is 4 GiB), as people mean it for memory, where
/// `bytesize` alone would read it as decimal.
pub(super) fn size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let binary = trimmed
        .strip_suffix(['k', 'K', 'm', 'M', 'g', 'G', 't', 'T'])
        .filter(|number| number.ends_with(|c: char| c.is_ascii_digit() || c == ' '))
        .map(|_| format!("{trimmed}i"));
    binary
        .as_deref()
        .unwrap_or(trimmed)
        .parse::<bytesize::ByteSize>()
        .map(|size| size.as_u64())
        .map_err(|_| format!("{text:?} is not a size like 8GiB, 500MB or 1000000"))
}

/// A duration, as `humantime` reads it: `30s`, `500ms`, `2m`, `1h 30m`; a bare number is
/// seconds. Zero and more than a day are refused, since every timeout here bounds how long a
/// client may hold something.
pub(super) fn timeout(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    let seconds = trimmed
        .parse::<f64>()
        .is_ok()
        .then(|| format!("{trimmed}s"));
    let duration = humantime::parse_duration(seconds.as_deref().unwrap_or(trimmed))
        .map_err(|_| format!("{text:?} is not a duration like 30s, 500ms or 2m"))?;
    if duration.is_zero() || duration > Duration::from_secs(86_400) {
        return Err(format!("{text:?} must be more than 0 and at most a day"));
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(timeout("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(timeout("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(timeout(" 2m "), Ok(Duration::from_secs(120)));
        assert_eq!(timeout("1.5"), Ok(Duration::from_millis(1500)));
        for bad in ["", "0", "0s", "-1s", "5 parsecs", "2d", "nan"] {
            assert!(timeout(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(size("8GiB"), Ok(8 << 30));
        assert_eq!(size("500MB"), Ok(500_000_000));
        assert_eq!(size("64KiB"), Ok(64 << 10));
        assert_eq!(size("1000000"), Ok(1_000_000));
        assert_eq!(size(" 4G "), Ok(4 << 30));
        assert_eq!(size("1.5M"), Ok(3 << 19));
        assert_eq!(size("0"), Ok(0));
        for bad in ["", "lots", "5 parsecs", "-1", "GiB"] {
            assert!(size(bad).is_err(), "{bad:?}");
        }
    }

    /// The storage flags of `serve`: their schemes checked as they are read (a usage error,
    /// exit status 2), their defaults when left out.
    #[test]
    fn storage_urls_are_checked_as_they_are_read() {
        use clap::Parser;
        let serve = |flags: &[&str]| {
            let mut args = vec!["snapview", "serve"];
            args.extend_from_slice(flags);
            super::super::Cli::try_parse_from(args)
        };
        for (flag, bad) in [
            ("--database", "mysql://u:secret@db/snapview"),
            ("--database", "/var/lib/snapview.db"),
            ("--blobs", "gs://bucket/prefix"),
            ("--blobs", "s3://"),
        ] {
            let error = serve(&[flag, bad]).expect_err(bad);
            assert_eq!(error.exit_code(), 2, "{flag} {bad}");
            // clap repeats the value as typed, to the person who typed it; the store's own
            // message (tested in `store::open`) leaves the password out.
            let text = error.to_string();
            assert!(
                text.contains("snapview knows: give"),
                "the accepted form is named: {text}"
            );
        }
        let cli = serve(&[
            "--database",
            "postgres://snapview@db:5432/snapview",
            "--blobs",
            "s3://bucket/snapview",
            "--cache-size",
            "1GiB",
        ])
        .expect("valid");
        let text = format!("{cli:?}");
        assert!(
            text.contains("postgres://snapview@db:5432/snapview"),
            "{text}"
        );
        assert!(text.contains("cache_size: 1073741824"), "{text}");
        let defaults = format!("{:?}", serve(&[]).expect("defaults"));
        assert!(
            defaults.contains(&format!(
                "cache_size: {}",
                crate::server::store::DEFAULT_CACHE_BYTES
            )),
            "{defaults}"
        );
        assert!(defaults.contains("database: None") && defaults.contains("blobs: None"));
    }
}
