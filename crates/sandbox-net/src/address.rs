//! Which addresses a name may lead to.
//!
//! A listed name that resolves to 127.0.0.1, 10.x or 169.254.169.254 would
//! turn the allowlist into a way into the host's own services, the local
//! network or the cloud metadata endpoint (whose credentials are a classic
//! SSRF prize), and an attacker who controls a listed name's DNS can point it
//! anywhere. So a resolved address must be public unless an address or range
//! entry of the allowlist covers it. IPv6 forms that embed an IPv4 address
//! (IPv4-mapped, IPv4-compatible, NAT64, 6to4) are judged by the embedded
//! address, since the kernel or a translator delivers them there.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What kind of address an IP address is, as far as reaching it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AddressClass {
    /// Routable on the internet.
    Public,
    /// 127.0.0.0/8, ::1.
    Loopback,
    /// 10/8, 172.16/12, 192.168/16, fc00::/7, fec0::/10, 64:ff9b:1::/48.
    Private,
    /// 169.254/16, fe80::/10.
    LinkLocal,
    /// 224/4, ff00::/8.
    Multicast,
    /// 0.0.0.0/8, ::.
    Unspecified,
    /// 100.64/10 (carrier-grade NAT).
    Shared,
    /// 255.255.255.255.
    Broadcast,
    /// Documentation and benchmarking ranges, 240/4, IETF protocol
    /// assignments and IPv6 outside global unicast.
    Reserved,
    /// One of the addresses of this host's interfaces.
    OwnHost,
}

impl AddressClass {
    /// A human name for messages.
    pub fn name(self) -> &'static str {
        match self {
            AddressClass::Public => "public",
            AddressClass::Loopback => "loopback",
            AddressClass::Private => "private",
            AddressClass::LinkLocal => "link-local (cloud metadata lives at 169.254.169.254)",
            AddressClass::Multicast => "multicast",
            AddressClass::Unspecified => "unspecified",
            AddressClass::Shared => "shared (CGNAT)",
            AddressClass::Broadcast => "broadcast",
            AddressClass::Reserved => "reserved",
            AddressClass::OwnHost => "this host's own address",
        }
    }

    /// Whether a name may lead there without an allowlist entry.
    pub fn is_public(self) -> bool {
        self == AddressClass::Public
    }
}

impl fmt::Display for AddressClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Classifies `ip`; `own` holds this host's interface addresses
/// ([`host_addresses`]).
pub fn classify(ip: IpAddr, own: &[IpAddr]) -> AddressClass {
    let class = match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    };
    if class.is_public() && is_own(ip, own) {
        AddressClass::OwnHost
    } else {
        class
    }
}

fn is_own(ip: IpAddr, own: &[IpAddr]) -> bool {
    let wanted = [Some(ip.to_canonical()), embedded_v4(ip).map(IpAddr::V4)];
    own.iter()
        .any(|mine| wanted.contains(&Some(mine.to_canonical())))
}

/// The IPv4 address an IPv6 address stands for, when it has one.
fn embedded_v4(ip: IpAddr) -> Option<Ipv4Addr> {
    let IpAddr::V6(v6) = ip else { return None };
    let bits = u128::from(v6);
    let low32 = Ipv4Addr::from((bits & 0xffff_ffff) as u32);
    match v6.segments() {
        // IPv4-mapped ::ffff:a.b.c.d.
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some(low32),
        // IPv4-compatible ::a.b.c.d (deprecated, still routed by some
        // stacks); :: and ::1 are themselves.
        [0, 0, 0, 0, 0, 0, _, _] if bits > 1 => Some(low32),
        // NAT64 well-known prefix 64:ff9b::/96.
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(low32),
        // 6to4 2002:a.b.c.d::/48.
        [0x2002, high, low, ..] => Some(Ipv4Addr::from((u32::from(high) << 16) | u32::from(low))),
        _ => None,
    }
}

fn in_v4(ip: Ipv4Addr, base: [u8; 4], prefix: u32) -> bool {
    let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
    u32::from(ip) & mask == u32::from(Ipv4Addr::from(base))
}

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    use AddressClass::*;
    let table: &[([u8; 4], u32, AddressClass)] = &[
        ([0, 0, 0, 0], 8, Unspecified),
        ([10, 0, 0, 0], 8, Private),
        ([100, 64, 0, 0], 10, Shared),
        ([127, 0, 0, 0], 8, Loopback),
        ([169, 254, 0, 0], 16, LinkLocal),
        ([172, 16, 0, 0], 12, Private),
        ([192, 0, 0, 0], 24, Reserved),
        ([192, 0, 2, 0], 24, Reserved),
        ([192, 88, 99, 0], 24, Reserved),
        ([192, 168, 0, 0], 16, Private),
        ([198, 18, 0, 0], 15, Reserved),
        ([198, 51, 100, 0], 24, Reserved),
        ([203, 0, 113, 0], 24, Reserved),
        ([224, 0, 0, 0], 4, Multicast),
        ([255, 255, 255, 255], 32, Broadcast),
        ([240, 0, 0, 0], 4, Reserved),
    ];
    table
        .iter()
        .find(|(base, prefix, _)| in_v4(ip, *base, *prefix))
        .map_or(Public, |(_, _, class)| *class)
}

