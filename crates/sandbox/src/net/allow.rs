//! The network allowlist: which hosts and ports a run may reach.
//!
//! An entry names a host pattern and optionally a port:
//!
//! - `registry.npmjs.org`: that name only;
//! - `*.pythonhosted.org`: any name at any depth below the suffix, never the
//!   suffix itself (list it separately when it is meant too);
//! - `*`: any name, but never an IP literal (an address a client types
//!   bypasses every name check, so it must be listed on its own);
//! - `1.2.3.4`, `[::1]`, `10.0.0.0/8`, `[fd00::/8]`: an address or a range.
//!   It allows connecting to the literal, and it lets a name that resolved
//!   into the range through the address checks (the net process's, which
//!   refuses loopback, private and metadata addresses otherwise).
//!
//! Each optionally ends in `:PORT` or `:*`; without a port an entry covers
//! 443 and 80, the two ports HTTPS and HTTP clients use by default.
//!
//! Names are compared normalized: lower case, without a trailing dot, ASCII
//! only (internationalized names in their punycode form), since a client
//! and the allowlist must agree on one spelling of each name.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// The ports an entry without `:PORT` covers.
pub const DEFAULT_PORTS: [u16; 2] = [443, 80];

/// The longest name DNS can carry, in its dotted text form.
const MAX_NAME_LEN: usize = 253;
/// The longest label DNS can carry.
const MAX_LABEL_LEN: usize = 63;

/// A host as a client named it: a name or an IP literal.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Host {
    /// A DNS name, normalized (lower case, no trailing dot).
    Name(String),
    /// An IP literal.
    Ip(IpAddr),
}

impl Host {
    /// Parses a host as it appears in a CONNECT authority, a `Host` header,
    /// a URL or a SOCKS request (without the port): a name, an IPv4
    /// literal, or an IPv6 literal with or without brackets.
    pub fn parse(text: &str) -> Result<Host, HostError> {
        let error = |problem| HostError {
            host: text.to_string(),
            problem,
        };
        if let Some(inner) = text.strip_prefix('[') {
            let inner = inner
                .strip_suffix(']')
                .ok_or_else(|| error(NameProblem::UnclosedBracket))?;
            return inner
                .parse::<Ipv6Addr>()
                .map(|ip| Host::Ip(IpAddr::V6(ip)))
                .map_err(|_| error(NameProblem::BadIpv6));
        }
        if let Ok(ip) = text.parse::<IpAddr>() {
            return Ok(Host::Ip(ip));
        }
        normalize_name(text).map(Host::Name).map_err(error)
    }

    /// `host:port`, with an IPv6 literal in brackets: the form a target
    /// takes in rules, grants, the audit and [`split_target`].
    pub fn with_port(&self, port: u16) -> String {
        match self {
            Host::Ip(IpAddr::V6(ip)) => format!("[{ip}]:{port}"),
            other => format!("{other}:{port}"),
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// A host that is neither a valid name nor an IP literal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("host {host:?}: {problem}")]
pub struct HostError {
    /// What was given.
    pub host: String,
    /// What is wrong with it.
    pub problem: NameProblem,
}

/// What makes a text no valid host name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameProblem {
    /// Nothing at all.
    #[error("the name is empty")]
    Empty,
    /// Longer than DNS allows.
    #[error("the name is longer than {MAX_NAME_LEN} characters")]
    TooLong,
    /// A label longer than DNS allows.
    #[error("the label {0:?} is longer than {MAX_LABEL_LEN} characters")]
    LabelTooLong(String),
    /// `a..b`, `.a`.
    #[error("the name has an empty label (two dots in a row, or a leading dot)")]
    EmptyLabel,
    /// Outside `[a-z0-9-_]`.
    #[error(
        "the character {0:?} is not allowed in a name (letters, digits, '-' and '_'; \
         write an internationalized name in its punycode form, xn--...)"
    )]
    BadCharacter(char),
    /// `127.1`, `0x7f.0.0.1`, `2130706433`: resolvers read these as
    /// addresses, so treating them as names would let an address pass as a
    /// name.
    #[error(
        "the name ends in a number, which resolvers read as an IPv4 address \
         in a non-standard form; write the address as a.b.c.d"
    )]
    NumericName,
    /// `[` without `]`.
    #[error("'[' without a closing ']'")]
    UnclosedBracket,
    /// Brackets around something that is no IPv6 address.
    #[error("brackets must enclose an IPv6 address")]
    BadIpv6,
}

