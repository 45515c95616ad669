//! Agents: named views of the tools, each with `allow` and `deny` lists of tool-name globs, and how
//! `tools/list` shows them (`tools: all`, or `search`: a search tool and a call tool, plus the
//! `always_list` globs).
//!
//! Deny always wins; an agent with no `allow` list sees everything not denied. A tool an agent cannot
//! see is not callable through it either: calling it is the same "unknown tool" as a tool that does
//! not exist (the seed filtered the list only, so hidden tools stayed callable).

use std::collections::BTreeMap;
use std::sync::Arc;

use globset::{Glob, GlobSet, GlobSetBuilder};

use crate::config::{AgentSettings, ToolsMode};

/// A glob in an agent's lists is not valid.
#[derive(Debug, thiserror::Error)]
#[error("agent {agent}: invalid tool glob {glob:?}: {reason}")]
pub struct AgentError {
    /// The agent.
    pub agent: String,
    /// The glob.
    pub glob: String,
    /// Why.
    pub reason: String,
}

/// One agent's view.
#[derive(Debug)]
pub struct Agent {
    /// The agent's name.
    pub name: String,
    allow: Option<GlobSet>,
    deny: GlobSet,
    /// How `tools/list` shows the agent its tools.
    pub tools: ToolsMode,
    /// In search mode, the tools listed all the same.
    always_list: GlobSet,
}

impl Agent {
    /// Whether the agent may see and call `tool`.
    ///
    /// ```
    /// use mcp_host::access::agents::Agent;
    /// use mcp_host::config::AgentSettings;
    /// let a = Agent::new("research", &AgentSettings {
    ///     allow: vec!["time_*".into(), "json_*".into()],
    ///     deny: vec!["json_format".into()],
    ///     ..AgentSettings::default()
    /// }).unwrap();
    /// assert!(a.permits("time_now") && a.permits("json_query"));
    /// assert!(!a.permits("json_format") && !a.permits("hash_text"));
    /// ```
    pub fn permits(&self, tool: &str) -> bool {
        !self.deny.is_match(tool) && self.allow.as_ref().is_none_or(|a| a.is_match(tool))
    }

    /// Whether `tools/list` shows this agent a search tool and a call tool instead of every tool.
    pub fn searches(&self) -> bool {
        self.tools == ToolsMode::Search
    }

    /// Whether `tool` is listed in search mode besides the search and call tools (it must also be
    /// permitted).
    pub fn always_lists(&self, tool: &str) -> bool {
        self.always_list.is_match(tool) && self.permits(tool)
    }

    /// Build an agent from its settings.
    pub fn new(name: &str, settings: &AgentSettings) -> Result<Agent, AgentError> {
        let build = |globs: &[String]| -> Result<GlobSet, AgentError> {
            let mut b = GlobSetBuilder::new();
            for g in globs {
                b.add(Glob::new(g).map_err(|e| AgentError {
                    agent: name.to_owned(),
                    glob: g.clone(),
                    reason: e.kind().to_string(),
                })?);
            }
            b.build().map_err(|e| AgentError {
                agent: name.to_owned(),
                glob: String::new(),
                reason: e.to_string(),
            })
        };
        Ok(Agent {
            name: name.to_owned(),
            allow: if settings.allow.is_empty() {
                None
            } else {
                Some(build(&settings.allow)?)
            },
            deny: build(&settings.deny)?,
            tools: settings.tools,
            always_list: build(&settings.always_list)?,
        })
    }
}

/// All configured agents.
#[derive(Debug, Default)]
pub struct Agents {
    map: BTreeMap<String, Arc<Agent>>,
}

impl Agents {
    /// Build every agent of the configuration.
    pub fn from_config(agents: &BTreeMap<String, AgentSettings>) -> Result<Agents, AgentError> {
        let mut map = BTreeMap::new();
        for (name, settings) in agents {
            map.insert(name.clone(), Arc::new(Agent::new(name, settings)?));
        }
        Ok(Agents { map })
    }

    /// The agent called `name`.
    pub fn get(&self, name: &str) -> Option<Arc<Agent>> {
        self.map.get(name).cloned()
    }

    /// Whether any agent is configured.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}
