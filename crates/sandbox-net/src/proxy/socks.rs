//! SOCKS5 (RFC 1928): "no authentication" and CONNECT only; the target is
//! decided like any other, then relayed.

use std::io;

use tokio::io::{AsyncRead, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::time::Instant;

use super::forward::relay;
use super::gate::Failure;
use super::inbound::Inbound;
use super::Proxy;
use sandbox::net::allow::Host;

impl Proxy {
    pub(super) async fn socks(
        &self,
        mut client: Inbound<OwnedReadHalf>,
        mut write: OwnedWriteHalf,
        deadline: Instant,
    ) -> io::Result<()> {
        if !socks_greeting(&mut client, deadline).await? {
            // Credentials would only name the client, which is the sandbox.
            return write.write_all(&[SOCKS_VERSION, 0xff]).await;
        }
        write.write_all(&[SOCKS_VERSION, SOCKS_NO_AUTH]).await?;
        let (host, port) = match socks_request(&mut client, deadline).await? {
            SocksRequest::WrongVersion => return Ok(()),
            SocksRequest::Refused(code) => return socks_reply(&mut write, code).await,
            SocksRequest::Connect(host, port) => (host, port),
        };
        let requested = format!("SOCKS5 {}", host.with_port(port));
        match self.open(host, port, requested).await {
            Ok(upstream) => {
                // The bound address would tell the sandbox the host's
                // address; clients do not need it.
                socks_reply(&mut write, SOCKS_SUCCEEDED).await?;
                relay(client, write, upstream).await
            }
            Err(Failure::Refused(_)) => socks_reply(&mut write, SOCKS_NOT_ALLOWED).await,
            Err(Failure::Unresolved(_)) => socks_reply(&mut write, SOCKS_HOST_UNREACHABLE).await,
            Err(Failure::Unreachable(_)) => socks_reply(&mut write, SOCKS_REFUSED).await,
        }
    }
}

pub(super) const SOCKS_VERSION: u8 = 5;
pub(super) const SOCKS_NO_AUTH: u8 = 0;
pub(super) const SOCKS_CONNECT: u8 = 1;
pub(super) const SOCKS_SUCCEEDED: u8 = 0;
pub(super) const SOCKS_GENERAL_FAILURE: u8 = 1;
pub(super) const SOCKS_NOT_ALLOWED: u8 = 2;
pub(super) const SOCKS_HOST_UNREACHABLE: u8 = 4;
pub(super) const SOCKS_REFUSED: u8 = 5;
pub(super) const SOCKS_COMMAND_UNSUPPORTED: u8 = 7;
pub(super) const SOCKS_ADDRESS_TYPE_UNSUPPORTED: u8 = 8;

/// Reads a SOCKS5 greeting; whether the client offers "no authentication".
pub(super) async fn socks_greeting<R: AsyncRead + Unpin>(
    client: &mut Inbound<R>,
    deadline: Instant,
) -> io::Result<bool> {
    client.need(2, deadline).await?;
    let methods = usize::from(client.buf[1]);
    client.need(2 + methods, deadline).await?;
    let no_auth = client.buf[2..2 + methods].contains(&SOCKS_NO_AUTH);
    client.consume(2 + methods);
    Ok(no_auth)
}

/// What a SOCKS5 request (after the greeting) asks for.
#[derive(Debug, PartialEq)]
pub(super) enum SocksRequest {
    /// Not SOCKS version 5: the connection is closed unanswered.
    WrongVersion,
    /// Answered with this reply code and closed.
    Refused(u8),
    /// A CONNECT to a target the allowlist decides on.
    Connect(Host, u16),
}

pub(super) async fn socks_request<R: AsyncRead + Unpin>(
    client: &mut Inbound<R>,
    deadline: Instant,
) -> io::Result<SocksRequest> {
    client.need(4, deadline).await?;
    let (version, command, address_type) = (client.buf[0], client.buf[1], client.buf[3]);
    if version != SOCKS_VERSION {
        return Ok(SocksRequest::WrongVersion);
    }
    let (host, address_len) = match address_type {
        1 => {
            client.need(4 + 4 + 2, deadline).await?;
            let octets: [u8; 4] = client.buf[4..8].try_into().map_err(io::Error::other)?;
            (Some(Host::Ip(octets.into())), 4)
        }
        3 => {
            client.need(5, deadline).await?;
            let len = usize::from(client.buf[4]);
            client.need(5 + len + 2, deadline).await?;
            let host = std::str::from_utf8(&client.buf[5..5 + len])
                .ok()
                .and_then(|name| Host::parse(name).ok());
            (host, 1 + len)
        }
        4 => {
            client.need(4 + 16 + 2, deadline).await?;
            let octets: [u8; 16] = client.buf[4..20].try_into().map_err(io::Error::other)?;
            (Some(Host::Ip(octets.into())), 16)
        }
        _ => return Ok(SocksRequest::Refused(SOCKS_ADDRESS_TYPE_UNSUPPORTED)),
    };
    let port_at = 4 + address_len;
    let port = u16::from_be_bytes([client.buf[port_at], client.buf[port_at + 1]]);
    client.consume(port_at + 2);
    if command != SOCKS_CONNECT {
        // BIND and UDP ASSOCIATE would open ways in and out the
        // allowlist cannot see.
        return Ok(SocksRequest::Refused(SOCKS_COMMAND_UNSUPPORTED));
    }
    Ok(match host.filter(|_| port != 0) {
        Some(host) => SocksRequest::Connect(host, port),
        None => SocksRequest::Refused(SOCKS_GENERAL_FAILURE),
    })
}

pub(super) async fn socks_reply(write: &mut OwnedWriteHalf, code: u8) -> io::Result<()> {
    write
        .write_all(&[SOCKS_VERSION, code, 0, 1, 0, 0, 0, 0, 0, 0])
        .await
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use std::net::SocketAddr;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn socks5_connects_listed_names_and_refuses_others() {
        let port = echo_server().await;
        let allow = [format!("s.test:{port}"), format!("127.0.0.1:{port}")];
        let (proxy, gate) = start_proxy(
            &allow,
            &[("s.test", "127.0.0.1"), ("x.test", "127.0.0.1")],
            &[],
        )
        .await;

        async fn socks_connect(proxy: SocketAddr, name: &str, port: u16) -> (Client, u8) {
            let mut client = Client::connect(proxy).await;
            client.send(&[5, 2, 2, 0]).await;
            let mut choice = [0; 2];
            client.stream.read_exact(&mut choice).await.unwrap();
            assert_eq!(choice, [5, 0]);
            let mut request = vec![5, 1, 0, 3, name.len() as u8];
            request.extend_from_slice(name.as_bytes());
            request.extend_from_slice(&port.to_be_bytes());
            client.send(&request).await;
            let mut reply = [0; 10];
            client.stream.read_exact(&mut reply).await.unwrap();
            (client, reply[1])
        }

        let (mut client, code) = socks_connect(proxy, "s.test", port).await;
        assert_eq!(code, 0);
        assert_eq!(client.echo("over socks").await, "over socks");
        let (_, code) = socks_connect(proxy, "x.test", port).await;
        assert_eq!(code, SOCKS_NOT_ALLOWED);
        let records = gate.records();
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].requested, format!("SOCKS5 s.test:{port}"));
        assert!(records[0].allowed);
        assert!(!records[1].allowed);

        // BIND and UDP ASSOCIATE are refused outright.
        for command in [2u8, 3] {
            let mut client = Client::connect(proxy).await;
            client.send(&[5, 1, 0]).await;
            let mut choice = [0; 2];
            client.stream.read_exact(&mut choice).await.unwrap();
            client.send(&[5, command, 0, 1, 127, 0, 0, 1, 0, 80]).await;
            let mut reply = [0; 10];
            client.stream.read_exact(&mut reply).await.unwrap();
            assert_eq!(reply[1], SOCKS_COMMAND_UNSUPPORTED);
        }
        // Only "no authentication" is offered.
        let mut client = Client::connect(proxy).await;
        client.send(&[5, 1, 2]).await;
        let mut choice = [0; 2];
        client.stream.read_exact(&mut choice).await.unwrap();
        assert_eq!(choice, [5, 0xff]);
    }
}
