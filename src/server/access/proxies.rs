//! Which peers may vouch for a user (`--trusted-proxies`): the `--user-header` names whoever
//! signed in at the SSO proxy, so it is believed only from the proxy's own address. From any
//! other peer a request carrying it is refused (403), never silently trusted: a client that
//! reaches the port directly could otherwise write under anyone's name.

use std::net::IpAddr;

/// An address block: `10.0.0.0/8`, `::1/128`; a lone address is a block of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpBlock {
    /// The first address, as IPv6 (IPv4 mapped into `::ffff:0:0/96`).
    base: u128,
    /// Leading bits that must match, counted in the IPv6 form.
    bits: u32,
}

impl IpBlock {
    pub fn parse(text: &str) -> Option<Self> {
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let address: IpAddr = address.parse().ok()?;
        // IPv4 blocks count their bits after the 96 of the mapping.
        let (offset, width) = match address {
            IpAddr::V4(_) => (96, 32),
            IpAddr::V6(_) => (0, 128),
        };
        let bits = match prefix {
            Some(prefix) => {
                let bits: u32 = prefix.parse().ok().filter(|bits| *bits <= width)?;
                offset + bits
            }
            None => 128,
        };
        Some(Self {
            base: as_v6_bits(address) & mask(bits),
            bits,
        })
    }

    pub fn contains(&self, address: IpAddr) -> bool {
        as_v6_bits(address.to_canonical()) & mask(self.bits) == self.base
    }
}

fn as_v6_bits(address: IpAddr) -> u128 {
    match address {
        IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

fn mask(bits: u32) -> u128 {
    u128::MAX.checked_shl(128 - bits).unwrap_or(0)
}

impl std::fmt::Display for IpBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v6 = std::net::Ipv6Addr::from(self.base);
        match v6.to_ipv4_mapped() {
            Some(v4) if self.bits >= 96 => write!(f, "{v4}/{}", self.bits - 96),
            _ => write!(f, "{v6}/{}", self.bits),
        }
    }
}

/// The loopback blocks: the default `--trusted-proxies` (a proxy on the same machine).
pub fn loopback() -> Vec<IpBlock> {
    ["127.0.0.0/8", "::1/128"]
        .into_iter()
        .filter_map(IpBlock::parse)
        .collect()
}

/// `--trusted-proxies`: addresses and blocks, separated by commas or spaces.
pub fn parse_trusted_proxies(list: &str) -> Result<Vec<IpBlock>, String> {
    let entries: Vec<&str> = list
        .split(|c: char| c == ',' || c.is_ascii_whitespace())
        .filter(|entry| !entry.is_empty())
        .collect();
    if entries.is_empty() {
        return Err(
            "--trusted-proxies: name at least one address or block (10.0.0.5, 10.0.0.0/24)".into(),
        );
    }
    entries
        .into_iter()
        .map(|entry| {
            IpBlock::parse(entry).ok_or_else(|| {
                format!("--trusted-proxies: {entry:?} is not an IP address or block (10.0.0.5, 10.0.0.0/24, fd00::/8)")
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("an address")
    }

    #[test]
    fn blocks_contain_their_addresses_in_either_family() {
        let block = IpBlock::parse("10.1.0.0/16").expect("block");
        assert!(block.contains(ip("10.1.200.3")));
        assert!(
            block.contains(ip("::ffff:10.1.0.9")),
            "IPv4 mapped into IPv6"
        );
        assert!(!block.contains(ip("10.2.0.1")));
        assert_eq!(block.to_string(), "10.1.0.0/16");
        let one = IpBlock::parse("192.168.1.7").expect("address");
        assert!(one.contains(ip("192.168.1.7")) && !one.contains(ip("192.168.1.8")));
        let v6 = IpBlock::parse("fd00::/8").expect("v6");
        assert!(v6.contains(ip("fd12::1")) && !v6.contains(ip("fe80::1")));
        let everything = IpBlock::parse("0.0.0.0/0").expect("all IPv4");
        assert!(everything.contains(ip("8.8.8.8")) && !everything.contains(ip("::2")));
        let loopback = loopback();
        assert!(loopback.iter().any(|b| b.contains(ip("127.0.0.1"))));
        assert!(loopback.iter().any(|b| b.contains(ip("::1"))));
        assert!(!loopback.iter().any(|b| b.contains(ip("10.0.0.1"))));
    }

    #[test]
    fn malformed_blocks_are_refused() {
        for bad in [
            "",
            " , ",
            "10.0.0.0/33",
            "::/129",
            "10.0.0",
            "host.example",
            "10.0.0.0/x",
        ] {
            assert!(parse_trusted_proxies(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            parse_trusted_proxies("10.0.0.5, fd00::/8")
                .expect("valid")
                .len(),
            2
        );
    }
}