/// Normalizes a DNS name: lower case, trailing dot dropped, and checked.
fn normalize_name(text: &str) -> Result<String, NameProblem> {
    let trimmed = text.strip_suffix('.').unwrap_or(text);
    if trimmed.is_empty() {
        return Err(NameProblem::Empty);
    }
    if trimmed.len() > MAX_NAME_LEN {
        return Err(NameProblem::TooLong);
    }
    let name = trimmed.to_ascii_lowercase();
    for label in name.split('.') {
        if label.is_empty() {
            return Err(NameProblem::EmptyLabel);
        }
        if label.len() > MAX_LABEL_LEN {
            return Err(NameProblem::LabelTooLong(label.to_string()));
        }
        if let Some(bad) = label
            .chars()
            .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '_'))
        {
            return Err(NameProblem::BadCharacter(bad));
        }
    }
    // The WHATWG URL standard's "ends in a number" rule: such a host is an
    // IPv4 address to browsers and to inet_aton, whatever it looks like.
    let last = name.rsplit('.').next().unwrap_or_default();
    let hex = last
        .strip_prefix("0x")
        .is_some_and(|digits| digits.chars().all(|c| c.is_ascii_hexdigit()));
    if hex || last.chars().all(|c| c.is_ascii_digit()) {
        return Err(NameProblem::NumericName);
    }
    Ok(name)
}

/// Splits a `host:port` target (`[v6]:port` for IPv6) into its parts; None
/// when it is not one (no port, port 0, or an invalid host).
pub fn split_target(target: &str) -> Option<(Host, u16)> {
    let (host, port) = target.rsplit_once(':')?;
    if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
        return None;
    }
    let port = parse_port_number(port)?;
    Host::parse(host).ok().map(|host| (host, port))
}

/// A port in 1..=65535, decimal digits only (no sign, no spaces).
fn parse_port_number(text: &str) -> Option<u16> {
    if text.is_empty() || text.len() > 5 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<u16>().ok().filter(|port| *port != 0)
}

/// Whether an allowlist entry written as `pattern` covers `target`
/// (`host:port`). A pattern that is no valid entry matches nothing, so a
/// typo in a rule or a grant never widens it.
pub fn target_matches(pattern: &str, target: &str) -> bool {
    let Ok(entry) = pattern.parse::<AllowEntry>() else {
        return false;
    };
    split_target(target).is_some_and(|(host, port)| entry.covers_host(&host, port))
}

/// [`target_matches`] for a rule that refuses: a pattern without a port
/// covers every port of its hosts, since `net.http:evil.example = deny`
/// meant that host, and a deny that missed `:8080` would fail open.
pub fn target_matches_any_port(pattern: &str, target: &str) -> bool {
    let Ok(mut entry) = pattern.parse::<AllowEntry>() else {
        return false;
    };
    if entry.port == PortPattern::Default {
        entry.port = PortPattern::Any;
    }
    split_target(target).is_some_and(|(host, port)| entry.covers_host(&host, port))
}

/// An address range: an address and a prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IpRange {
    /// The first address (host bits zero).
    pub base: IpAddr,
    /// The prefix length (0..=32 or 0..=128).
    pub prefix: u8,
}

impl IpRange {
    /// Whether `ip` lies in the range (IPv4-mapped IPv6 addresses count as
    /// their IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.base, ip.to_canonical()) {
            (IpAddr::V4(base), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(ip) & mask == u32::from(base)
            }
            (IpAddr::V6(base), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(ip) & mask == u128::from(base)
            }
            _ => false,
        }
    }
}

/// Which hosts an entry covers.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HostPattern {
    /// One name.
    Name(String),
    /// Any name strictly below this suffix (`*.suffix`).
    Below(String),
    /// Any name (`*`), no IP literal.
    AnyName,
    /// One address.
    Ip(IpAddr),
    /// An address range.
    Range(IpRange),
}

