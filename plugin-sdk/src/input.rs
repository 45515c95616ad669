//! Asking the client for input in the middle of a call: elicitation (a form, or a URL to visit),
//! sampling (a completion from the client's model) and the client's roots.
//!
//! One way to write it works in every protocol revision. With a 2025 client the host sends the
//! request to the client and the call waits for the answer. A 2026-07-28 client is never sent a
//! request: the host answers the call with the questions (an input-required result) and the client
//! calls again with the answers, so the function runs again from the start and this time the
//! question is answered at once. The rules that follow from this:
//!
//! - **Ask before you act**: everything a function does before its last question may run once per
//!   round, so read and check first, ask, then write.
//! - **Give each question a key** that is stable across rounds (`"confirm"`, `"step2"`): the answer
//!   to a question is found by its key.
//! - **Propagate [`InputError::Asked`] with `?`**: it means "the question is on its way to the
//!   client, return now". (The host answers the round with the questions whatever the function then
//!   returns.)
//!
//! ```
//! use mcp_plugin_sdk::{CallContext, Elicitation, InputError, InputKind, json, tool};
//!
//! /// Delete a file after asking the user.
//! ///
//! /// # Arguments
//! /// * `name` - The file.
//! #[tool(destructive)]
//! pub fn delete_file(ctx: &CallContext, name: String) -> Result<String, String> {
//!     if ctx.client_supports(InputKind::Elicitation) {
//!         let schema = json!({"type": "object", "properties": {"confirm": {"type": "boolean"}}});
//!         let answer = ctx.elicit("confirm", Elicitation::form(format!("Delete {name}?"), schema))?;
//!         if !answer.is_accepted() || answer.content_value("confirm") != Some(&json!(true)) {
//!             return Ok("kept".into());
//!         }
//!     }
//!     Ok(format!("deleted {name}"))
//! }
//!
//! use mcp_plugin_sdk::testing::TestCall;
//! use mcp_plugin_sdk::ElicitResult;
//! let call = TestCall::new().answering("confirm", ElicitResult::accept(json!({"confirm": true})));
//! assert_eq!(delete_file(&call.context(), "a.txt".into()), Ok("deleted a.txt".to_owned()));
//! # mcp_plugin_sdk::export_plugin!();
//! # fn main() {}
//! ```

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::prompt::Role;

/// Why a question to the client has no answer (yet).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum InputError {
    /// The question goes to the client with this round's answer (2026-07-28): return now, with `?`.
    /// The host calls the function again with the answer.
    Asked,
    /// The client did not declare the capability this question needs (e.g. `elicitation`).
    Unsupported {
        /// The request's method, e.g. `elicitation/create`.
        method: String,
    },
    /// The client answered with an error, the call was cancelled or ran out of time, or the question
    /// could not be asked.
    Failed(String),
}

impl std::fmt::Display for InputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InputError::Asked => f.write_str("waiting for the client's answer"),
            InputError::Unsupported { method } => {
                write!(f, "the client does not support {method}")
            }
            InputError::Failed(why) => write!(f, "asking the client failed: {why}"),
        }
    }
}

impl std::error::Error for InputError {}

/// So that `?` works in a tool returning `Result<T, String>`.
impl From<InputError> for String {
    fn from(e: InputError) -> String {
        e.to_string()
    }
}

/// A kind of question a client may support (see [`CallContext::client_supports`](crate::CallContext::client_supports)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum InputKind {
    /// Form elicitation.
    Elicitation,
    /// URL elicitation (the user visits a page).
    UrlElicitation,
    /// Sampling (`sampling/createMessage`).
    Sampling,
    /// The client's roots (`roots/list`).
    Roots,
}

impl InputKind {
    fn request(self) -> (&'static str, Value) {
        match self {
            InputKind::Elicitation => ("elicitation/create", json!({ "mode": "form" })),
            InputKind::UrlElicitation => ("elicitation/create", json!({ "mode": "url" })),
            InputKind::Sampling => ("sampling/createMessage", json!({})),
            InputKind::Roots => ("roots/list", json!({})),
        }
    }
}