fn classify_v6(ip: Ipv6Addr) -> AddressClass {
    use AddressClass::*;
    if ip.is_unspecified() {
        return Unspecified;
    }
    if ip.is_loopback() {
        return Loopback;
    }
    if let Some(v4) = embedded_v4(IpAddr::V6(ip)) {
        return classify_v4(v4);
    }
    let bits = u128::from(ip);
    let within = |base: u128, prefix: u32| {
        let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
        bits & mask == base
    };
    let table: &[(u128, u32, AddressClass)] = &[
        (0xff00u128 << 112, 8, Multicast),
        (0xfe80u128 << 112, 10, LinkLocal),
        // Site-local, deprecated but still a local scope.
        (0xfec0u128 << 112, 10, Private),
        (0xfc00u128 << 112, 7, Private),
        // NAT64 local-use prefix: a translator on the local network.
        (0x0064_ff9b_0001u128 << 80, 48, Private),
        // Discard-only.
        (0x0100u128 << 112, 64, Reserved),
        // IETF protocol assignments, Teredo and benchmarking among them.
        (0x2001u128 << 112, 23, Reserved),
        // Documentation.
        (0x2001_0db8u128 << 96, 32, Reserved),
        (0x3fffu128 << 112, 20, Reserved),
    ];
    if let Some((_, _, class)) = table
        .iter()
        .find(|(base, prefix, _)| within(*base, *prefix))
    {
        return *class;
    }
    // Only 2000::/3 is allocated for global unicast.
    if within(0x2000u128 << 112, 3) {
        Public
    } else {
        Reserved
    }
}

/// Reading this host's interface addresses failed.
#[derive(Debug, thiserror::Error)]
#[error("listing this host's interface addresses (getifaddrs) failed: {source}")]
pub struct HostAddressesError {
    /// The system error.
    #[source]
    pub source: nix::Error,
}

/// This host's interface addresses (every interface, up or down), so that
/// a name resolving to the host itself is refused like loopback.
pub fn host_addresses() -> Result<Vec<IpAddr>, HostAddressesError> {
    let interfaces = nix::ifaddrs::getifaddrs().map_err(|source| HostAddressesError { source })?;
    let mut addresses: Vec<IpAddr> = interfaces
        .filter_map(|interface| {
            let address = interface.address?;
            if let Some(v4) = address.as_sockaddr_in() {
                Some(IpAddr::V4(v4.ip()))
            } else {
                address.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip()))
            }
        })
        .collect();
    addresses.sort();
    addresses.dedup();
    Ok(addresses)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(text: &str) -> AddressClass {
        classify(text.parse().unwrap(), &[])
    }

    #[test]
    fn ipv4_ranges() {
        use AddressClass::*;
        for (ip, expected) in [
            ("8.8.8.8", Public),
            ("93.184.216.34", Public),
            ("127.0.0.1", Loopback),
            ("127.255.255.254", Loopback),
            ("10.1.2.3", Private),
            ("172.16.0.1", Private),
            ("172.31.255.255", Private),
            ("172.32.0.1", Public),
            ("192.168.1.1", Private),
            ("169.254.169.254", LinkLocal),
            ("100.64.0.1", Shared),
            ("100.127.255.255", Shared),
            ("100.128.0.1", Public),
            ("0.0.0.0", Unspecified),
            ("0.1.2.3", Unspecified),
            ("224.0.0.1", Multicast),
            ("239.255.255.250", Multicast),
            ("240.0.0.1", Reserved),
            ("255.255.255.255", Broadcast),
            ("192.0.2.10", Reserved),
            ("198.18.0.1", Reserved),
        ] {
            assert_eq!(class(ip), expected, "{ip}");
        }
    }

    #[test]
    fn ipv6_ranges_and_embedded_ipv4() {
        use AddressClass::*;
        for (ip, expected) in [
            ("2606:4700::1111", Public),
            ("::1", Loopback),
            ("::", Unspecified),
            ("fe80::1", LinkLocal),
            ("fd00::1", Private),
            ("fc12::1", Private),
            ("fec0::1", Private),
            ("ff02::1", Multicast),
            ("2001:db8::1", Reserved),
            ("2001::1", Reserved),
            ("100::1", Reserved),
            ("4000::1", Reserved),
            ("::ffff:127.0.0.1", Loopback),
            ("::ffff:169.254.169.254", LinkLocal),
            ("::ffff:8.8.8.8", Public),
            ("::10.0.0.1", Private),
            ("64:ff9b::a9fe:a9fe", LinkLocal),
            ("64:ff9b::808:808", Public),
            ("64:ff9b:1::1", Private),
            ("2002:7f00:1::", Loopback),
            ("2002:a9fe:a9fe::1", LinkLocal),
            ("2002:808:808::1", Public),
        ] {
            assert_eq!(class(ip), expected, "{ip}");
        }
    }

    #[test]
    fn own_addresses_are_refused_in_every_spelling() {
        let own: Vec<IpAddr> = vec!["203.0.114.5".parse().unwrap()];
        let ip = |t: &str| t.parse::<IpAddr>().unwrap();
        assert_eq!(classify(ip("203.0.114.5"), &own), AddressClass::OwnHost);
        assert_eq!(
            classify(ip("::ffff:203.0.114.5"), &own),
            AddressClass::OwnHost
        );
        assert_eq!(
            classify(ip("64:ff9b::cb00:7205"), &own),
            AddressClass::OwnHost
        );
        assert_eq!(classify(ip("203.0.114.6"), &own), AddressClass::Public);
        // A private own address keeps its more telling class.
        assert_eq!(
            classify(ip("10.0.0.1"), &[ip("10.0.0.1")]),
            AddressClass::Private
        );
    }

    #[test]
    fn names_are_for_people() {
        assert!(AddressClass::LinkLocal.name().contains("169.254.169.254"));
        assert_eq!(AddressClass::Shared.to_string(), "shared (CGNAT)");
        assert_eq!(AddressClass::OwnHost.name(), "this host's own address");
    }

    #[test]
    fn host_addresses_include_loopback() {
        let addresses = host_addresses().unwrap();
        assert!(
            addresses.contains(&IpAddr::V4(Ipv4Addr::LOCALHOST)),
            "{addresses:?}"
        );
    }
}
