//! What one client may hold of the HTTP endpoint: connections per remote address and long-lived
//! streams per caller ([`Holdings`]), how long a response waits for a client that does not read
//! ([`WriteTimeout`]), and which address an anonymous caller has behind a trusted proxy
//! ([`client_address`], from `X-Forwarded-For`).

use std::collections::HashMap;
use std::future::Future as _;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::header::HeaderMap;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::config::HttpSettings;

/// How many of something each key (a remote address, a caller) holds.
#[derive(Debug, Default)]
pub(crate) struct Holdings {
    held: Mutex<HashMap<Arc<str>, usize>>,
}

impl Holdings {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, usize>> {
        // A panic while holding this lock leaves the counts consistent (each change is one step).
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// One more for `key`, unless it holds `max` already; given back when the permit is dropped.
    pub(crate) fn try_take(self: &Arc<Self>, key: &Arc<str>, max: usize) -> Option<Held> {
        let mut held = self.lock();
        let n = held.entry(Arc::clone(key)).or_default();
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(Held {
            holdings: Arc::clone(self),
            key: Arc::clone(key),
        })
    }

    /// How many `key` holds.
    #[cfg(test)]
    fn count(&self, key: &str) -> usize {
        self.lock().get(key).copied().unwrap_or(0)
    }
}

/// One thing held by a key, given back when dropped.
#[derive(Debug)]
pub(crate) struct Held {
    holdings: Arc<Holdings>,
    key: Arc<str>,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut held = self.holdings.lock();
        if let Some(n) = held.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.remove(&self.key);
            }
        }
    }
}

/// The address an anonymous caller has: the peer's own, or — when the peer is one of
/// `http.trusted_proxies` — the client `X-Forwarded-For` names: the nearest address in it that is
/// not itself a trusted proxy (the ones further left were written by the client and prove
/// nothing). An entry that is not an address ends the walk at the last trusted hop.
pub(crate) fn client_address(peer: IpAddr, headers: &HeaderMap, http: &HttpSettings) -> IpAddr {
    if http.trusted_proxies.is_empty() || !http.is_trusted_proxy(peer) {
        return peer;
    }
    let mut client = peer;
    let values: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    for entry in values.iter().rev().flat_map(|v| v.rsplit(',')) {
        let Some(ip) = parse_forwarded(entry) else {
            break;
        };
        client = ip;
        if !http.is_trusted_proxy(ip) {
            break;
        }
    }
    client
}

/// One `X-Forwarded-For` entry: an address, maybe with a port (`1.2.3.4:5`, `[::1]:5`).
fn parse_forwarded(entry: &str) -> Option<IpAddr> {
    let entry = entry.trim();
    if let Ok(ip) = entry.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    if let Some(rest) = entry.strip_prefix('[') {
        return rest.split(']').next()?.parse::<IpAddr>().ok();
    }
    let (host, port) = entry.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    host.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

/// An IO whose writes fail with `TimedOut` once one has waited `timeout` for the client to read
/// (its receive window full): hyper then closes the connection, and whatever the response held
/// (a large body, an SSE stream and its slot) goes with it. The timer is armed only while a write
/// waits.
pub(crate) struct WriteTimeout<T> {
    io: T,
    timeout: Duration,
    waiting: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<T> WriteTimeout<T> {
    /// `io`, whose writes may wait at most `timeout`.
    pub(crate) fn new(io: T, timeout: Duration) -> Self {
        WriteTimeout {
            io,
            timeout,
            waiting: None,
        }
    }

    /// A write that returned `polled`: ready ends the wait; pending starts or goes on with it,
    /// and fails once it has lasted the timeout.
    fn waited<R>(
        &mut self,
        polled: Poll<io::Result<R>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<R>> {
        if polled.is_ready() {
            self.waiting = None;
            return polled;
        }
        let timeout = self.timeout;
        let timer = self
            .waiting
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => {
                tracing::info!(
                    "closing a connection whose client read nothing of its response for {} s \
                     (http.write_timeout_secs)",
                    timeout.as_secs()
                );
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client did not read its response (http.write_timeout_secs)",
                )))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteTimeout<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteTimeout<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write(cx, buf);
        this.waited(polled, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.waited(polled, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_flush(cx);
        this.waited(polled, cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn proxies(nets: &[&str]) -> HttpSettings {
        HttpSettings {
            trusted_proxies: nets.iter().map(|n| n.parse().unwrap()).collect(),
            ..HttpSettings::default()
        }
    }

    fn xff(values: &[&'static str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append("x-forwarded-for", HeaderValue::from_static(v));
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn forwarded_for_counts_only_from_a_trusted_proxy_and_only_its_nearest_untrusted_entry() {
        let http = proxies(&["10.0.0.0/8"]);
        let proxy = ip("10.1.1.1");
        // Untrusted peer: its header is ignored.
        assert_eq!(
            client_address(ip("192.0.2.9"), &xff(&["203.0.113.5"]), &http),
            ip("192.0.2.9")
        );
        // Trusted: the rightmost address that is not a trusted proxy; what the client wrote
        // further left is not believed.
        let h = xff(&["6.6.6.6, 203.0.113.5, 10.2.2.2"]);
        assert_eq!(client_address(proxy, &h, &http), ip("203.0.113.5"));
        let h = xff(&["6.6.6.6", "203.0.113.5:4711"]);
        assert_eq!(client_address(proxy, &h, &http), ip("203.0.113.5"));
        let h = xff(&["[2001:db8::1]:80"]);
        assert_eq!(client_address(proxy, &h, &http), ip("2001:db8::1"));
        // Garbage stops the walk at the last trusted hop; no header: the proxy itself.
        let h = xff(&["203.0.113.5, unknown"]);
        assert_eq!(client_address(proxy, &h, &http), proxy);
        assert_eq!(client_address(proxy, &HeaderMap::new(), &http), proxy);
        // No trusted proxies (the default): never read.
        let none = HttpSettings::default();
        assert_eq!(client_address(proxy, &xff(&["203.0.113.5"]), &none), proxy);
    }

    #[test]
    fn holdings_are_bounded_per_key_and_given_back_when_dropped() {
        let h = Arc::new(Holdings::default());
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let first = h.try_take(&a, 2).unwrap();
        let _second = h.try_take(&a, 2).unwrap();
        assert!(h.try_take(&a, 2).is_none());
        assert!(h.try_take(&b, 2).is_some(), "another key has its own");
        drop(first);
        assert_eq!(h.count("a"), 1);
        assert!(h.try_take(&a, 2).is_some());
    }
}