/// Which ports an entry covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PortPattern {
    /// No port written: [`DEFAULT_PORTS`].
    Default,
    /// `:*`.
    Any,
    /// `:PORT`.
    One(u16),
}

impl PortPattern {
    /// Whether it covers `port`.
    pub fn covers(self, port: u16) -> bool {
        match self {
            PortPattern::Default => DEFAULT_PORTS.contains(&port),
            PortPattern::Any => true,
            PortPattern::One(one) => one == port,
        }
    }
}

/// One allowlist entry (see the module documentation for its forms).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AllowEntry {
    /// The hosts.
    pub host: HostPattern,
    /// The ports.
    pub port: PortPattern,
}

impl AllowEntry {
    /// Whether it covers `host` on `port` as the client named it: a name
    /// by name, wildcard or `*`; an IP literal by an address or range entry.
    pub fn covers_host(&self, host: &Host, port: u16) -> bool {
        if !self.port.covers(port) {
            return false;
        }
        match (&self.host, host) {
            (HostPattern::Name(listed), Host::Name(name)) => listed == name,
            (HostPattern::Below(suffix), Host::Name(name)) => name
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            (HostPattern::AnyName, Host::Name(_)) => true,
            (HostPattern::Ip(_) | HostPattern::Range(_), Host::Ip(ip)) => {
                self.covers_address(*ip, port)
            }
            _ => false,
        }
    }

    /// Whether it is an address or range entry covering `ip` on `port`.
    pub fn covers_address(&self, ip: IpAddr, port: u16) -> bool {
        self.port.covers(port)
            && match &self.host {
                HostPattern::Ip(listed) => listed.to_canonical() == ip.to_canonical(),
                HostPattern::Range(range) => range.contains(ip),
                _ => false,
            }
    }
}

impl fmt::Display for AllowEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            HostPattern::Name(name) => f.write_str(name)?,
            HostPattern::Below(suffix) => write!(f, "*.{suffix}")?,
            HostPattern::AnyName => f.write_str("*")?,
            HostPattern::Ip(IpAddr::V4(ip)) => write!(f, "{ip}")?,
            HostPattern::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]")?,
            HostPattern::Range(IpRange {
                base: IpAddr::V4(base),
                prefix,
            }) => write!(f, "{base}/{prefix}")?,
            HostPattern::Range(IpRange {
                base: IpAddr::V6(base),
                prefix,
            }) => write!(f, "[{base}/{prefix}]")?,
        }
        match self.port {
            PortPattern::Default => Ok(()),
            PortPattern::Any => f.write_str(":*"),
            PortPattern::One(port) => write!(f, ":{port}"),
        }
    }
}

/// An allowlist entry that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("network.allow entry {entry:?}: {problem}")]
pub struct AllowError {
    /// The entry as written.
    pub entry: String,
    /// What is wrong with it.
    pub problem: EntryProblem,
}

/// What is wrong with an allowlist entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryProblem {
    /// Nothing at all.
    #[error("the entry is empty")]
    Empty,
    /// Whitespace inside.
    #[error("the entry contains whitespace")]
    Whitespace,
    /// The port part is no port.
    #[error("{0:?} is not a port (write 1-65535 or *, e.g. host:443)")]
    BadPort(String),
    /// `*` somewhere else than a whole first label.
    #[error("'*' is allowed only alone or as the whole first label (*.example.com)")]
    MisplacedWildcard,
    /// A name that is not valid.
    #[error("{0}")]
    BadName(NameProblem),
    /// `a/b` that is no CIDR range.
    #[error("{0:?} is not an address range (write e.g. 10.0.0.0/8 or [fd00::/8])")]
    BadRange(String),
    /// `10.0.0.1/8`.
    #[error("the range has bits set after its prefix; did you mean {0}?")]
    HostBitsSet(String),
    /// An IPv6 address with a port but without brackets.
    #[error("an IPv6 address with a port needs brackets: [ADDRESS]:PORT")]
    UnbracketedIpv6,
    /// `[`...`]` around something else, or text after `]`.
    #[error("brackets must enclose an IPv6 address or range, followed by nothing or :PORT")]
    BadBrackets,
}

impl FromStr for AllowEntry {
    type Err = AllowError;

