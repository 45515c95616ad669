//! What a running plugin asks of the host, as one typed request ([`HostRequest`], the shape of
//! nushell's `EngineCall`), and why an answer can be an error ([`HostRequestError`], with the
//! [`NestedCallError`] and [`DataDirError`] of the two requests that can fail on the host's side).
//!
//! A plugin asks through the frozen ABI with method strings (`HostApiFfi::request`,
//! `CallContextFfi::request`) and `call_tool`; the host parses them into a [`HostRequest`] once, at
//! that edge ([`HostRequest::from_host_api`], [`HostRequest::from_call_context`]), and from there on
//! they are values: the worker wire carries them as they are (`FromWorker::Request`), and
//! [`super::backend::answer`] answers each by a `match`. What crosses the FFI boundary back to
//! the plugin stays the text it always was ([`HostRequestError::to_plugin`]). Types only, no I/O.

use std::path::PathBuf;

use mcp_plugin_sdk::InputError;
use serde::{Deserialize, Serialize};

/// One request a plugin makes to the host while it runs.
///
/// The first four come through the host API a plugin holds (`HostApi`), whatever call is running;
/// the last three through a call's context (`CallContext`) and are about that call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HostRequest {
    /// `call_tool`: call tool `name` with JSON `args` through the host (agent views, depth,
    /// quotas and argument validation apply as to any call).
    CallTool {
        /// The tool.
        name: String,
        /// Its arguments as JSON text.
        args: String,
    },
    /// `notify_tools_changed`, `notify_resources_changed`, `notify_prompts_changed`: some of the
    /// plugin's lists changed.
    ListsChanged {
        /// `tools/list` changed.
        tools: bool,
        /// `resources/list` (or the templates) changed.
        resources: bool,
        /// `prompts/list` changed.
        prompts: bool,
    },
    /// `notify_resource_updated`: the contents of the resource at `uri` changed.
    ResourceUpdated {
        /// The resource.
        uri: String,
    },
    /// `data_dir`: the plugin's own data directory (created if needed).
    DataDir,
    /// `client/capabilities`: the capabilities of the client that made the call.
    ClientCapabilities,
    /// `task/start`: the call becomes a task from here on.
    StartTask,
    /// `input/ask`: ask the call's client the questions in `questions` (the SDK's JSON).
    Ask {
        /// The questions as JSON text.
        questions: String,
    },
    /// `credential/get`: the calling user's access token for credential provider `provider`
    /// (declared in the plugin's manifest).
    Credential {
        /// The provider (an upstream with `server.auth`).
        provider: String,
    },
}

impl HostRequest {
    /// A request made through the host API (`HostApiFfi::request`): `method` with JSON `params`.
    pub fn from_host_api(method: &str, params: &str) -> Result<HostRequest, HostRequestError> {
        let lists = |tools, resources, prompts| HostRequest::ListsChanged {
            tools,
            resources,
            prompts,
        };
        Ok(match method {
            "notify_tools_changed" => lists(true, false, false),
            "notify_resources_changed" => lists(false, true, false),
            "notify_prompts_changed" => lists(false, false, true),
            "notify_resource_updated" => {
                let params: serde_json::Value = serde_json::from_str(params).unwrap_or_default();
                match params.get("uri").and_then(serde_json::Value::as_str) {
                    Some(uri) => HostRequest::ResourceUpdated { uri: uri.into() },
                    None => return Err(HostRequestError::MissingUri),
                }
            }
            "data_dir" => HostRequest::DataDir,
            other => return Err(HostRequestError::UnsupportedHostMethod(other.into())),
        })
    }

    /// A request made through a call's context (`CallContextFfi::request`).
    pub fn from_call_context(method: &str, params: &str) -> Result<HostRequest, HostRequestError> {
        Ok(match method {
            "client/capabilities" => HostRequest::ClientCapabilities,
            "task/start" => HostRequest::StartTask,
            "input/ask" => HostRequest::Ask {
                questions: params.into(),
            },
            "credential/get" => {
                let params: serde_json::Value = serde_json::from_str(params).unwrap_or_default();
                match params.get("provider").and_then(serde_json::Value::as_str) {
                    Some(p) if !p.is_empty() && p.len() <= 256 => {
                        HostRequest::Credential { provider: p.into() }
                    }
                    _ => {
                        return Err(HostRequestError::Credential(
                            "credential/get needs a \"provider\" name".into(),
                        ));
                    }
                }
            }
            other => return Err(HostRequestError::UnsupportedCallMethod(other.into())),
        })
    }

