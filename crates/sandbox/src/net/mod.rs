//! The run's way out: a domain allowlist nobody bypasses.
//!
//! A sandbox with an allowlist keeps its own network namespace, whose only
//! interface is loopback. Init listens there on [`PROXY_PORT`] and hands
//! the listening socket to the run's *net process*, a child of the
//! supervisor that lives in the supervisor's network namespace: the
//! `sandbox-net` program (crates/sandbox-net), started by [`process`] and
//! spoken to over [`link`]. That process accepts the sandbox's
//! connections, speaks HTTP CONNECT, plain HTTP forwarding and SOCKS5,
//! decides on the name the client asked for ([`allow`], shared with the
//! profile checks and the broker), resolves it itself and refuses
//! addresses a name must not lead to, and performs the broker's
//! `net.http` requests ([`fetch`] holds their types). Names that are not
//! listed are decided by the run's broker (rules, grants, a person), which
//! also audits and counts every decision.
//!
//! A client that ignores the proxy variables has no route at all: nothing
//! but the proxy leads out of the namespace.

pub mod allow;
pub mod fetch;
pub mod link;
pub mod process;

/// The rule that refuses a connection to an address written as such
/// (`CONNECT 10.0.0.1:443`), whatever the allowlist lists: the proxy and
/// the broker's `net.http` both name it.
pub const ADDRESS_LITERAL_RULE: &str =
    "network: an address, not a name, and network.allow does not list it";

/// The port the proxy listens on inside the sandbox, on 127.0.0.1 (the
/// sandbox's own loopback: a fresh namespace, so it is always free).
pub const PROXY_PORT: u16 = 3128;

/// The variables that point a sandboxed program's clients at the proxy:
/// HTTP(S) through CONNECT or forwarding, SOCKS5 with names resolved by
/// the proxy (`socks5h`), and the sandbox's own loopback left direct.
/// Both spellings: curl reads only the lowercase `http_proxy`, Go and
/// Python read either.
pub fn proxy_environment() -> Vec<(&'static str, String)> {
    let http = format!("http://127.0.0.1:{PROXY_PORT}");
    let socks = format!("socks5h://127.0.0.1:{PROXY_PORT}");
    let direct = "localhost,127.0.0.1,::1".to_string();
    let mut vars = Vec::new();
    for (upper, lower, value) in [
        ("HTTP_PROXY", "http_proxy", &http),
        ("HTTPS_PROXY", "https_proxy", &http),
        ("ALL_PROXY", "all_proxy", &socks),
        ("NO_PROXY", "no_proxy", &direct),
    ] {
        vars.push((upper, value.clone()));
        vars.push((lower, value.clone()));
    }
    vars
}
