//! Listen addresses as operators write them: `IP:PORT`, `[v6]:PORT`, `localhost:PORT` or a bare
//! port (both on 127.0.0.1: nothing listens beyond this machine unless told to), in `serve
//! --listen`, `listen` and `metrics_listen` (where YAML may give the port as a number).

use std::net::{Ipv4Addr, SocketAddr};

/// The forms a listen address may take, for error messages.
pub const LISTEN_FORMS: &str = "expected PORT, localhost:PORT, IP:PORT or [IPv6]:PORT \
     (e.g. 18080, localhost:18080, 0.0.0.0:18080, [::1]:18080)";

/// A listen address that is none of the accepted forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid listen address {given:?}: {LISTEN_FORMS}")]
pub struct ListenError {
    /// What was given.
    pub given: String,
}

/// Parse a listen address: `IP:PORT`, `[v6]:PORT`, `localhost:PORT` (127.0.0.1) or a bare
/// `PORT` (127.0.0.1).
pub fn parse_listen(text: &str) -> Result<SocketAddr, ListenError> {
    let value = text.trim();
    let error = || ListenError {
        given: text.to_owned(),
    };
    if let Ok(addr) = value.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        let port = value.parse::<u16>().map_err(|_| error())?;
        return Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    }
    if let Some((host, port)) = value.rsplit_once(':')
        && host.eq_ignore_ascii_case("localhost")
        && !port.is_empty()
        && port.bytes().all(|b| b.is_ascii_digit())
    {
        let port = port.parse::<u16>().map_err(|_| error())?;
        return Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    }
    Err(error())
}

/// A listen address in a configuration layer: a string of any accepted form, or a port number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ListenAddr(pub(super) SocketAddr);

impl<'de> serde::Deserialize<'de> for ListenAddr {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        match serde_json::Value::deserialize(deserializer)? {
            serde_json::Value::String(s) => {
                parse_listen(&s).map(ListenAddr).map_err(D::Error::custom)
            }
            serde_json::Value::Number(n) => n
                .as_u64()
                .and_then(|p| u16::try_from(p).ok())
                .map(|port| ListenAddr(SocketAddr::from((Ipv4Addr::LOCALHOST, port))))
                .ok_or_else(|| {
                    D::Error::custom(format!("invalid listen address {n}: {LISTEN_FORMS}"))
                }),
            other => Err(D::Error::custom(format!(
                "invalid listen address {other}: {LISTEN_FORMS}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_accepted_form_parses_and_a_wrong_one_shows_the_forms() {
        let local = |port| SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        assert_eq!(parse_listen("19203"), Ok(local(19203)));
        assert_eq!(parse_listen("localhost:19203"), Ok(local(19203)));
        assert_eq!(parse_listen("LOCALHOST:1"), Ok(local(1)));
        for literal in ["0.0.0.0:8080", "[::1]:8080", "127.0.0.2:9"] {
            let parsed = parse_listen(literal).map(|a| a.to_string());
            assert_eq!(parsed.as_deref(), Ok(literal));
        }
        for bad in [
            "",
            "localhost",
            "70000",
            "localhost:x",
            "example.com:80",
            ":80",
        ] {
            let err = parse_listen(bad).expect_err(bad).to_string();
            assert!(
                err.contains("localhost:PORT") && err.contains("[IPv6]:PORT"),
                "{err}"
            );
        }
    }

    #[test]
    fn a_yaml_port_number_is_a_loopback_address() {
        let parsed: ListenAddr = serde_json::from_value(serde_json::json!(19205)).expect("port");
        assert_eq!(parsed.0, SocketAddr::from((Ipv4Addr::LOCALHOST, 19205)));
        assert!(serde_json::from_value::<ListenAddr>(serde_json::json!(-1)).is_err());
        assert!(serde_json::from_value::<ListenAddr>(serde_json::json!(true)).is_err());
    }
}
