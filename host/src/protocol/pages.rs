//! Cursor pagination of the list methods (`tools/list`, `resources/list`,
//! `resources/templates/list`, `prompts/list`): pages in key order, an opaque cursor naming the last
//! key sent, the configured page size.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde_json::Value;

use super::jsonrpc::RpcError;
use super::{Answer, Request};
use crate::registry::Listing;

/// The page after the request's cursor of what `items` yields (`(key, listing)` in key order,
/// starting after the key it is given: the registry's maps seek to it, so a late page costs no more
/// than the first), as a cacheable result with the listings under `member` and `nextCursor` when
/// more follow, written as JSON text.
pub(crate) fn page<'a, I: Iterator<Item = (&'a str, &'a Listing)>>(
    req: &Request<'_>,
    member: &str,
    items: impl FnOnce(Option<&str>) -> I,
) -> Result<Answer, RpcError> {
    let after = match req.params.get("cursor") {
        None | Some(Value::Null) => None,
        Some(Value::String(c)) => Some(
            B64.decode(c)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(|| RpcError::invalid_params("invalid cursor"))?,
        ),
        Some(_) => return Err(RpcError::invalid_params("invalid cursor")),
    };
    let page_size = req.config.list_page_size.max(1);
    // The page is the stored listings' text, copied: nothing is serialised again.
    let mut text = Vec::with_capacity(4096);
    let write = |v: &Value, text: &mut Vec<u8>| serde_json::to_writer(text, v);
    text.push(b'{');
    write(&Value::from(member), &mut text).map_err(internal)?;
    text.extend_from_slice(b":[");
    let mut last = None;
    let mut next = None;
    let items = items(after.as_deref()).filter(|(k, _)| after.as_deref().is_none_or(|a| *k > a));
    for (count, (key, listing)) in items.enumerate() {
        if count == page_size {
            next = last.map(|k: &str| B64.encode(k));
            break;
        }
        if count > 0 {
            text.push(b',');
        }
        text.extend_from_slice(listing.text().as_bytes());
        last = Some(key);
    }
    text.push(b']');
    if let Some(next) = next {
        text.extend_from_slice(br#","nextCursor":"#);
        write(&Value::from(next), &mut text).map_err(internal)?;
    }
    text.push(b'}');
    String::from_utf8(text).map(Answer::Page).map_err(internal)
}

/// A page that could not be written (never: listings are JSON values, written as UTF-8).
fn internal(e: impl std::fmt::Display) -> RpcError {
    RpcError::internal(format!("cannot write the page: {e}"))
}
