//! What a `#[resource]` function returns: resource contents (text or binary) and the conversions
//! from the types a resource function may return.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One item of a resource read (MCP `TextResourceContents` or `BlobResourceContents`).
///
/// A resource function usually returns a `String` (text with the resource's declared MIME type) or a
/// `Serialize` struct (JSON text, `application/json`); return this type (or a `Vec` of it) to choose
/// the MIME type per read, return binary data, or return several items (for example the files of a
/// directory, each with its own URI). Items without a URI get the URI that was read.
///
/// ```
/// use mcp_plugin_sdk::ResourceContents;
/// let csv = ResourceContents::text("a,b\n1,2\n").with_mime_type("text/csv");
/// assert_eq!(csv.text.as_deref(), Some("a,b\n1,2\n"));
/// let png = ResourceContents::blob(&[0x89, b'P', b'N', b'G']).with_mime_type("image/png");
/// assert_eq!(png.blob.as_deref(), Some("iVBORw=="));
/// let child = ResourceContents::text("x").with_uri("file:///dir/x.txt");
/// assert_eq!(child.uri, "file:///dir/x.txt");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ResourceContents {
    /// The URI of this item (empty: the URI that was read).
    #[serde(default)]
    pub uri: String,
    /// Its MIME type (absent: the resource's declared one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Text contents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Binary contents, base64-encoded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob: Option<String>,
}

impl ResourceContents {
    /// Text contents.
    pub fn text(text: impl Into<String>) -> Self {
        ResourceContents {
            uri: String::new(),
            mime_type: None,
            text: Some(text.into()),
            blob: None,
        }
    }

    /// Binary contents from raw bytes (encoded to base64 here).
    pub fn blob(bytes: &[u8]) -> Self {
        Self::blob_base64(base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    /// Binary contents already encoded as base64 (used as is).
    ///
    /// ```
    /// use mcp_plugin_sdk::ResourceContents;
    /// assert_eq!(ResourceContents::blob_base64("AQID"), ResourceContents::blob(&[1, 2, 3]));
    /// ```
    pub fn blob_base64(data: impl Into<String>) -> Self {
        ResourceContents {
            uri: String::new(),
            mime_type: None,
            text: None,
            blob: Some(data.into()),
        }
    }

    /// This item with a MIME type.
    pub fn with_mime_type(mut self, mime_type: impl Into<String>) -> Self {
        self.mime_type = Some(mime_type.into());
        self
    }

    /// This item with its own URI (a sub-resource of the one read).
    pub fn with_uri(mut self, uri: impl Into<String>) -> Self {
        self.uri = uri.into();
        self
    }
}

/// Types a resource function may return directly (anything else that is `Serialize` becomes JSON
/// text, `application/json`). `None` means the resource does not exist: the client gets "resource
/// not found".
pub trait IntoResourceContents {
    /// Convert; `None` when there is no such resource.
    fn into_resource_contents(self) -> Option<Vec<ResourceContents>>;
}

impl IntoResourceContents for ResourceContents {
    fn into_resource_contents(self) -> Option<Vec<ResourceContents>> {
        Some(vec![self])
    }
}
impl IntoResourceContents for Vec<ResourceContents> {
    fn into_resource_contents(self) -> Option<Vec<ResourceContents>> {
        Some(self)
    }
}
impl IntoResourceContents for String {
    fn into_resource_contents(self) -> Option<Vec<ResourceContents>> {
        Some(vec![ResourceContents::text(self)])
    }
}
impl IntoResourceContents for &str {
    fn into_resource_contents(self) -> Option<Vec<ResourceContents>> {
        Some(vec![ResourceContents::text(self)])
    }
}
impl<T: IntoResourceContents> IntoResourceContents for Option<T> {
    fn into_resource_contents(self) -> Option<Vec<ResourceContents>> {
        self.and_then(IntoResourceContents::into_resource_contents)
    }
}

/// A `Serialize` value as one JSON text item (`application/json`).
pub(crate) fn json_contents<T: Serialize + ?Sized>(value: &T) -> Result<ResourceContents, String> {
    serde_json::to_string(value)
        .map(|text| ResourceContents::text(text).with_mime_type("application/json"))
        .map_err(|e| format!("resource contents could not be serialized: {e}"))
}

/// The `ReadResourceResult` for `uri`: items without a URI get it, items without a MIME type get
/// `mime_type`.
pub(crate) fn read_result(
    uri: &str,
    mime_type: Option<&str>,
    contents: Vec<ResourceContents>,
) -> Value {
    let contents: Vec<Value> = contents
        .into_iter()
        .map(|mut item| {
            if item.uri.is_empty() {
                item.uri = uri.to_owned();
            }
            if item.mime_type.is_none() {
                item.mime_type = mime_type.map(str::to_owned);
            }
            if item.text.is_none() && item.blob.is_none() {
                item.text = Some(String::new());
            }
            serde_json::to_value(item).unwrap_or(Value::Null)
        })
        .collect();
    serde_json::json!({ "contents": contents })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_get_the_read_uri_and_the_declared_mime_type_unless_they_have_their_own() {
        let result = read_result(
            "test://x",
            Some("text/plain"),
            vec![
                ResourceContents::text("a"),
                ResourceContents::blob(&[1]).with_mime_type("application/octet-stream"),
                ResourceContents::text("c").with_uri("test://x/c"),
            ],
        );
        assert_eq!(
            result,
            serde_json::json!({"contents": [
                {"uri": "test://x", "mimeType": "text/plain", "text": "a"},
                {"uri": "test://x", "mimeType": "application/octet-stream", "blob": "AQ=="},
                {"uri": "test://x/c", "mimeType": "text/plain", "text": "c"},
            ]})
        );
    }
}
