//! Entry points for the coverage-guided fuzz targets in `fuzz/` that read
//! what a sandbox sends the proxy (see the core's `sandbox::fuzzing`). Not
//! a stable API: hidden from the documentation, shaped by the targets.

/// A client's request head and body at the allowlist proxy.
pub fn proxy_request(bytes: &[u8]) {
    crate::proxy::fuzzing::request(bytes);
}

/// An upstream's response as the proxy relays it.
pub fn proxy_response(bytes: &[u8]) {
    crate::proxy::fuzzing::response(bytes);
}

/// A chunked body as the proxy forwards it.
pub fn proxy_chunked(bytes: &[u8]) {
    crate::proxy::fuzzing::chunked(bytes);
}

/// A SOCKS5 greeting and request at the proxy.
pub fn proxy_socks5(bytes: &[u8]) {
    crate::proxy::fuzzing::socks5(bytes);
}

#[cfg(test)]
mod tests {
    //! The checked-in corpus (fuzz/corpus/TARGET) replays under `cargo test`.
    use sandbox::fuzzing::replay;

    #[test]
    fn proxy_request() {
        replay("proxy_request", super::proxy_request);
    }
    #[test]
    fn proxy_response() {
        replay("proxy_response", super::proxy_response);
    }
    #[test]
    fn proxy_chunked() {
        replay("proxy_chunked", super::proxy_chunked);
    }
    #[test]
    fn proxy_socks5() {
        replay("proxy_socks5", super::proxy_socks5);
    }
}