    fn from_str(text: &str) -> Result<AllowEntry, AllowError> {
        parse_entry(text).map_err(|problem| AllowError {
            entry: text.to_string(),
            problem,
        })
    }
}

fn parse_entry(text: &str) -> Result<AllowEntry, EntryProblem> {
    let text = text.trim();
    if text.is_empty() {
        return Err(EntryProblem::Empty);
    }
    if text.chars().any(char::is_whitespace) {
        return Err(EntryProblem::Whitespace);
    }
    if let Some(rest) = text.strip_prefix('[') {
        let (inner, after) = rest.split_once(']').ok_or(EntryProblem::BadBrackets)?;
        let port = match after {
            "" => PortPattern::Default,
            _ => parse_port(after.strip_prefix(':').ok_or(EntryProblem::BadBrackets)?)?,
        };
        let host = parse_v6(inner).ok_or(EntryProblem::BadBrackets)??;
        return Ok(AllowEntry { host, port });
    }
    // A bare IPv6 address or range carries no port: its colons are its own.
    if text.matches(':').count() > 1 {
        return match parse_v6(text) {
            Some(host) => Ok(AllowEntry {
                host: host?,
                port: PortPattern::Default,
            }),
            None => Err(EntryProblem::UnbracketedIpv6),
        };
    }
    let (host_text, port) = match text.split_once(':') {
        Some((host, port)) => (host, parse_port(port)?),
        None => (text, PortPattern::Default),
    };
    let host = if host_text == "*" {
        HostPattern::AnyName
    } else if let Some(suffix) = host_text.strip_prefix("*.") {
        if suffix.contains('*') {
            return Err(EntryProblem::MisplacedWildcard);
        }
        HostPattern::Below(normalize_name(suffix).map_err(EntryProblem::BadName)?)
    } else if host_text.contains('*') {
        return Err(EntryProblem::MisplacedWildcard);
    } else if let Some((base, prefix)) = host_text.split_once('/') {
        let base: Ipv4Addr = base
            .parse()
            .map_err(|_| EntryProblem::BadRange(host_text.to_string()))?;
        range(IpAddr::V4(base), prefix, host_text)?
    } else if let Ok(ip) = host_text.parse::<Ipv4Addr>() {
        HostPattern::Ip(IpAddr::V4(ip))
    } else {
        HostPattern::Name(normalize_name(host_text).map_err(EntryProblem::BadName)?)
    };
    Ok(AllowEntry { host, port })
}

/// An IPv6 address or range; None when the text is neither (so the caller
/// can name the form it expected).
fn parse_v6(text: &str) -> Option<Result<HostPattern, EntryProblem>> {
    match text.split_once('/') {
        Some((base, prefix)) => {
            let base: Ipv6Addr = base.parse().ok()?;
            Some(range(IpAddr::V6(base), prefix, text))
        }
        None => text
            .parse::<Ipv6Addr>()
            .ok()
            .map(|ip| Ok(HostPattern::Ip(IpAddr::V6(ip)))),
    }
}

fn range(base: IpAddr, prefix: &str, written: &str) -> Result<HostPattern, EntryProblem> {
    let bits = if base.is_ipv4() { 32 } else { 128 };
    let prefix: u8 = prefix
        .parse()
        .ok()
        .filter(|p| *p <= bits && prefix.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| EntryProblem::BadRange(written.to_string()))?;
    let masked = IpRange {
        base: mask(base, prefix),
        prefix,
    };
    if masked.base != base {
        let suggestion = AllowEntry {
            host: HostPattern::Range(masked),
            port: PortPattern::Default,
        };
        return Err(EntryProblem::HostBitsSet(suggestion.to_string()));
    }
    Ok(HostPattern::Range(masked))
}

fn mask(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let m = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(v4) & m))
        }
        IpAddr::V6(v6) => {
            let m = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & m))
        }
    }
}

fn parse_port(text: &str) -> Result<PortPattern, EntryProblem> {
    if text == "*" {
        return Ok(PortPattern::Any);
    }
    parse_port_number(text)
        .map(PortPattern::One)
        .ok_or_else(|| EntryProblem::BadPort(text.to_string()))
}

impl serde::Serialize for AllowEntry {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for AllowEntry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<AllowEntry, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A run's allowlist.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowlist {
    entries: Vec<AllowEntry>,
}

