//! What a `#[prompt]` function returns: messages (a role and one content item each) and the
//! conversions from the types a prompt function may return.

use serde::{Deserialize, Serialize};

use crate::content::Content;

/// Who a prompt message speaks as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The user.
    User,
    /// The assistant (e.g. an example answer).
    Assistant,
}

/// One message of a prompt (MCP `PromptMessage`): a role and one content item (text, image, audio,
/// an embedded resource or a resource link).
///
/// ```
/// use mcp_plugin_sdk::{Content, PromptMessage, Role};
/// let ask = PromptMessage::user("Summarise these readings.");
/// assert_eq!(ask.role, Role::User);
/// let data = PromptMessage::user(Content::resource_text("series://readings/steps", "application/json", "[]"));
/// assert_eq!(serde_json::to_value(&data).unwrap()["content"]["type"], "resource");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PromptMessage {
    /// Who speaks.
    pub role: Role,
    /// What is said.
    pub content: Content,
}

impl PromptMessage {
    /// A message from the user.
    pub fn user(content: impl Into<Content>) -> Self {
        PromptMessage {
            role: Role::User,
            content: content.into(),
        }
    }

    /// A message from the assistant.
    pub fn assistant(content: impl Into<Content>) -> Self {
        PromptMessage {
            role: Role::Assistant,
            content: content.into(),
        }
    }
}

/// A complete prompt (MCP `GetPromptResult`): an optional description and the messages.
///
/// ```
/// use mcp_plugin_sdk::{PromptMessage, PromptResult};
/// let p = PromptResult::new(vec![PromptMessage::user("hi")]).with_description("A greeting");
/// assert_eq!(serde_json::to_value(&p).unwrap()["description"], "A greeting");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PromptResult {
    /// A description of this rendering of the prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The messages.
    pub messages: Vec<PromptMessage>,
}

impl PromptResult {
    /// A prompt made of `messages`.
    pub fn new(messages: Vec<PromptMessage>) -> Self {
        PromptResult {
            description: None,
            messages,
        }
    }

    /// This prompt with a description.
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }
}

/// Types a prompt function may return: a `String` (one user message), a [`PromptMessage`], a
/// `Vec<PromptMessage>`, or a [`PromptResult`].
pub trait IntoPromptResult {
    /// Convert.
    fn into_prompt_result(self) -> PromptResult;
}

impl IntoPromptResult for PromptResult {
    fn into_prompt_result(self) -> PromptResult {
        self
    }
}
impl IntoPromptResult for Vec<PromptMessage> {
    fn into_prompt_result(self) -> PromptResult {
        PromptResult::new(self)
    }
}
impl IntoPromptResult for PromptMessage {
    fn into_prompt_result(self) -> PromptResult {
        PromptResult::new(vec![self])
    }
}
impl IntoPromptResult for String {
    fn into_prompt_result(self) -> PromptResult {
        PromptResult::new(vec![PromptMessage::user(self)])
    }
}
impl IntoPromptResult for &str {
    fn into_prompt_result(self) -> PromptResult {
        PromptResult::new(vec![PromptMessage::user(self)])
    }
}
