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
    allow: Option<Globs>,
    deny: Globs,
    /// How `tools/list` shows the agent its tools.
    pub tools: ToolsMode,
    /// In search mode, the tools listed all the same.
    always_list: Globs,
}

/// One list of tool-name globs. The lists agents are usually given — `*`, and names without
/// wildcards — are matched without a regex: building a `GlobSet` compiles one (about 50k
/// instructions a list, at every start), which only a list with real patterns needs.
#[derive(Debug)]
enum Globs {
    /// The list holds `*` (or `**`): every name.
    All,
    /// Names without wildcards only (none for an empty list).
    Names(Vec<String>),
    /// Patterns.
    Set(GlobSet),
}

impl Globs {
    /// Parse `globs` (each is checked as a glob whichever way it is matched).
    fn new(agent: &str, globs: &[String]) -> Result<Globs, AgentError> {
        let invalid = |glob: &str, reason: String| AgentError {
            agent: agent.to_owned(),
            glob: glob.to_owned(),
            reason,
        };
        let mut parsed = Vec::with_capacity(globs.len());
        for g in globs {
            parsed.push(Glob::new(g).map_err(|e| invalid(g, e.kind().to_string()))?);
        }
        if globs.iter().any(|g| g == "*" || g == "**") {
            return Ok(Globs::All);
        }
        // A name without glob syntax matches only itself (a backslash escapes, so it is a pattern).
        if globs
            .iter()
            .all(|g| !g.contains(['*', '?', '[', ']', '{', '}', '\\']))
        {
            return Ok(Globs::Names(globs.to_vec()));
        }
        let mut b = GlobSetBuilder::new();
        for glob in parsed {
            b.add(glob);
        }
        b.build()
            .map(Globs::Set)
            .map_err(|e| invalid("", e.to_string()))
    }

    fn is_match(&self, tool: &str) -> bool {
        match self {
            Globs::All => true,
            Globs::Names(names) => names.iter().any(|n| n == tool),
            Globs::Set(set) => set.is_match(tool),
        }
    }
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
        Ok(Agent {
            name: name.to_owned(),
            allow: if settings.allow.is_empty() {
                None
            } else {
                Some(Globs::new(name, &settings.allow)?)
            },
            deny: Globs::new(name, &settings.deny)?,
            tools: settings.tools,
            always_list: Globs::new(name, &settings.always_list)?,
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn agent(allow: &[&str], deny: &[&str]) -> Agent {
        let strings = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
        Agent::new(
            "a",
            &AgentSettings {
                allow: strings(allow),
                deny: strings(deny),
                ..AgentSettings::default()
            },
        )
        .unwrap()
    }

    #[test]
    fn star_names_and_patterns_match_as_globs_do() {
        let a = agent(&["*"], &["delete_reading", "record_reading"]);
        assert!(matches!(a.allow, Some(Globs::All)));
        assert!(matches!(a.deny, Globs::Names(_)));
        assert!(a.permits("current_time") && a.permits("delete"));
        assert!(!a.permits("delete_reading") && !a.permits("record_reading"));

        let a = agent(&["time_*", "hash_text"], &["time_zone?", "x[ab]"]);
        assert!(matches!(a.allow, Some(Globs::Set(_))));
        assert!(a.permits("time_now") && a.permits("hash_text") && a.permits("time_zone"));
        assert!(!a.permits("time_zones") && !a.permits("hash_texts") && !a.permits("xa"));

        let a = agent(&["**", "time_*"], &[]);
        assert!(matches!(a.allow, Some(Globs::All)) && a.permits("anything"));
        assert!(matches!(a.always_list, Globs::Names(ref n) if n.is_empty()));
        assert!(!a.always_lists("anything"));
    }

    #[test]
    fn an_invalid_glob_is_refused_even_beside_a_star() {
        let settings = AgentSettings {
            allow: vec!["*".into(), "a[".into()],
            ..AgentSettings::default()
        };
        let e = Agent::new("ops", &settings).unwrap_err();
        assert_eq!((e.agent.as_str(), e.glob.as_str()), ("ops", "a["));
    }
}
