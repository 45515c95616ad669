//! Tool results: MCP content items and the conversions from what a tool function returns.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One item of a tool result's `content`.
///
/// MCP adds content kinds and optional fields (annotations, `_meta`, a link's title and size) over
/// time, so the enum and each variant are `#[non_exhaustive]`: build items with the constructors
/// ([`Content::text`], [`Content::image`], [`Content::resource_link`], ...) and match with `..`.
///
/// ```
/// use mcp_plugin_sdk::Content;
/// let item = Content::text("hello");
/// assert_eq!(serde_json::to_value(&item).unwrap(), serde_json::json!({"type": "text", "text": "hello"}));
/// assert!(matches!(item, Content::Text { ref text, .. } if text == "hello"));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Content {
    /// Plain text.
    #[non_exhaustive]
    Text {
        /// The text.
        text: String,
    },
    /// An image, base64-encoded.
    #[non_exhaustive]
    Image {
        /// Base64 data.
        data: String,
        /// MIME type, e.g. `image/png`.
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    /// Audio, base64-encoded.
    #[non_exhaustive]
    Audio {
        /// Base64 data.
        data: String,
        /// MIME type, e.g. `audio/wav`.
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    /// A resource embedded in the result.
    #[non_exhaustive]
    Resource {
        /// The resource contents.
        resource: EmbeddedResource,
    },
    /// A link to a resource the client may read.
    #[non_exhaustive]
    ResourceLink {
        /// The resource URI.
        uri: String,
        /// Its name.
        name: String,
        /// Optional description.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
        /// Optional MIME type.
        #[serde(default, rename = "mimeType", skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
    },
}

/// The contents of an embedded resource: text or base64 blob — the same item a resource read
/// returns ([`ResourceContents`](crate::ResourceContents)).
///
/// Built by [`Content::resource_text`] and [`Content::resource_blob`] (or the
/// [`ResourceContents`](crate::ResourceContents) constructors).
pub type EmbeddedResource = crate::resource::ResourceContents;

impl Content {
    /// A text item.
    pub fn text(text: impl Into<String>) -> Self {
        Content::Text { text: text.into() }
    }

    /// An image item from raw bytes (encoded to base64 here).
    ///
    /// ```
    /// use mcp_plugin_sdk::Content;
    /// let png = Content::image(&[0x89, b'P', b'N', b'G'], "image/png");
    /// assert!(matches!(png, Content::Image { ref data, .. } if data == "iVBORw=="));
    /// ```
    pub fn image(bytes: &[u8], mime_type: impl Into<String>) -> Self {
        Content::Image {
            data: base64::engine::general_purpose::STANDARD.encode(bytes),
            mime_type: mime_type.into(),
        }
    }

    /// An image item from data that is already base64-encoded (used as is: no decoding, no check).
    ///
    /// ```
    /// use mcp_plugin_sdk::Content;
    /// let png = Content::image_base64("iVBORw==", "image/png");
    /// assert_eq!(png, Content::image(&[0x89, b'P', b'N', b'G'], "image/png"));
    /// ```
    pub fn image_base64(data: impl Into<String>, mime_type: impl Into<String>) -> Self {
        Content::Image {
            data: data.into(),
            mime_type: mime_type.into(),
        }
    }

    /// An audio item from raw bytes (encoded to base64 here).
    ///
    /// ```
    /// use mcp_plugin_sdk::Content;
    /// let wav = Content::audio(b"RIFF", "audio/wav");
    /// assert_eq!(serde_json::to_value(&wav).unwrap()["data"], "UklGRg==");
    /// ```
    pub fn audio(bytes: &[u8], mime_type: impl Into<String>) -> Self {
        Content::Audio {
            data: base64::engine::general_purpose::STANDARD.encode(bytes),
            mime_type: mime_type.into(),
        }
    }

    /// An audio item from data that is already base64-encoded (used as is: no decoding, no check).
    ///
    /// ```
    /// use mcp_plugin_sdk::Content;
    /// assert_eq!(Content::audio_base64("UklGRg==", "audio/wav"), Content::audio(b"RIFF", "audio/wav"));
    /// ```
    pub fn audio_base64(data: impl Into<String>, mime_type: impl Into<String>) -> Self {
        Content::Audio {
            data: data.into(),
            mime_type: mime_type.into(),
        }
    }

    /// An embedded text resource.
    ///
    /// ```
    /// use mcp_plugin_sdk::Content;
    /// let notes = Content::resource_text("file:///notes.txt", "text/plain", "hello");
    /// assert_eq!(
    ///     serde_json::to_value(&notes).unwrap(),
    ///     serde_json::json!({"type": "resource", "resource":
    ///         {"uri": "file:///notes.txt", "mimeType": "text/plain", "text": "hello"}}),
    /// );
    /// ```
    pub fn resource_text(
        uri: impl Into<String>,
        mime_type: impl Into<String>,
        text: impl Into<String>,
    ) -> Self {
        Content::Resource {
            resource: EmbeddedResource::text(text)
                .with_uri(uri)
                .with_mime_type(mime_type),
        }
    }

    /// An embedded binary resource from raw bytes (encoded to base64 here).
    ///
    /// ```
    /// use mcp_plugin_sdk::Content;
    /// let blob = Content::resource_blob("file:///a.bin", "application/octet-stream", &[1, 2, 3]);
    /// assert_eq!(serde_json::to_value(&blob).unwrap()["resource"]["blob"], "AQID");
    /// ```
    pub fn resource_blob(
        uri: impl Into<String>,
        mime_type: impl Into<String>,
        bytes: &[u8],
    ) -> Self {
        Content::Resource {
            resource: EmbeddedResource::blob(bytes)
                .with_uri(uri)
                .with_mime_type(mime_type),
        }
    }

    /// A link to a resource the client may read, by URI and name; add what else is known with
    /// [`Content::with_description`] and [`Content::with_mime_type`].
    ///
    /// ```
    /// use mcp_plugin_sdk::Content;
    /// let link = Content::resource_link("file:///big.bin", "big.bin")
    ///     .with_mime_type("application/octet-stream");
    /// assert_eq!(
    ///     serde_json::to_value(&link).unwrap(),
    ///     serde_json::json!({"type": "resource_link", "uri": "file:///big.bin", "name": "big.bin",
    ///         "mimeType": "application/octet-stream"}),
    /// );
    /// ```
    pub fn resource_link(uri: impl Into<String>, name: impl Into<String>) -> Self {
        Content::ResourceLink {
            uri: uri.into(),
            name: name.into(),
            description: None,
            mime_type: None,
        }
    }

    /// This item with its MIME type set (images, audio, embedded resources and resource links;
    /// text has none and is returned unchanged).
    ///
    /// ```
    /// use mcp_plugin_sdk::Content;
    /// let jpeg = Content::image(b"...", "image/png").with_mime_type("image/jpeg");
    /// assert!(matches!(jpeg, Content::Image { ref mime_type, .. } if mime_type == "image/jpeg"));
    /// assert_eq!(Content::text("a").with_mime_type("text/plain"), Content::text("a"));
    /// ```
    pub fn with_mime_type(mut self, mime: impl Into<String>) -> Self {
        match &mut self {
            Content::Image { mime_type, .. } | Content::Audio { mime_type, .. } => {
                *mime_type = mime.into()
            }
            Content::Resource { resource } => resource.mime_type = Some(mime.into()),
            Content::ResourceLink { mime_type, .. } => *mime_type = Some(mime.into()),
            Content::Text { .. } => {}
        }
        self
    }

    /// This resource link with a description (other items have none and are returned unchanged).
    ///
    /// ```
    /// use mcp_plugin_sdk::Content;
    /// let link = Content::resource_link("file:///a.csv", "a.csv").with_description("Last month");
    /// assert_eq!(serde_json::to_value(&link).unwrap()["description"], "Last month");
    /// ```
    pub fn with_description(mut self, text: impl Into<String>) -> Self {
        if let Content::ResourceLink { description, .. } = &mut self {
            *description = Some(text.into());
        }
        self
    }
}

/// A text item.
///
/// ```
/// use mcp_plugin_sdk::Content;
/// assert_eq!(Content::from("hi"), Content::text("hi"));
/// ```
impl From<&str> for Content {
    fn from(text: &str) -> Self {
        Content::text(text)
    }
}

/// A text item.
impl From<String> for Content {
    fn from(text: String) -> Self {
        Content::text(text)
    }
}

/// A complete tool result (MCP `CallToolResult`).
///
/// Return it from a tool for full control; usually a tool returns a `String`, a struct, a [`Content`]
/// or a `Vec<Content>`, and the SDK builds this for it.
///
/// `#[non_exhaustive]` because MCP's `CallToolResult` grows fields (`_meta`, ...): build one with
/// [`ToolResult::new`], [`ToolResult::error`] or [`ToolResult::json`]; the fields stay readable.
///
/// ```
/// use mcp_plugin_sdk::{Content, ToolResult};
/// let r = ToolResult::error("no such city");
/// assert!(r.is_error);
/// let ok = ToolResult::new(vec![Content::text("a"), Content::text("b")]);
/// assert_eq!(ok.content.len(), 2);
/// assert_eq!(ok.text(), "ab");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ToolResult {
    /// The content items.
    pub content: Vec<Content>,
    /// Structured output (an object), also sent serialized as text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_content: Option<Map<String, Value>>,
    /// Whether the tool failed; the content says why.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

impl ToolResult {
    /// A successful result with these items.
    pub fn new(content: Vec<Content>) -> Self {
        ToolResult {
            content,
            structured_content: None,
            is_error: false,
        }
    }

    /// A failed result whose text says why.
    pub fn error(message: impl Into<String>) -> Self {
        ToolResult {
            content: vec![Content::text(message)],
            structured_content: None,
            is_error: true,
        }
    }

    /// A successful result carrying `value` as structured content (when it is an object) and as JSON text.
    ///
    /// ```
    /// use mcp_plugin_sdk::ToolResult;
    /// let r = ToolResult::json(&serde_json::json!({"n": 1}));
    /// assert_eq!(r.structured_content.unwrap()["n"], 1);
    /// assert!(ToolResult::json(&vec![1, 2]).structured_content.is_none());
    /// ```
    pub fn json<T: Serialize + ?Sized>(value: &T) -> Self {
        match serde_json::to_value(value) {
            Ok(value) => {
                let text = value.to_string();
                ToolResult {
                    content: vec![Content::text(text)],
                    structured_content: match value {
                        Value::Object(map) => Some(map),
                        _ => None,
                    },
                    is_error: false,
                }
            }
            Err(e) => ToolResult::error(format!("tool result could not be serialized: {e}")),
        }
    }

    /// The concatenated text of all text items (handy in tests and wrapper tools).
    pub fn text(&self) -> String {
        let mut out = String::new();
        for item in &self.content {
            if let Content::Text { text } = item {
                out.push_str(text);
            }
        }
        out
    }
}

/// Types a tool may return directly (anything else that is `Serialize` becomes structured JSON).
pub trait IntoToolResult {
    /// Convert into a result.
    fn into_tool_result(self) -> ToolResult;
}

/// A content block's schema: an object whose `type` names its kind. It makes `Vec<Content>` (and a
/// struct with a `Content` field) a type with a JSON Schema like any other.
///
/// ```
/// use mcp_plugin_sdk::{Content, schemars::schema_for};
/// let schema = schema_for!(Content);
/// assert_eq!(schema.get("required"), Some(&serde_json::json!(["type"])));
/// ```
impl schemars::JsonSchema for Content {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Content".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "object",
            "description": "An MCP content block, its kind named by `type`.",
            "properties": {
                "type": {
                    "type": "string",
                    "enum": ["text", "image", "audio", "resource", "resource_link"],
                },
            },
            "required": ["type"],
            // Each kind has its own fields: never closed as a nested argument object.
            "additionalProperties": true,
        })
    }
}

impl IntoToolResult for ToolResult {
    fn into_tool_result(self) -> ToolResult {
        self
    }
}
impl IntoToolResult for String {
    fn into_tool_result(self) -> ToolResult {
        ToolResult::new(vec![Content::text(self)])
    }
}
impl IntoToolResult for &str {
    fn into_tool_result(self) -> ToolResult {
        ToolResult::new(vec![Content::text(self)])
    }
}
impl IntoToolResult for std::borrow::Cow<'_, str> {
    fn into_tool_result(self) -> ToolResult {
        ToolResult::new(vec![Content::text(self)])
    }
}
impl IntoToolResult for Content {
    fn into_tool_result(self) -> ToolResult {
        ToolResult::new(vec![self])
    }
}
impl IntoToolResult for Vec<Content> {
    fn into_tool_result(self) -> ToolResult {
        ToolResult::new(self)
    }
}
impl IntoToolResult for () {
    fn into_tool_result(self) -> ToolResult {
        ToolResult::new(Vec::new())
    }
}