/// The client capability a request needs (MCP `ClientCapabilities` shape), e.g.
/// `{"elicitation": {"url": {}}}`; `None` for a method that is not a question to the client.
///
/// ```
/// use mcp_plugin_sdk::wire::{declares, required_capability};
/// use serde_json::json;
/// let form = required_capability("elicitation/create", &json!({"message": "?"})).unwrap();
/// assert_eq!(form, json!({"elicitation": {}}));
/// assert!(declares(&json!({"elicitation": {}}), "elicitation/create", &json!({"mode": "form"})));
/// assert!(!declares(&json!({"elicitation": {"url": {}}}), "elicitation/create", &json!({})));
/// assert!(declares(&json!({"sampling": {}}), "sampling/createMessage", &json!({})));
/// ```
pub fn required_capability(method: &str, params: &Value) -> Option<Value> {
    Some(match method {
        "elicitation/create" if params.get("mode").and_then(Value::as_str) == Some("url") => {
            json!({ "elicitation": { "url": {} } })
        }
        "elicitation/create" => json!({ "elicitation": {} }),
        "sampling/createMessage" if params.get("tools").is_some() => {
            json!({ "sampling": { "tools": {} } })
        }
        "sampling/createMessage" => json!({ "sampling": {} }),
        "roots/list" => json!({ "roots": {} }),
        _ => return None,
    })
}

/// Whether client capabilities `caps` allow request `method` with `params` (an empty
/// `elicitation: {}` means form mode only).
pub fn declares(caps: &Value, method: &str, params: &Value) -> bool {
    match method {
        "elicitation/create" => {
            let Some(e) = caps.get("elicitation").filter(|e| e.is_object()) else {
                return false;
            };
            let url = params.get("mode").and_then(Value::as_str) == Some("url");
            let empty = e.as_object().is_some_and(Map::is_empty);
            if url {
                e.get("url").is_some()
            } else {
                empty || e.get("form").is_some()
            }
        }
        "sampling/createMessage" => caps.get("sampling").is_some_and(|s| {
            s.is_object() && (params.get("tools").is_none() || s.get("tools").is_some())
        }),
        "roots/list" => caps.get("roots").is_some_and(Value::is_object),
        _ => false,
    }
}

pub(crate) fn kind_declared(caps: &Value, kind: InputKind) -> bool {
    let (method, params) = kind.request();
    declares(caps, method, &params)
}

/// An elicitation request: a form whose answer follows a flat JSON Schema, or a URL to visit.
///
/// ```
/// use mcp_plugin_sdk::{Elicitation, JsonSchema, Deserialize};
///
/// /// What to call you.
/// #[derive(Deserialize, JsonSchema)]
/// #[schemars(crate = "mcp_plugin_sdk::schemars")]
/// #[serde(crate = "mcp_plugin_sdk::serde")]
/// struct Name {
///     /// Your name.
///     name: String,
/// }
///
/// let form = Elicitation::form_of::<Name>("Who are you?");
/// assert_eq!(form.params()["requestedSchema"]["properties"]["name"]["type"], "string");
/// let visit = Elicitation::url("Sign in", "https://example.com/login");
/// assert_eq!(visit.params()["mode"], "url");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Elicitation {
    params: Value,
}

impl Elicitation {
    /// A form: `message` for the user and the `schema` of the answer (an object of primitive
    /// properties: strings, numbers, booleans, enums).
    pub fn form(message: impl Into<String>, schema: Value) -> Self {
        Elicitation {
            params: json!({ "mode": "form", "message": message.into(), "requestedSchema": schema }),
        }
    }

    /// A form whose schema comes from `T` (a struct of primitive fields; its doc comments become the
    /// fields' descriptions). Read the answer with [`ElicitResult::parse`].
    pub fn form_of<T: schemars::JsonSchema>(message: impl Into<String>) -> Self {
        Self::form(message, crate::schema::elicitation_schema::<T>())
    }

    /// A URL the user should visit (to sign in, pay, ...); the answer only says whether they did.
    pub fn url(message: impl Into<String>, url: impl Into<String>) -> Self {
        Elicitation {
            params: json!({ "mode": "url", "message": message.into(), "url": url.into() }),
        }
    }

    /// The request's params (MCP `ElicitRequestParams`).
    pub fn params(&self) -> &Value {
        &self.params
    }
}

/// What the user did with an elicitation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ElicitAction {
    /// Submitted the form (or visited the URL).
    Accept,
    /// Said no.
    Decline,
    /// Dismissed the question.
    Cancel,
}

