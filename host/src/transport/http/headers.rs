//! The request headers the endpoint reads, gathered in one pass over hyper's header map: a lookup
//! by name hashes the name and probes the map again each time, and a `POST /mcp` reads a dozen of
//! them (its 2026 `Mcp-*` names are custom ones, the slow kind to hash).

use hyper::header::{HeaderMap, HeaderValue};

/// A header the endpoint reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Header {
    ContentLength,
    ContentType,
    Authorization,
    Origin,
    Host,
    /// `Mcp-Session-Id`: the legacy session a request belongs to.
    Session,
    /// `MCP-Protocol-Version`.
    ProtocolVersion,
    /// `Mcp-Method`: mirrors the body's method (2026).
    Method,
    /// `Mcp-Name`: mirrors the body's tool, resource or prompt name (2026).
    McpName,
    /// W3C trace context.
    TraceParent,
    /// W3C trace state.
    TraceState,
}

const COUNT: usize = Header::TraceState as usize + 1;

impl Header {
    /// The header `name` (lower case, as hyper gives it) stands for, if the endpoint reads it.
    fn of(name: &str) -> Option<Header> {
        Some(match name {
            "content-length" => Header::ContentLength,
            "content-type" => Header::ContentType,
            "authorization" => Header::Authorization,
            "origin" => Header::Origin,
            "host" => Header::Host,
            "mcp-session-id" => Header::Session,
            "mcp-protocol-version" => Header::ProtocolVersion,
            "mcp-method" => Header::Method,
            "mcp-name" => Header::McpName,
            "traceparent" => Header::TraceParent,
            "tracestate" => Header::TraceState,
            _ => return None,
        })
    }

    fn as_str(self) -> &'static str {
        match self {
            Header::ContentLength => "content-length",
            Header::ContentType => "content-type",
            Header::Authorization => "authorization",
            Header::Origin => "origin",
            Header::Host => "host",
            Header::Session => "mcp-session-id",
            Header::ProtocolVersion => "mcp-protocol-version",
            Header::Method => "mcp-method",
            Header::McpName => "mcp-name",
            Header::TraceParent => "traceparent",
            Header::TraceState => "tracestate",
        }
    }
}

/// The headers of one request that the endpoint reads: the first value of each [`Header`], whether
/// it came more than once, and the `Mcp-Param-{Name}` headers.
#[derive(Debug, Default)]
pub(crate) struct RequestHeaders<'a> {
    first: [Option<&'a HeaderValue>; COUNT],
    repeated: [bool; COUNT],
    params: Vec<(&'a str, &'a HeaderValue)>,
}

impl<'a> RequestHeaders<'a> {
    /// Walk `map` once.
    pub(crate) fn read(map: &'a HeaderMap) -> Self {
        let mut seen = RequestHeaders::default();
        for (name, value) in map {
            let name = name.as_str();
            match Header::of(name) {
                Some(known) => {
                    let i = known as usize;
                    if seen.first[i].is_some() {
                        seen.repeated[i] = true;
                    } else {
                        seen.first[i] = Some(value);
                    }
                }
                None => {
                    if let Some(param) = name.strip_prefix("mcp-param-") {
                        seen.params.push((param, value));
                    }
                }
            }
        }
        seen
    }

    /// A header's (first) value, trimmed; `None` when absent or not visible ASCII.
    pub(crate) fn get(&self, name: Header) -> Option<&'a str> {
        visible(self.first[name as usize]?)
    }

    /// A header that must be checked when present: its single value as visible ASCII, `Ok(None)`
    /// when absent, and an error when it is repeated or not plain ASCII (such a value is refused,
    /// never treated as absent).
    pub(crate) fn single(&self, name: Header) -> Result<Option<&'a str>, String> {
        let Some(value) = self.first[name as usize] else {
            return Ok(None);
        };
        if self.repeated[name as usize] {
            return Err(format!("more than one {} header", name.as_str()));
        }
        visible(value)
            .map(Some)
            .ok_or_else(|| format!("the {} header is not plain ASCII", name.as_str()))
    }

    /// The bearer token of the `Authorization` header.
    pub(crate) fn bearer(&self) -> Option<&'a str> {
        let (scheme, token) = self.get(Header::Authorization)?.split_once(' ')?;
        scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| token.trim_ascii())
            .filter(|t| !t.is_empty())
    }

    /// The `Mcp-Param-{Name}` headers that are visible ASCII: (lower-case `Name`, raw value).
    pub(crate) fn params(&self) -> impl Iterator<Item = (&'a str, &'a str)> + '_ {
        self.params
            .iter()
            .filter_map(|&(name, value)| Some((name, value.to_str().ok()?)))
    }
}

/// A value as visible ASCII, trimmed (hyper's `to_str` lets nothing else through, so trimming
/// ASCII whitespace is trimming all of it).
fn visible(value: &HeaderValue) -> Option<&str> {
    value.to_str().ok().map(str::trim_ascii)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_values_repeats_and_params_come_from_one_pass() {
        let mut map = HeaderMap::new();
        map.insert("mcp-method", HeaderValue::from_static(" tools/call "));
        map.append("origin", HeaderValue::from_static("http://a"));
        map.append("origin", HeaderValue::from_static("http://b"));
        map.insert("host", HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap());
        map.insert("mcp-param-region", HeaderValue::from_static("eu"));
        map.insert("authorization", HeaderValue::from_static("Bearer  tok "));
        let seen = RequestHeaders::read(&map);
        assert_eq!(seen.get(Header::Method), Some("tools/call"));
        assert_eq!(seen.get(Header::Origin), Some("http://a"));
        assert_eq!(
            seen.single(Header::Origin),
            Err("more than one origin header".into())
        );
        assert_eq!(seen.get(Header::Host), None);
        assert_eq!(
            seen.single(Header::Host),
            Err("the host header is not plain ASCII".into())
        );
        assert_eq!(seen.single(Header::Session), Ok(None));
        assert_eq!(seen.bearer(), Some("tok"));
        assert_eq!(seen.params().collect::<Vec<_>>(), [("region", "eu")]);
    }

    #[test]
    fn every_name_reads_back_as_itself() {
        let all = [
            Header::ContentLength,
            Header::ContentType,
            Header::Authorization,
            Header::Origin,
            Header::Host,
            Header::Session,
            Header::ProtocolVersion,
            Header::Method,
            Header::McpName,
            Header::TraceParent,
            Header::TraceState,
        ];
        assert_eq!(all.len(), COUNT);
        for seen_name in all {
            let mut map = HeaderMap::new();
            map.insert(
                hyper::header::HeaderName::from_static(seen_name.as_str()),
                HeaderValue::from_static("v"),
            );
            assert_eq!(Header::of(seen_name.as_str()), Some(seen_name));
            assert_eq!(RequestHeaders::read(&map).get(seen_name), Some("v"));
        }
    }
}
