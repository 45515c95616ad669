//! `mcp-host import`: `tool_dirs` entries made from the MCP server lists other hosts keep — a
//! Claude Desktop or Cursor `mcpServers` map ([`desktop`]) or an MCP registry `server.json`
//! ([`registry`]) — printed as YAML, or appended to a configuration file ([`write`]) keeping
//! what it holds.
//!
//! A value that looks like a secret (an environment variable named like a token or key, a value
//! shaped like one, an `Authorization` header, a registry input marked `isSecret`) is never copied:
//! the entry references it as `${NAME}`, and the import says which variables the host's
//! environment must then provide.
//!
//! Nothing of the imported text may expand: the host reads `${NAME}` in any configuration value
//! from its own environment, so an entry whose copied text holds `${` (a URL, a header, an
//! argument, an environment value) is refused, naming the field; the only references an entry
//! holds are the ones the import gives it (for secrets, and for the variables a `server.json`
//! declares), listed for the operator to set.

mod desktop;
mod registry;
mod write;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Serialize;

pub use self::write::{Appended, append_to_config};
use super::UpstreamServer;
use super::secrets::{is_secret, is_secret_header};

/// What an import made.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Import {
    /// The entries, in the order of the source.
    pub entries: Vec<Entry>,
    /// What was not imported, and why.
    pub skipped: Vec<Skipped>,
    /// The `${NAME}` references the entries hold in place of secrets (and of values the source
    /// left for the user to fill in): the host's environment must provide them.
    pub variables: BTreeSet<String>,
}

/// One `tool_dirs` entry for an upstream server.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Entry {
    /// How it is reached.
    pub server: UpstreamServer,
    /// Its name.
    pub name: String,
}

/// A server of the source that gave no entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// Its name in the source.
    pub name: String,
    /// Why.
    pub why: String,
}

/// An import that could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The source or the configuration file could not be read or written.
    #[error("{path}: {reason}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: std::io::Error,
    },
    /// The source is not what the import reads.
    #[error("{path}: {message}")]
    Source {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The configuration file cannot take the entries as it is written.
    #[error("{path}: {message}")]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong, and what to do.
        message: String,
    },
}

/// The entries of a Claude Desktop or Cursor configuration (`{"mcpServers": {name: {command,
/// args, env} | {url, headers}}}`) at `path`.
pub fn claude_desktop(path: &Path) -> Result<Import, ImportError> {
    desktop::import(path, &read(path)?)
}

/// The entry of an MCP registry `server.json` at `path` (its first package this host can run, or
/// else its first remote).
pub fn server_json(path: &Path) -> Result<Import, ImportError> {
    registry::import(path, &read(path)?)
}

/// Where Claude Desktop keeps its configuration on this platform.
pub fn claude_desktop_default_path() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let dir = if cfg!(target_os = "macos") {
        home.map(|h| h.join("Library/Application Support"))
    } else if cfg!(windows) {
        std::env::var_os("APPDATA").map(PathBuf::from)
    } else {
        std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .or_else(|| home.map(|h| h.join(".config")))
    };
    dir.map(|d| d.join("Claude").join("claude_desktop_config.json"))
}

fn read(path: &Path) -> Result<String, ImportError> {
    std::fs::read_to_string(path).map_err(|reason| ImportError::Io {
        path: path.to_owned(),
        reason,
    })
}