/// The answer to an elicitation (MCP `ElicitResult`).
///
/// ```
/// use mcp_plugin_sdk::{ElicitAction, ElicitResult, json};
/// let yes = ElicitResult::accept(json!({"name": "Ana", "age": 7}));
/// assert!(yes.is_accepted());
/// assert_eq!(yes.content_value("name"), Some(&json!("Ana")));
/// assert_eq!(ElicitResult::decline().action, ElicitAction::Decline);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ElicitResult {
    /// Accept, decline or cancel.
    pub action: ElicitAction,
    /// The submitted form (accepted form elicitations only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Map<String, Value>>,
}

impl ElicitResult {
    /// An accepted answer with `content` (an object; anything else means no content).
    pub fn accept(content: Value) -> Self {
        ElicitResult {
            action: ElicitAction::Accept,
            content: match content {
                Value::Object(m) => Some(m),
                _ => None,
            },
        }
    }

    /// A declined question.
    pub fn decline() -> Self {
        ElicitResult {
            action: ElicitAction::Decline,
            content: None,
        }
    }

    /// A dismissed question.
    pub fn cancel() -> Self {
        ElicitResult {
            action: ElicitAction::Cancel,
            content: None,
        }
    }

    /// Whether the user accepted.
    pub fn is_accepted(&self) -> bool {
        self.action == ElicitAction::Accept
    }

    /// One field of the submitted form.
    pub fn content_value(&self, field: &str) -> Option<&Value> {
        self.content.as_ref().and_then(|c| c.get(field))
    }

    /// The submitted form as `T`.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, String> {
        let content = Value::Object(self.content.clone().unwrap_or_default());
        serde_json::from_value(content).map_err(|e| format!("unexpected form answer: {e}"))
    }
}

/// A sampling request: messages for the client's model and a token budget.
///
/// ```
/// use mcp_plugin_sdk::Sampling;
/// let s = Sampling::text("What is the capital of France?", 100).with_system_prompt("Be brief.");
/// assert_eq!(s.params()["maxTokens"], 100);
/// assert_eq!(s.params()["messages"][0]["content"]["text"], "What is the capital of France?");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Sampling {
    params: Value,
}

impl Sampling {
    /// One user message of text, answered in at most `max_tokens` tokens.
    pub fn text(prompt: impl Into<String>, max_tokens: u32) -> Self {
        Sampling {
            params: json!({
                "messages": [{ "role": "user", "content": { "type": "text", "text": prompt.into() } }],
                "maxTokens": max_tokens,
            }),
        }
    }

    /// A request from its full params (MCP `CreateMessageRequestParams`).
    pub fn from_params(params: Value) -> Self {
        Sampling { params }
    }

    /// This request with a system prompt.
    pub fn with_system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.params["systemPrompt"] = json!(prompt.into());
        self
    }

    /// The request's params.
    pub fn params(&self) -> &Value {
        &self.params
    }
}

/// The client model's answer to a sampling request (MCP `CreateMessageResult`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Sampled {
    /// Who speaks (the assistant).
    pub role: Role,
    /// The content: one block or an array of blocks.
    pub content: Value,
    /// The model that answered.
    pub model: String,
    /// Why it stopped (`endTurn`, `maxTokens`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
}

impl Sampled {
    /// An answer of text (for unit tests).
    pub fn text(text: impl Into<String>, model: impl Into<String>) -> Self {
        Sampled {
            role: Role::Assistant,
            content: json!({ "type": "text", "text": text.into() }),
            model: model.into(),
            stop_reason: Some("endTurn".into()),
        }
    }

    /// The text of the answer (its text blocks joined).
    ///
    /// ```
    /// use mcp_plugin_sdk::Sampled;
    /// assert_eq!(Sampled::text("Paris.", "m").text_content(), "Paris.");
    /// ```
    pub fn text_content(&self) -> String {
        let blocks = match &self.content {
            Value::Array(items) => items.iter().collect(),
            one => vec![one],
        };
        blocks
            .into_iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect()
    }
}

/// One of the client's roots (a directory or project it works in).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Root {
    /// A `file://` URI.
    pub uri: String,
    /// A name for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Root {
    /// A root (for unit tests).
    pub fn new(uri: impl Into<String>, name: Option<&str>) -> Self {
        Root {
            uri: uri.into(),
            name: name.map(str::to_owned),
        }
    }
}

