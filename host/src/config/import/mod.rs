//! `mcp-host import`: `tool_dirs` entries made from the MCP server lists other hosts keep — a
//! Claude Desktop or Cursor `mcpServers` map ([`desktop`]) or an MCP registry `server.json`
//! ([`registry`]) — printed as YAML, or appended to a configuration file ([`write`]) keeping
//! what it holds.
//!
//! A value that looks like a secret (an environment variable named like a token or key, a value
//! shaped like one, an `Authorization` header, a registry input marked `isSecret`) is never copied:
//! the entry references it as `${NAME}`, and the import says which variables the host's
//! environment must then provide.

mod desktop;
mod registry;
mod write;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Serialize;

pub use self::write::{Appended, append_to_config};
use super::UpstreamServer;

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
            out.push_str(&format!("# Skipped {}: {}\n", skipped.name, skipped.why));
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
    fn names(self) -> BTreeSet<String> {
        self.owners.into_keys().collect()
    }
}

/// An environment variable's value as the entry holds it: a `${NAME}` reference when it looks
/// like a secret, else the value.
fn env_value(server: &str, key: &str, value: &str, vars: &mut Vars) -> String {
    if secret_like(key, value) {
        vars.reference(server, key)
    } else {
        value.to_owned()
    }
}

/// A header's value as the entry holds it: a secret (`Authorization`, or one that looks like a
/// secret) becomes a reference named after the server (`Bearer ${NAME_TOKEN}` for a bearer
/// token), anything else stays.
fn header_value(server: &str, header: &str, value: &str, vars: &mut Vars) -> String {
    if header.eq_ignore_ascii_case("authorization") && !value.contains("${") {
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
    if secret_like(header, value) {
        return vars.reference(server, &format!("{server}_{header}"));
    }
    value.to_owned()
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

/// Words of a variable or header name that make its value a secret.
const SECRET_WORDS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "KEY",
    "APIKEY",
    "CREDENTIAL",
    "CREDENTIALS",
    "AUTH",
    "AUTHORIZATION",
    "COOKIE",
    "PAT",
    "PRIVATE",
    "SIGNATURE",
];

/// Prefixes of well-known token formats.
const TOKEN_PREFIXES: &[&str] = &[
    "sk-",
    "sk_",
    "pk_",
    "rk_",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "github_pat_",
    "glpat-",
    "xoxb-",
    "xoxp-",
    "xapp-",
    "AKIA",
    "AIza",
    "eyJ",
    "Bearer ",
    "Basic ",
    "npm_",
    "hf_",
    "lin_api_",
];

/// Whether `value` (of variable or header `key`) looks like a secret: the name says so, the value
/// has a token's known form or shape, or it is a URL with a password.
pub(crate) fn secret_like(key: &str, value: &str) -> bool {
    if value.is_empty() || is_reference(value) {
        return false;
    }
    let upper = key.to_ascii_uppercase();
    let named = upper
        .split(|c: char| !c.is_ascii_alphanumeric())
        .any(|word| SECRET_WORDS.contains(&word))
        || ["TOKEN", "SECRET", "PASSWORD", "APIKEY"]
            .iter()
            .any(|w| upper.contains(w));
    named || TOKEN_PREFIXES.iter().any(|p| value.starts_with(p)) || token_shaped(value) || {
        // scheme://user:password@host
        value.split_once("://").is_some_and(|(_, rest)| {
            let authority = rest.split('/').next().unwrap_or(rest);
            authority
                .split_once('@')
                .is_some_and(|(user, _)| user.contains(':'))
        })
    }
}

/// A long run of letters and digits (and `-_.=+/`) mixing both, without spaces or a path's
/// slashes: what generated keys look like.
fn token_shaped(value: &str) -> bool {
    value.len() >= 24
        && !value.contains(char::is_whitespace)
        && !value.starts_with('/')
        && !value.contains("://")
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.=+/".contains(c))
        && value.chars().any(|c| c.is_ascii_digit())
        && value.chars().any(|c| c.is_ascii_alphabetic())
        && value.chars().filter(|c| *c == '/').count() <= 2
}

/// Whether `value` is already a `${NAME}` reference.
fn is_reference(value: &str) -> bool {
    value.starts_with("${") && value.ends_with('}') && value.matches("${").count() == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_recognised_by_name_form_and_shape() {
        for (key, value) in [
            ("GITHUB_PERSONAL_ACCESS_TOKEN", "abc"),
            ("OPENAI_API_KEY", "x"),
            ("DB_PASSWORD", "hunter2"),
            ("ANYTHING", "ghp_0123456789abcdefghij"),
            ("ANYTHING", "sk-proj-xyz"),
            ("DATABASE_URL", "postgres://me:pw@db.example/prod"),
            ("BLOB", "a8F3kZ29qLm0Xw7Yt5Rb1Nc4Vd6Ue"),
        ] {
            assert!(secret_like(key, value), "{key}={value}");
        }
        for (key, value) in [
            ("LOG_LEVEL", "debug"),
            ("ALLOWED_DIR", "/srv/docs/2024/reports/quarterly"),
            ("KEYBOARD_LAYOUT", "us"),
            ("BASE_URL", "https://api.example.com/v1"),
            ("GITHUB_TOKEN", "${GITHUB_TOKEN}"),
        ] {
            assert!(!secret_like(key, value), "{key}={value}");
        }
    }

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