impl Import {
    /// The entries as the YAML of a `tool_dirs` list (the key included), with what was skipped
    /// and the variables to set as comments.
    pub fn to_yaml(&self) -> String {
        let mut out = String::new();
        if !self.variables.is_empty() {
            out.push_str(&format!(
                "# Set in the host's environment: {}\n",
                self.variables
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        for skipped in &self.skipped {
            out.push_str(&format!(
                "# Skipped {}: {}\n",
                one_line(&skipped.name),
                one_line(&skipped.why)
            ));
        }
        if !self.entries.is_empty() {
            out.push_str("tool_dirs:\n");
            out.push_str(&self.entries_yaml("  "));
        }
        out
    }

    /// The entries as YAML list items, each line indented by `indent`.
    pub fn entries_yaml(&self, indent: &str) -> String {
        self.entries
            .iter()
            .map(|entry| {
                let yaml = serde_saphyr::to_string(&[entry]).unwrap_or_default();
                yaml.lines()
                    .map(|line| format!("{indent}{line}\n"))
                    .collect::<String>()
            })
            .collect()
    }
}

/// `text` (which may quote the imported file) on one comment line: line breaks and other control
/// characters escaped, so that it cannot end the comment and add YAML of its own.
fn one_line(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

/// The `${NAME}` references given out by one import: a name taken by two servers (two with an
/// `API_KEY`) is made unique with the second one's name.
#[derive(Debug, Default)]
pub(crate) struct Vars {
    /// Each variable and the server it was given to.
    owners: std::collections::BTreeMap<String, String>,
}

impl Vars {
    /// A reference for the secret `wanted` of server `server`: `${WANTED}`, or
    /// `${SERVER_WANTED}` when another server has `WANTED`.
    fn reference(&mut self, server: &str, wanted: &str) -> String {
        let mut name = var_name(wanted);
        if self.owners.get(&name).is_some_and(|owner| owner != server) {
            name = var_name(&format!("{server}_{wanted}"));
        }
        self.owners.insert(name.clone(), server.to_owned());
        format!("${{{name}}}")
    }

    /// Every variable given out.
    #[cfg(test)]
    fn names(self) -> BTreeSet<String> {
        self.owners.into_keys().collect()
    }

    /// The variables given out that `entries` hold: the ones the user must set (a server that
    /// gave no entry needs none).
    fn names_in(self, entries: &[Entry]) -> BTreeSet<String> {
        let mut wanted = BTreeSet::new();
        for entry in entries {
            collect_references(&entry.server, &mut wanted);
        }
        self.owners
            .into_keys()
            .filter(|name| wanted.contains(name))
            .collect()
    }
}

/// Every `${NAME}` in `server`'s values.
fn collect_references(server: &UpstreamServer, into: &mut BTreeSet<String>) {
    let values = server
        .command
        .iter()
        .chain(server.env.values())
        .chain(server.headers.values())
        .chain(server.url.iter());
    for value in values {
        let mut rest = value.as_str();
        while let Some(start) = rest.find("${") {
            let after = &rest[start + 2..];
            let Some(end) = after.find('}') else { break };
            into.insert(after[..end].to_owned());
            rest = &after[end + 1..];
        }
    }
}

/// An environment variable's value as the entry holds it: a `${NAME}` reference when it looks
/// like a secret, else the value.
fn env_value(server: &str, key: &str, value: &str, vars: &mut Vars) -> String {
    if is_secret(key, value) {
        vars.reference(server, key)
    } else {
        value.to_owned()
    }
}

/// A header's value as the entry holds it: a secret (`Authorization`, or one that looks like a
/// secret) becomes a reference named after the server (`Bearer ${NAME_TOKEN}` for a bearer
/// token), anything else stays.
fn header_value(server: &str, header: &str, value: &str, vars: &mut Vars) -> String {
    if header.eq_ignore_ascii_case("authorization") && is_secret_header(header, value) {
        if let Some((scheme, _)) = value
            .split_once(' ')
            .filter(|(s, _)| s.eq_ignore_ascii_case("bearer"))
        {
            return format!(
                "{scheme} {}",
                vars.reference(server, &format!("{server}_TOKEN"))
            );
        }
        return vars.reference(server, &format!("{server}_AUTHORIZATION"));
    }
    if is_secret_header(header, value) {
        return vars.reference(server, &format!("{server}_{header}"));
    }
    value.to_owned()
}

/// Refuse `text`, copied from the imported file into an entry's `field`, when it holds `${`: the
/// host expands `${NAME}` and `${NAME:-}` from its own environment wherever a configuration
/// value holds them, so a reference written by the file's author would have the host send its own
/// secrets (`${AWS_SECRET_ACCESS_KEY:-}`) to the author's server. The configuration has no escape
/// for `${`, so the entry is refused, naming the field.
fn literal(field: &str, text: &str) -> Result<(), String> {
    match text.find("${") {
        None => Ok(()),
        Some(at) => Err(expansion_refused(field, &text[at..])),
    }
}

/// Why an entry is refused: `field` holds the reference at the start of `from`.
fn expansion_refused(field: &str, from: &str) -> String {
    let end = from.find('}').map_or(from.len(), |e| e + 1);
    let mut reference: String = from[..end].chars().take(64).collect();
    if reference.len() < end {
        reference.push('…');
    }
    format!(
        "{field} holds {reference:?}, which the host would expand from its own environment into \
         what it runs or sends: `mcp-host import` keeps no `${{…}}` from imported text (write \
         this entry by hand if a variable of the host's is meant)"
    )
}

/// The safety net under [`literal`]: every `${` in an entry made for `server` must be a `${NAME}`
/// reference the import gave to that server (a secret's, or a variable the source declares).
fn only_given_references(entry: &UpstreamServer, server: &str, vars: &Vars) -> Result<(), String> {
    let mut values: Vec<(String, &str)> = Vec::new();
    values.extend(
        entry
            .command
            .iter()
            .enumerate()
            .map(|(i, a)| (format!("command[{i}]"), a.as_str())),
    );
    values.extend(
        entry
            .env
            .iter()
            .map(|(k, v)| (format!("env.{k}"), v.as_str())),
    );
    values.extend(
        entry
            .headers
            .iter()
            .map(|(k, v)| (format!("headers.{k}"), v.as_str())),
    );
    values.extend(entry.url.iter().map(|u| ("url".to_owned(), u.as_str())));
    values.extend(
        entry
            .cwd
            .iter()
            .filter_map(|c| c.to_str())
            .map(|c| ("cwd".to_owned(), c)),
    );
    for (field, value) in values {
        let mut rest = value;
        while let Some(start) = rest.find("${") {
            let after = &rest[start + 2..];
            let given = after
                .find('}')
                .is_some_and(|end| vars.owners.get(&after[..end]).is_some_and(|o| o == server));
            if !given {
                return Err(expansion_refused(&field, &rest[start..]));
            }
            rest = after;
        }
    }
    Ok(())
}

/// `raw` as an environment variable's name: upper case letters, digits and `_`, not starting
/// with a digit.
fn var_name(raw: &str) -> String {
    let mut name: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert(0, '_');
    }
    name
}

/// `raw` as an upstream's name: letters, digits, `-`, `_` and `.`, not starting with `.`.
fn entry_name(raw: &str, server: &UpstreamServer) -> String {
    let name: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let name = name.trim_start_matches('.');
    if name.is_empty() {
        server.suggested_name()
    } else {
        name.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_unique_per_server() {
        let mut vars = Vars::default();
        assert_eq!(vars.reference("a", "API_KEY"), "${API_KEY}");
        assert_eq!(vars.reference("a", "API_KEY"), "${API_KEY}");
        assert_eq!(vars.reference("b", "API_KEY"), "${B_API_KEY}");
        assert_eq!(vars.reference("c", "my-token"), "${MY_TOKEN}");
        assert_eq!(vars.names().len(), 3);
    }
}
