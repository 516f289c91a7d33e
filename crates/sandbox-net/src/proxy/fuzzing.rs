//! The proxy's readers over bytes in memory, for the fuzz targets
//! (`crate::fuzzing`): the same functions a connection runs, fed from a
//! slice instead of a socket.
use std::future::Future;
use std::io;
use std::time::Duration;

use tokio::time::Instant;

use super::forward::Request;
use super::http1::{
    copy_body, copy_chunked, keeps_alive, parse_request, relay_response, request_body, values,
};
use super::inbound::Inbound;
use super::socks::{socks_greeting, socks_request, SocksRequest};
use sandbox::net::allow::split_target;

fn block_on<F: Future>(future: F) -> F::Output {
    thread_local! {
        static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a current-thread runtime builds");
    }
    RUNTIME.with(|runtime| runtime.block_on(future))
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

/// A client's request head, then its body as the head frames it.
pub fn request(bytes: &[u8]) {
    let head = match parse_request(bytes) {
        Ok(Some(head)) => head,
        Ok(None) | Err(_) => return,
    };
    let rest = &bytes[head.len.min(bytes.len())..];
    if head.method == "CONNECT" {
        let _ = split_target(&head.target);
        return;
    }
    let _ = keeps_alive(head.minor, &head.headers);
    let Ok(request) = Request::check(head) else {
        return;
    };
    let _ = request.requested();
    // What the origin server gets must read as the request the proxy
    // checked: one complete head, for the same target, whose body is
    // framed the same way (anything else is request smuggling).
    let origin = request.origin_head();
    match parse_request(&origin) {
        Ok(Some(forwarded)) => {
            assert_eq!(forwarded.len, origin.len(), "the head ends where it should");
            assert_eq!(forwarded.method, request.head.method);
            assert_eq!(forwarded.target, request.uri.path);
            assert_eq!(request_body(&forwarded.headers), Ok(request.body));
            let hosts: Vec<&[u8]> = values(&forwarded.headers, "host").collect();
            assert_eq!(hosts.len(), 1, "one Host header names the target");
            assert!(
                !forwarded.headers.iter().any(|(name, _)| name
                    .get(..6)
                    .is_some_and(|p| p.eq_ignore_ascii_case("proxy-"))),
                "Proxy-* fields are the proxy's"
            );
        }
        Ok(None) | Err(_) => panic!(
            "the forwarded head does not parse: {:?}",
            String::from_utf8_lossy(&origin)
        ),
    }
    let mut client = Inbound::new(rest);
    let mut sink = Vec::new();
    let _ = block_on(copy_body(
        &mut client,
        &mut sink,
        request.body,
        &mut Vec::new(),
    ));
    // A body is forwarded as it came, never rewritten.
    assert_eq!(sink, rest[..sink.len()]);
}

/// An upstream's answer as relayed to the client; the first byte says
/// whether the request was a HEAD.
pub fn response(bytes: &[u8]) {
    let Some((&flags, rest)) = bytes.split_first() else {
        return;
    };
    let mut upstream = Inbound::new(rest);
    let mut client = Vec::new();
    let _ = block_on(relay_response(
        &mut upstream,
        &mut client,
        flags & 1 == 1,
        &mut Vec::new(),
    ));
    // A response is relayed as it came, never rewritten.
    assert_eq!(client, rest[..client.len()]);
}

/// A chunked body on its own.
pub fn chunked(bytes: &[u8]) {
    let mut from = Inbound::new(bytes);
    let mut to = Vec::new();
    if block_on(copy_chunked(&mut from, &mut to, &mut Vec::new())).is_ok() {
        // What was forwarded is exactly what was read: the proxy never
        // rewrites a body.
        assert_eq!(to, bytes[..to.len()]);
    }
}

/// A SOCKS5 greeting and request (the byte that picked SOCKS included).
pub fn socks5(bytes: &[u8]) {
    let mut client = Inbound::new(bytes);
    let _ = block_on(async {
        if socks_greeting(&mut client, deadline()).await? {
            if let SocksRequest::Connect(host, port) =
                socks_request(&mut client, deadline()).await?
            {
                assert_ne!(port, 0);
                let _ = format!("SOCKS5 {}", host.with_port(port));
            }
        }
        io::Result::Ok(())
    });
}
