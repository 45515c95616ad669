//! Argument completion: what a completion function receives ([`CompletionRequest`]) and returns
//! ([`Completion`], or just the values).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::host::UserInfo;

/// The most values one completion answer carries (MCP's limit); the rest are counted in `total`.
pub const MAX_COMPLETION_VALUES: usize = 100;

/// What a client asks to complete: one argument of a prompt (or one variable of a resource
/// template), the text typed so far, and the arguments already chosen.
///
/// A completion function is named in `#[arg(complete = path)]` on the prompt's or resource's
/// parameter; it takes `&CompletionRequest` (and `&self` inside a `#[service]`) and returns the
/// values (`Vec<String>`, `Vec<&str>`, a [`Completion`], or a `Result` of one).
///
/// ```
/// use mcp_plugin_sdk::CompletionRequest;
/// let req = CompletionRequest::new("zone", "Eur").with_context("country", "FR");
/// let zones = ["Europe/Paris", "Europe/Berlin", "Asia/Tokyo"];
/// let values: Vec<&str> = zones.into_iter().filter(|z| req.matches(z)).collect();
/// assert_eq!(values, ["Europe/Paris", "Europe/Berlin"]);
/// assert_eq!(req.context("country"), Some("FR"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompletionRequest {
    /// The argument (or template variable) being completed.
    pub argument: String,
    /// What the user typed so far.
    pub value: String,
    /// Arguments already chosen, by name.
    pub arguments: BTreeMap<String, String>,
    /// The verified caller, when the request has one.
    pub caller: Option<UserInfo>,
}

impl CompletionRequest {
    /// A request to complete `argument` from `value` (for unit tests of completion functions).
    pub fn new(argument: impl Into<String>, value: impl Into<String>) -> Self {
        CompletionRequest {
            argument: argument.into(),
            value: value.into(),
            arguments: BTreeMap::new(),
            caller: None,
        }
    }

    /// This request with argument `name` already set to `value`.
    pub fn with_context(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.arguments.insert(name.into(), value.into());
        self
    }

    /// This request made by `caller`.
    pub fn with_caller(mut self, caller: UserInfo) -> Self {
        self.caller = Some(caller);
        self
    }

    /// An argument already chosen.
    pub fn context(&self, name: &str) -> Option<&str> {
        self.arguments.get(name).map(String::as_str)
    }

    /// Whether `candidate` starts with what was typed, ignoring ASCII case.
    pub fn matches(&self, candidate: &str) -> bool {
        candidate
            .get(..self.value.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(&self.value))
    }
}

/// Completion values (MCP `completion`): at most [`MAX_COMPLETION_VALUES`] are sent; `total` and
/// `has_more` say how many exist when that is known.
///
/// ```
/// use mcp_plugin_sdk::Completion;
/// let c = Completion::new((0..150).map(|i| i.to_string()));
/// assert_eq!(c.values.len(), 100);
/// assert_eq!((c.total, c.has_more), (Some(150), true));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Completion {
    /// The values, best first.
    pub values: Vec<String>,
    /// How many values exist in all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// Whether more exist than were sent.
    pub has_more: bool,
}

impl Completion {
    /// A completion of these values (cut to [`MAX_COMPLETION_VALUES`], counting the rest).
    pub fn new<S: Into<String>>(values: impl IntoIterator<Item = S>) -> Self {
        let mut all: Vec<String> = values.into_iter().map(Into::into).collect();
        let total = all.len() as u64;
        let has_more = all.len() > MAX_COMPLETION_VALUES;
        all.truncate(MAX_COMPLETION_VALUES);
        Completion {
            values: all,
            total: Some(total),
            has_more,
        }
    }
}

/// Types a completion function may return.
pub trait IntoCompletion {
    /// Convert.
    fn into_completion(self) -> Completion;
}

impl IntoCompletion for Completion {
    fn into_completion(self) -> Completion {
        let mut c = self;
        if c.values.len() > MAX_COMPLETION_VALUES {
            c.values.truncate(MAX_COMPLETION_VALUES);
            c.has_more = true;
        }
        c
    }
}
impl IntoCompletion for Vec<String> {
    fn into_completion(self) -> Completion {
        Completion::new(self)
    }
}
impl IntoCompletion for Vec<&str> {
    fn into_completion(self) -> Completion {
        Completion::new(self)
    }
}
impl<T: IntoCompletion, E: std::fmt::Display> IntoCompletion for Result<T, E> {
    /// An error completes to nothing (completion is a hint; the failure is not the user's).
    fn into_completion(self) -> Completion {
        match self {
            Ok(c) => c.into_completion(),
            Err(_) => Completion::new(Vec::<String>::new()),
        }
    }
}
