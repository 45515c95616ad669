//! Cursor pagination of the list methods (`tools/list`, `resources/list`,
//! `resources/templates/list`, `prompts/list`): pages in key order, an opaque cursor naming the last
//! key sent, the configured page size.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde_json::{Map, Value, json};

use super::jsonrpc::RpcError;
use super::{Answer, Request};

/// The page after the request's cursor of what `items` yields (`(key, listing)` in key order,
/// starting after the key it is given: the registry's maps seek to it, so a late page costs no more
/// than the first), as a cacheable result with the listings under `member` and `nextCursor` when
/// more follow.
pub(crate) fn page<'a, I: Iterator<Item = (&'a str, &'a Value)>>(
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
    let mut page = Vec::new();
    let mut last = None;
    let mut next = None;
    let items = items(after.as_deref());
    for (key, listing) in items.filter(|(k, _)| after.as_deref().is_none_or(|a| *k > a)) {
        if page.len() == page_size {
            next = last.map(|k: &str| B64.encode(k));
            break;
        }
        page.push(listing.clone());
        last = Some(key);
    }
    let mut result = Map::new();
    // Moved in: `json!` would deep-copy the whole page through `to_value`.
    result.insert(member.into(), Value::Array(page));
    if let Some(next) = next {
        result.insert("nextCursor".into(), json!(next));
    }
    Ok(Answer::cacheable(Value::Object(result)))
}