/// Several questions asked at once (answered together, in one round with a 2026 client).
///
/// ```
/// use mcp_plugin_sdk::{Elicitation, InputRequests, Sampling, json};
/// let q = InputRequests::new()
///     .elicit("name", Elicitation::form("Name?", json!({"type": "object", "properties": {}})))
///     .sample("greeting", Sampling::text("Say hello", 20))
///     .list_roots("roots");
/// assert_eq!(q.len(), 3);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InputRequests {
    requests: BTreeMap<String, (String, Value)>,
}

impl InputRequests {
    /// No questions yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Ask for `request` under `key`.
    pub fn elicit(mut self, key: impl Into<String>, request: Elicitation) -> Self {
        self.requests
            .insert(key.into(), ("elicitation/create".into(), request.params));
        self
    }

    /// Sample under `key`.
    pub fn sample(mut self, key: impl Into<String>, request: Sampling) -> Self {
        self.requests.insert(
            key.into(),
            ("sampling/createMessage".into(), request.params),
        );
        self
    }

    /// Ask for the client's roots under `key`.
    pub fn list_roots(mut self, key: impl Into<String>) -> Self {
        self.requests
            .insert(key.into(), ("roots/list".into(), json!({})));
        self
    }

    /// How many questions.
    pub fn len(&self) -> usize {
        self.requests.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }

    pub(crate) fn to_wire(&self) -> Value {
        let map: Map<String, Value> = self
            .requests
            .iter()
            .map(|(k, (method, params))| (k.clone(), json!({ "method": method, "params": params })))
            .collect();
        json!({ "requests": map })
    }
}

/// The answers to [`InputRequests`], by key.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InputResponses {
    answers: Map<String, Value>,
}

impl InputResponses {
    pub(crate) fn from_wire(value: Value) -> Result<Self, InputError> {
        match value.get("responses") {
            Some(Value::Object(m)) => Ok(InputResponses { answers: m.clone() }),
            _ => Err(InputError::Failed(
                "the host's answer carries no responses".into(),
            )),
        }
    }

    fn get<T: DeserializeOwned>(&self, key: &str) -> Result<T, InputError> {
        let raw = self
            .answers
            .get(key)
            .ok_or_else(|| InputError::Failed(format!("no answer for {key:?}")))?;
        serde_json::from_value(raw.clone())
            .map_err(|e| InputError::Failed(format!("unreadable answer for {key:?}: {e}")))
    }

    /// The answer to elicitation `key`.
    pub fn elicitation(&self, key: &str) -> Result<ElicitResult, InputError> {
        self.get(key)
    }

    /// The answer to sampling request `key`.
    pub fn sampling(&self, key: &str) -> Result<Sampled, InputError> {
        self.get(key)
    }

    /// The roots answered for `key`.
    pub fn roots(&self, key: &str) -> Result<Vec<Root>, InputError> {
        #[derive(Deserialize)]
        struct Roots {
            roots: Vec<Root>,
        }
        self.get::<Roots>(key).map(|r| r.roots)
    }

    /// The raw answer for `key`.
    pub fn raw(&self, key: &str) -> Option<&Value> {
        self.answers.get(key)
    }
}

/// Why the host could not answer an `input/ask`, as it crosses the ABI (JSON in the error string).
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum WireInputError {
    Asked,
    Unsupported { method: String },
    Failed { message: String },
}

impl From<WireInputError> for InputError {
    fn from(e: WireInputError) -> Self {
        match e {
            WireInputError::Asked => InputError::Asked,
            WireInputError::Unsupported { method } => InputError::Unsupported { method },
            WireInputError::Failed { message } => InputError::Failed(message),
        }
    }
}

/// The host's side of the `input/ask` error encoding (for the host and test stand-ins).
pub fn encode_input_error(e: &InputError) -> String {
    let wire = match e {
        InputError::Asked => WireInputError::Asked,
        InputError::Unsupported { method } => WireInputError::Unsupported {
            method: method.clone(),
        },
        InputError::Failed(message) => WireInputError::Failed {
            message: message.clone(),
        },
    };
    serde_json::to_string(&wire).unwrap_or_default()
}

/// Decode an `input/ask` error string (anything unreadable is a failure with that text).
pub(crate) fn decode_input_error(text: &str) -> InputError {
    serde_json::from_str::<WireInputError>(text)
        .map(Into::into)
        .unwrap_or_else(|_| InputError::Failed(text.to_owned()))
}