impl Allowlist {
    /// Parses every entry; the first that does not parse is the error.
    pub fn parse(entries: &[impl AsRef<str>]) -> Result<Allowlist, AllowError> {
        entries
            .iter()
            .map(|entry| entry.as_ref().parse())
            .collect::<Result<Vec<_>, _>>()
            .map(Allowlist::from)
    }

    /// The entries, in the order given.
    pub fn entries(&self) -> &[AllowEntry] {
        &self.entries
    }

    /// The first entry covering `host` on `port` as the client named it
    /// (a listed name, or a listed address or range for an IP literal).
    pub fn name_rule(&self, host: &Host, port: u16) -> Option<&AllowEntry> {
        self.entries.iter().find(|e| e.covers_host(host, port))
    }

    /// The first address or range entry covering a resolved address on
    /// `port`.
    pub fn address_rule(&self, ip: IpAddr, port: u16) -> Option<&AllowEntry> {
        self.entries.iter().find(|e| e.covers_address(ip, port))
    }
}

impl From<Vec<AllowEntry>> for Allowlist {
    fn from(entries: Vec<AllowEntry>) -> Allowlist {
        Allowlist { entries }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(text: &str) -> AllowEntry {
        match text.parse() {
            Ok(entry) => entry,
            Err(error) => panic!("{text}: {error}"),
        }
    }

    fn problem(text: &str) -> EntryProblem {
        match text.parse::<AllowEntry>() {
            Ok(entry) => panic!("{text} parsed as {entry:?}"),
            Err(error) => {
                assert_eq!(error.entry, text);
                error.problem
            }
        }
    }

    fn name(text: &str) -> Host {
        Host::Name(text.into())
    }

    #[test]
    fn forms_parse_into_their_patterns() {
        assert_eq!(
            entry("Registry.NPMjs.org."),
            AllowEntry {
                host: HostPattern::Name("registry.npmjs.org".into()),
                port: PortPattern::Default
            }
        );
        assert_eq!(
            entry("*.pythonhosted.org:443"),
            AllowEntry {
                host: HostPattern::Below("pythonhosted.org".into()),
                port: PortPattern::One(443)
            }
        );
        assert_eq!(entry("*:*").host, HostPattern::AnyName);
        assert_eq!(entry("*:*").port, PortPattern::Any);
        assert_eq!(
            entry("1.2.3.4").host,
            HostPattern::Ip("1.2.3.4".parse().unwrap())
        );
        assert_eq!(
            entry("[::1]:8080"),
            AllowEntry {
                host: HostPattern::Ip("::1".parse().unwrap()),
                port: PortPattern::One(8080)
            }
        );
        assert_eq!(entry("::1").host, HostPattern::Ip("::1".parse().unwrap()));
        assert_eq!(
            entry("10.0.0.0/8:5432"),
            AllowEntry {
                host: HostPattern::Range(IpRange {
                    base: "10.0.0.0".parse().unwrap(),
                    prefix: 8
                }),
                port: PortPattern::One(5432)
            }
        );
        assert_eq!(
            entry("[fd00::/8]:*").host,
            HostPattern::Range(IpRange {
                base: "fd00::".parse().unwrap(),
                prefix: 8
            })
        );
        assert_eq!(entry("fd00::/8").port, PortPattern::Default);
        assert_eq!(
            entry("under_score.example").to_string(),
            "under_score.example"
        );
    }

    #[test]
    fn display_round_trips() {
        for text in [
            "registry.npmjs.org",
            "*.pythonhosted.org:443",
            "*",
            "*:*",
            "example.com:8080",
            "1.2.3.4",
            "1.2.3.4:22",
            "[::1]",
            "[::1]:443",
            "10.0.0.0/8:5432",
            "0.0.0.0/0",
            "[fd00::/8]:*",
            "[::/0]",
            "192.168.1.7/32",
        ] {
            let parsed = entry(text);
            assert_eq!(parsed.to_string(), text);
            assert_eq!(entry(&parsed.to_string()), parsed);
        }
        // Non-canonical spellings print canonically and still round-trip.
        assert_eq!(entry("EXAMPLE.com.:80").to_string(), "example.com:80");
        assert_eq!(entry("fd00:0::/8").to_string(), "[fd00::/8]");
    }

    #[test]
    fn bad_entries_name_what_is_wrong() {
        assert_eq!(problem(""), EntryProblem::Empty);
        assert_eq!(problem("a b"), EntryProblem::Whitespace);
        assert_eq!(problem("a.com:0"), EntryProblem::BadPort("0".into()));
        assert_eq!(
            problem("a.com:65536"),
            EntryProblem::BadPort("65536".into())
        );
        assert_eq!(problem("a.com:+80"), EntryProblem::BadPort("+80".into()));
        assert_eq!(problem("a.com:"), EntryProblem::BadPort("".into()));
        assert_eq!(problem("a*.com"), EntryProblem::MisplacedWildcard);
        assert_eq!(problem("*.*.com"), EntryProblem::MisplacedWildcard);
        assert_eq!(problem("a.*"), EntryProblem::MisplacedWildcard);
        assert_eq!(
            problem("a..com"),
            EntryProblem::BadName(NameProblem::EmptyLabel)
        );
        assert_eq!(problem("*."), EntryProblem::BadName(NameProblem::Empty));
        assert_eq!(
            problem("bücher.de"),
            EntryProblem::BadName(NameProblem::BadCharacter('ü'))
        );
        assert_eq!(
            problem("127.1"),
            EntryProblem::BadName(NameProblem::NumericName)
        );
        assert_eq!(
            problem("0x7f.0.0.1"),
            EntryProblem::BadName(NameProblem::NumericName)
        );
        assert_eq!(
            problem("10.0.0.0/33"),
            EntryProblem::BadRange("10.0.0.0/33".into())
        );
        assert_eq!(problem("a.com/8"), EntryProblem::BadRange("a.com/8".into()));
        assert_eq!(
            problem("10.0.0.1/8"),
            EntryProblem::HostBitsSet("10.0.0.0/8".into())
        );
        assert_eq!(problem("::1:443x"), EntryProblem::UnbracketedIpv6);
        assert_eq!(problem("[1.2.3.4]:80"), EntryProblem::BadBrackets);
        assert_eq!(problem("[::1]80"), EntryProblem::BadBrackets);
        assert_eq!(problem("[::1"), EntryProblem::BadBrackets);
        let long = format!("{}.com", "a.".repeat(130));
        assert_eq!(problem(&long), EntryProblem::BadName(NameProblem::TooLong));
        let message = "a.com:http".parse::<AllowEntry>().unwrap_err().to_string();
        assert!(message.contains("\"a.com:http\""), "{message}");
        assert!(message.contains("not a port"), "{message}");
    }

    #[test]
    fn names_match_exactly_and_wildcards_only_below() {
        let list =
            Allowlist::parse(&["api.example.com", "*.pythonhosted.org:443", "h.test:*"]).unwrap();
        assert!(list.name_rule(&name("api.example.com"), 443).is_some());
        assert!(list.name_rule(&name("api.example.com"), 80).is_some());
        assert!(list.name_rule(&name("api.example.com"), 8080).is_none());
        assert!(list.name_rule(&name("x.api.example.com"), 443).is_none());
        assert!(list.name_rule(&name("example.com"), 443).is_none());
        assert!(list
            .name_rule(&name("files.pythonhosted.org"), 443)
            .is_some());
        assert!(list.name_rule(&name("a.b.pythonhosted.org"), 443).is_some());
        assert!(list.name_rule(&name("pythonhosted.org"), 443).is_none());
        assert!(list.name_rule(&name("evilpythonhosted.org"), 443).is_none());
        assert!(list
            .name_rule(&name("files.pythonhosted.org"), 80)
            .is_none());
        assert!(list.name_rule(&name("h.test"), 1).is_some());
        assert_eq!(
            list.name_rule(&name("h.test"), 9).map(ToString::to_string),
            Some("h.test:*".to_string())
        );
    }

    #[test]
    fn star_covers_names_never_addresses() {
        let list = Allowlist::parse(&["*:*"]).unwrap();
        assert!(list.name_rule(&name("anything.example"), 22).is_some());
        let ip = Host::Ip("93.184.216.34".parse().unwrap());
        assert!(list.name_rule(&ip, 443).is_none());
        assert!(list
            .address_rule("93.184.216.34".parse().unwrap(), 443)
            .is_none());
    }

    #[test]
    fn addresses_and_ranges_cover_literals_and_resolved_addresses() {
        let list = Allowlist::parse(&[
            "10.0.0.0/8:5432",
            "127.0.0.1:8080",
            "[fd00::/8]:*",
            "api.test",
        ])
        .unwrap();
        let ip = |t: &str| t.parse::<IpAddr>().unwrap();
        assert!(list.name_rule(&Host::Ip(ip("10.9.8.7")), 5432).is_some());
        assert!(list.name_rule(&Host::Ip(ip("10.9.8.7")), 5433).is_none());
        assert!(list.name_rule(&Host::Ip(ip("11.0.0.1")), 5432).is_none());
        assert!(list.address_rule(ip("10.1.1.1"), 5432).is_some());
        assert!(list.address_rule(ip("::ffff:10.1.1.1"), 5432).is_some());
        assert!(list.address_rule(ip("127.0.0.1"), 8080).is_some());
        assert!(list.address_rule(ip("::ffff:127.0.0.1"), 8080).is_some());
        assert!(list.address_rule(ip("127.0.0.1"), 443).is_none());
        assert!(list.address_rule(ip("fd12::1"), 1).is_some());
        assert!(list.address_rule(ip("fe80::1"), 1).is_none());
        // A name entry lets no address through.
        assert!(list.address_rule(ip("1.2.3.4"), 443).is_none());
        assert!(list.name_rule(&name("127.0.0.1.nip.io"), 8080).is_none());
    }

    #[test]
    fn hosts_parse_from_what_clients_send() {
        assert_eq!(Host::parse("Example.COM.").unwrap(), name("example.com"));
        assert_eq!(
            Host::parse("[::1]").unwrap(),
            Host::Ip("::1".parse().unwrap())
        );
        assert_eq!(
            Host::parse("::1").unwrap(),
            Host::Ip("::1".parse().unwrap())
        );
        assert_eq!(
            Host::parse("1.2.3.4").unwrap(),
            Host::Ip("1.2.3.4".parse().unwrap())
        );
        assert_eq!(
            Host::parse("2130706433").unwrap_err().problem,
            NameProblem::NumericName
        );
        assert_eq!(
            Host::parse("[::1").unwrap_err().problem,
            NameProblem::UnclosedBracket
        );
        assert_eq!(
            Host::parse("[1.2.3.4]").unwrap_err().problem,
            NameProblem::BadIpv6
        );
        assert_eq!(Host::parse("").unwrap_err().problem, NameProblem::Empty);
        assert_eq!(
            Host::parse("a/b").unwrap_err().problem,
            NameProblem::BadCharacter('/')
        );
        assert_eq!(
            Host::parse("a\0b").unwrap_err().problem,
            NameProblem::BadCharacter('\0')
        );
        assert_eq!(Host::Ip("::1".parse().unwrap()).with_port(443), "[::1]:443");
        assert_eq!(name("a.test").with_port(80), "a.test:80");
    }

    #[test]
    fn targets_split_and_match_like_entries() {
        assert_eq!(split_target("a.test:443"), Some((name("a.test"), 443)));
        assert_eq!(
            split_target("[::1]:80"),
            Some((Host::Ip("::1".parse().unwrap()), 80))
        );
        assert_eq!(split_target("a.test"), None);
        assert_eq!(split_target("a.test:0"), None);
        assert_eq!(split_target("::1:80"), None);
        assert_eq!(split_target("a.test:-1"), None);

        assert!(target_matches("api.example.com", "api.example.com:443"));
        assert!(target_matches("api.example.com", "API.example.com:80"));
        assert!(!target_matches("api.example.com", "api.example.com:8080"));
        assert!(target_matches(
            "api.example.com:8080",
            "api.example.com:8080"
        ));
        assert!(target_matches("*.example.com", "a.b.example.com:443"));
        assert!(!target_matches("*.example.com", "example.com:443"));
        assert!(!target_matches("*", "10.0.0.1:443"));
        assert!(target_matches("10.0.0.0/8:*", "10.0.0.1:22"));
        // A pattern that is no entry matches nothing, not everything.
        assert!(!target_matches(
            "api.example.com:http",
            "api.example.com:80"
        ));
        assert!(!target_matches("**", "a.test:443"));
        assert!(!target_matches("", "a.test:443"));
    }

    #[test]
    fn entries_serialize_as_strings() {
        let list = Allowlist::parse(&["a.test", "[fd00::/8]:*"]).unwrap();
        let json = serde_json::to_string(list.entries()).unwrap();
        assert_eq!(json, r#"["a.test","[fd00::/8]:*"]"#);
        let back: Vec<AllowEntry> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, list.entries());
        let error = serde_json::from_str::<AllowEntry>(r#""a..b""#).unwrap_err();
        assert!(error.to_string().contains("empty label"), "{error}");
    }
}

/// Checks one entry as a profile or a flag writes it.
pub fn check_entry(entry: &str) -> Result<(), AllowError> {
    entry.trim().parse::<AllowEntry>().map(|_| ())
}

/// Checks a name a profile or `--resolve` pins (a name, never an address).
pub fn check_name(name: &str) -> Result<(), HostError> {
    match Host::parse(name)? {
        Host::Name(_) => Ok(()),
        Host::Ip(_) => Err(HostError {
            host: name.to_string(),
            problem: NameProblem::NumericName,
        }),
    }
}

/// Whether everything `entry` covers is covered by one of `outer`'s
/// entries: a skill's or a client's list must stay within the profile's.
/// An entry that does not parse is within nothing.
pub fn entry_within(entry: &str, outer: &[String]) -> bool {
    let Ok(inner) = entry.parse::<AllowEntry>() else {
        return false;
    };
    let outer: Vec<AllowEntry> = outer.iter().filter_map(|o| o.parse().ok()).collect();
    let ports_within = |wider: PortPattern| match inner.port {
        PortPattern::Any => wider == PortPattern::Any,
        PortPattern::Default => DEFAULT_PORTS.iter().all(|p| wider.covers(*p)),
        PortPattern::One(port) => wider.covers(port),
    };
    let hosts_within = |wider: &HostPattern| match (&inner.host, wider) {
        (a, b) if a == b => true,
        (HostPattern::Name(name), _) => AllowEntry {
            host: wider.clone(),
            port: PortPattern::Any,
        }
        .covers_host(&Host::Name(name.clone()), 1),
        (HostPattern::Below(suffix), HostPattern::Below(wider)) => suffix
            .strip_suffix(wider.as_str())
            .is_some_and(|head| head.ends_with('.')),
        (HostPattern::Below(_), HostPattern::AnyName) => true,
        (HostPattern::Ip(ip), HostPattern::Range(range)) => range.contains(*ip),
        (HostPattern::Range(inner), HostPattern::Range(range)) => {
            inner.prefix >= range.prefix && range.contains(inner.base)
        }
        _ => false,
    };
    outer
        .iter()
        .any(|wider| hosts_within(&wider.host) && ports_within(wider.port))
}

#[cfg(test)]
mod within_tests {
    use super::entry_within;

    #[test]
    fn an_entry_is_within_a_list_only_when_the_list_covers_all_it_covers() {
        let outer = [
            "api.example.com".to_string(),
            "*.pythonhosted.org:443".to_string(),
            "10.0.0.0/8:5432".to_string(),
        ];
        assert!(entry_within("api.example.com", &outer));
        assert!(entry_within("api.example.com:443", &outer));
        assert!(!entry_within("api.example.com:8080", &outer));
        assert!(!entry_within("api.example.com:*", &outer));
        assert!(entry_within("files.pythonhosted.org:443", &outer));
        assert!(entry_within("*.a.pythonhosted.org:443", &outer));
        // Port 80 as well as 443: wider than the outer entry.
        assert!(!entry_within("files.pythonhosted.org", &outer));
        assert!(!entry_within("pythonhosted.org:443", &outer));
        assert!(entry_within("10.1.2.3:5432", &outer));
        assert!(entry_within("10.1.0.0/16:5432", &outer));
        assert!(!entry_within("10.0.0.0/7:5432", &outer));
        assert!(!entry_within("*", &outer));
        assert!(!entry_within("not an entry", &outer));
    }
}