    /// The name the plugin asked it by (for messages).
    pub fn method(&self) -> &'static str {
        match self {
            HostRequest::CallTool { .. } => "call_tool",
            HostRequest::ListsChanged {
                tools: true,
                resources: false,
                prompts: false,
            } => "notify_tools_changed",
            HostRequest::ListsChanged {
                tools: false,
                resources: true,
                prompts: false,
            } => "notify_resources_changed",
            HostRequest::ListsChanged {
                tools: false,
                resources: false,
                prompts: true,
            } => "notify_prompts_changed",
            HostRequest::ListsChanged { .. } => "notify_lists_changed",
            HostRequest::ResourceUpdated { .. } => "notify_resource_updated",
            HostRequest::DataDir => "data_dir",
            HostRequest::ClientCapabilities => "client/capabilities",
            HostRequest::StartTask => "task/start",
            HostRequest::Ask { .. } => "input/ask",
            HostRequest::Credential { .. } => "credential/get",
        }
    }

    /// Whether answering it may take long (a nested call; a call-context request, which may ask
    /// the client): a backend answers such requests off the thread that reads its plugin's
    /// messages.
    pub fn may_wait(&self) -> bool {
        matches!(self, HostRequest::CallTool { .. }) || self.is_call_context()
    }

    /// Whether it is about the running call (asked through a call's context).
    pub fn is_call_context(&self) -> bool {
        matches!(
            self,
            HostRequest::ClientCapabilities
                | HostRequest::StartTask
                | HostRequest::Ask { .. }
                | HostRequest::Credential { .. }
        )
    }
}

/// Why the host answered a [`HostRequest`] with an error.
///
/// The plugin receives it as text through the ABI ([`HostRequestError::to_plugin`]); the texts are
/// the ones plugins and the SDK have always seen (the SDK recognises
/// `unsupported call-context method` and decodes the `input/ask` errors).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum HostRequestError {
    /// The host API has no such method (a newer plugin probing an older host).
    #[error("unsupported host method: {0}")]
    UnsupportedHostMethod(String),
    /// A call's context has no such method.
    #[error("unsupported call-context method: {0}")]
    UnsupportedCallMethod(String),
    /// `notify_resource_updated` without its `uri`.
    #[error("notify_resource_updated needs a \"uri\"")]
    MissingUri,
    /// A call-context request for a call that already ended (or was never known to the host).
    #[error("{method}: the call is no longer running")]
    CallEnded {
        /// The method asked.
        method: String,
    },
    /// The nested call could not be made.
    #[error(transparent)]
    Nested(#[from] NestedCallError),
    /// The data directory could not be had.
    #[error(transparent)]
    DataDir(#[from] DataDirError),
    /// The question to the client has no answer (yet): the SDK decodes it back into this
    /// [`InputError`].
    #[error("{}", .0.text())]
    Input(WireInputError),
    /// No thread could be started to answer it.
    #[error("cannot run the nested call: {0}")]
    NoThread(String),
    /// Too many of the plugin's nested calls and requests are already running and waiting.
    #[error(
        "too many nested calls and requests waiting in plugin {plugin} (the limit is {running} \
         running and {waiting} waiting)"
    )]
    Overloaded {
        /// The plugin.
        plugin: String,
        /// How many may run at once.
        running: usize,
        /// How many may wait.
        waiting: usize,
    },
    /// The host went away before it answered (seen in a worker process).
    #[error("the host did not answer")]
    NoAnswer,
    /// No credential for the plugin: the text the SDK decodes (`mcp_plugin_sdk::wire::
    /// credential`'s prefixes), never a token.
    #[error("{0}")]
    Credential(String),
}

impl HostRequestError {
    /// The text the plugin receives through the ABI: the SDK's encoding for an `input/ask` error,
    /// the message otherwise.
    pub fn to_plugin(&self) -> String {
        match self {
            HostRequestError::Input(e) => mcp_plugin_sdk::wire::encode_input_error(&e.0),
            other => other.to_string(),
        }
    }
}

impl From<InputError> for HostRequestError {
    fn from(e: InputError) -> Self {
        HostRequestError::Input(WireInputError(e))
    }
}

/// An [`InputError`] that crosses the worker wire (as the SDK's own encoding of it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireInputError(pub InputError);

impl WireInputError {
    fn text(&self) -> String {
        self.0.to_string()
    }
}

impl Serialize for WireInputError {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&mcp_plugin_sdk::wire::encode_input_error(&self.0))
    }
}

impl<'de> Deserialize<'de> for WireInputError {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        /// The SDK's encoding of an [`InputError`] (`encode_input_error`).
        #[derive(Deserialize)]
        #[serde(tag = "kind", rename_all = "snake_case")]
        enum Encoded {
            Asked,
            Unsupported { method: String },
            Failed { message: String },
        }
        let text = String::deserialize(d)?;
        let e = match serde_json::from_str::<Encoded>(&text) {
            Ok(Encoded::Asked) => InputError::Asked,
            Ok(Encoded::Unsupported { method }) => InputError::Unsupported { method },
            Ok(Encoded::Failed { message }) => InputError::Failed(message),
            Err(_) => InputError::Failed(text),
        };
        Ok(WireInputError(e))
    }
}

/// Why a plugin's nested call (a tool calling a tool through the host) was not made. A tool that
/// ran and failed is not one of these: its `isError` result is the answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum NestedCallError {
    /// The host is stopping.
    #[error("the host is shutting down")]
    ShuttingDown,
    /// Deeper than `limits.max_call_depth`.
    #[error("tool calls nested deeper than {max_depth} (calling {tool})")]
    TooDeep {
        /// The limit.
        max_depth: u32,
        /// The tool called.
        tool: String,
    },
    /// No tool of this name is served (or the outer call's agent cannot see it).
    #[error("unknown tool: {0}")]
    UnknownTool(String),
    /// The arguments are not JSON.
    #[error("arguments are not JSON: {0}")]
    BadArguments(String),
    /// The outer caller is over its share (`limits.per_caller`).
    #[error("{reason} (calling {tool})")]
    Throttled {
        /// The tool called.
        tool: String,
        /// The quota's refusal.
        reason: String,
    },
    /// The tool needs a verified caller and the outer call has none.
    #[error("tool {0} requires an authenticated caller")]
    CallerRequired(String),
}

/// Why a plugin has no data directory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum DataDirError {
    /// The host is stopping.
    #[error("the host is shutting down")]
    ShuttingDown,
    /// The plugin's name is not a plain file name.
    #[error("plugin name {0:?} cannot name a data directory")]
    NotAName(String),
    /// Creating it failed.
    #[error("cannot create data directory {}: {reason}", dir.display())]
    Create {
        /// The directory.
        dir: PathBuf,
        /// The system's error.
        reason: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_strings_parse_into_requests_and_unknown_ones_keep_their_old_errors() {
        assert_eq!(
            HostRequest::from_host_api("notify_prompts_changed", ""),
            Ok(HostRequest::ListsChanged {
                tools: false,
                resources: false,
                prompts: true
            })
        );
        assert_eq!(
            HostRequest::from_host_api("notify_resource_updated", r#"{"uri":"mem://a"}"#),
            Ok(HostRequest::ResourceUpdated {
                uri: "mem://a".into()
            })
        );
        assert_eq!(
            HostRequest::from_host_api("notify_resource_updated", "{}")
                .unwrap_err()
                .to_plugin(),
            "notify_resource_updated needs a \"uri\""
        );
        assert_eq!(
            HostRequest::from_host_api("input/ask", "{}")
                .unwrap_err()
                .to_plugin(),
            "unsupported host method: input/ask"
        );
        assert_eq!(
            HostRequest::from_call_context("elicit", "{}")
                .unwrap_err()
                .to_plugin(),
            "unsupported call-context method: elicit"
        );
        for method in ["client/capabilities", "task/start", "input/ask"] {
            let request = HostRequest::from_call_context(method, "{}").expect(method);
            assert_eq!(request.method(), method);
            assert!(request.is_call_context());
        }
        for method in [
            "notify_tools_changed",
            "notify_resources_changed",
            "notify_prompts_changed",
            "data_dir",
        ] {
            let request = HostRequest::from_host_api(method, "{}").expect(method);
            assert_eq!(request.method(), method);
            assert!(!request.is_call_context());
        }
    }

    #[test]
    fn an_input_error_reaches_the_plugin_in_the_sdk_encoding_across_the_wire() {
        let e = HostRequestError::from(InputError::Unsupported {
            method: "elicitation/create".into(),
        });
        for input in [
            e.clone(),
            InputError::Asked.into(),
            InputError::Failed("gone".into()).into(),
        ] {
            let sent: Result<String, HostRequestError> = Err(input);
            let bytes = postcard::to_allocvec(&sent).expect("encode");
            let got: Result<String, HostRequestError> =
                postcard::from_bytes(&bytes).expect("decode");
            assert_eq!(got, sent);
        }
        assert_eq!(
            e.to_plugin(),
            mcp_plugin_sdk::wire::encode_input_error(&InputError::Unsupported {
                method: "elicitation/create".into()
            })
        );
        assert_eq!(
            e.to_string(),
            "the client does not support elicitation/create"
        );
    }
}
