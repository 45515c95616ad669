//! `mcp-host new <name> [--path DIR] [--sdk DIR]`: scaffold a plugin crate — a `cdylib` on the SDK
//! with one service (an `enabled()` gate and a constructor reading the plugin's configuration), one
//! documented tool, and tests on the SDK's test kit — that `cargo build --release` turns into a
//! library a tool directory takes as it is.
//!
//! The SDK dependency is a path to the `plugin-sdk` directory of an mcp-host checkout (its
//! workspace's `Cargo.lock` comes along, so the plugin builds with the versions the SDK is tested
//! with): the one given with `--sdk`, else the checkout this `mcp-host` was built in or is run
//! from. Without one, a version requirement on the SDK this host was built with (its `--version`
//! names it) only once that version is published ([`PUBLISHED_SDK`]); until then `new` says what
//! to do instead of writing a dependency cargo cannot resolve.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};

/// What `new` was asked for.
pub(crate) struct NewArgs {
    pub(crate) name: String,
    pub(crate) path: Option<PathBuf>,
    pub(crate) sdk: Option<PathBuf>,
}

/// Where the plugin's SDK comes from.
enum Sdk {
    /// A `plugin-sdk` directory (absolute), and the `Cargo.lock` of its workspace when known.
    Path(PathBuf, Option<PathBuf>),
    /// The published SDK, by version.
    Version(String),
}

/// Scaffold the crate and say what to do next: check the name and the directory, find the SDK,
/// write the files, then print the next steps.
pub(crate) fn new_plugin(args: NewArgs, out: &mut dyn std::io::Write) -> anyhow::Result<ExitCode> {
    check_name(&args.name)?;
    let dir = args.path.unwrap_or_else(|| PathBuf::from(&args.name));
    if dir.exists() && std::fs::read_dir(&dir)?.next().is_some() {
        bail!("{} already exists and is not empty", dir.display());
    }
    let sdk = match args.sdk {
        Some(path) => Sdk::checkout(&path)?,
        None => Sdk::default_for_this_host()?,
    };
    let krate = args.name.replace('-', "_");
    write_crate(&dir, &args.name, &krate, &sdk)?;
    print_next_steps(out, &args.name, &krate, &dir, &sdk)?;
    Ok(ExitCode::SUCCESS)
}

/// Whether the SDK this host was built with is on crates.io, so that a scaffold made outside a
/// checkout can depend on it by version. Set when a release publishes it.
const PUBLISHED_SDK: bool = false;

impl Sdk {
    /// The SDK a scaffold builds on without `--sdk`: this checkout's `plugin-sdk` (the checkout
    /// holding this `mcp-host` executable, else the one the current directory is in), else the
    /// published SDK of this host's version, else an error saying what to do.
    fn default_for_this_host() -> anyhow::Result<Sdk> {
        let exe = std::env::current_exe().ok();
        let cwd = std::env::current_dir().ok();
        let found = [exe.as_deref(), cwd.as_deref()]
            .into_iter()
            .flatten()
            .find_map(|start| start.ancestors().find_map(Sdk::in_checkout));
        if let Some(sdk) = found {
            return Ok(sdk);
        }
        let version = mcp_plugin_sdk::wire::BuildInfo::host()
            .sdk_version
            .to_string();
        if PUBLISHED_SDK {
            return Ok(Sdk::Version(version));
        }
        bail!(
            "no mcp-plugin-sdk to build the plugin on: this mcp-host is not in an mcp-host \
             checkout and neither is the current directory, and mcp-plugin-sdk {version} is not \
             published on crates.io. Get the mcp-host sources of this version and rerun with \
             `--sdk <checkout>/plugin-sdk` (or run `mcp-host new` from inside that checkout)"
        )
    }

    /// The `plugin-sdk` of the checkout rooted at `root`, if `root` is one.
    fn in_checkout(root: &Path) -> Option<Sdk> {
        let sdk = root.join("plugin-sdk");
        let manifest = std::fs::read_to_string(sdk.join("Cargo.toml")).ok()?;
        if !manifest.contains("name = \"mcp-plugin-sdk\"") {
            return None;
        }
        Sdk::checkout(&sdk).ok()
    }

    /// `--sdk DIR`: the `plugin-sdk` directory of a checkout, and its workspace's `Cargo.lock`.
    fn checkout(path: &Path) -> anyhow::Result<Sdk> {
        let sdk = std::fs::canonicalize(path)
            .with_context(|| format!("--sdk {}: no such directory", path.display()))?;
        let manifest = std::fs::read_to_string(sdk.join("Cargo.toml")).unwrap_or_default();
        if !manifest.contains("name = \"mcp-plugin-sdk\"") {
            bail!(
                "--sdk {}: not the mcp-plugin-sdk crate (no Cargo.toml naming it); give the \
                 plugin-sdk directory of an mcp-host checkout",
                path.display()
            );
        }
        let lock = sdk
            .parent()
            .map(|root| root.join("Cargo.lock"))
            .filter(|l| l.is_file());
        Ok(Sdk::Path(sdk, lock))
    }
}

/// Write the crate's files into `dir` from the templates (and a checkout's `Cargo.lock`).
fn write_crate(dir: &Path, name: &str, krate: &str, sdk: &Sdk) -> anyhow::Result<()> {
    let fill = |template: &str| {
        template
            .replace("{{name}}", name)
            .replace("{{crate}}", krate)
            .replace("{{library}}", &library_file(krate))
            .replace("{{version}}", env!("CARGO_PKG_VERSION"))
    };
    std::fs::create_dir_all(dir.join("src"))
        .with_context(|| format!("cannot create {}", dir.display()))?;
    let manifest = fill(CARGO_TOML)
        .replace("{{sdk}}", &sdk_dependency(sdk, false))
        .replace("{{sdk_testing}}", &sdk_dependency(sdk, true));
    write(&dir.join("Cargo.toml"), &manifest)?;
    write(&dir.join("src/lib.rs"), &fill(LIB_RS))?;
    write(&dir.join("README.md"), &fill(README_MD))?;
    write(&dir.join(".gitignore"), "/target\n")?;
    if let Sdk::Path(_, Some(lock)) = sdk {
        // Cargo keeps the versions it needs from it and drops the rest at the first build.
        let _ = std::fs::copy(lock, dir.join("Cargo.lock"));
    }
    Ok(())
}

/// Say what was made, which SDK it builds on, and how to test, build, call and install it.
fn print_next_steps(
    out: &mut dyn std::io::Write,
    name: &str,
    krate: &str,
    dir: &Path,
    sdk: &Sdk,
) -> std::io::Result<()> {
    writeln!(out, "Created plugin crate `{name}` in {}", dir.display())?;
    match sdk {
        Sdk::Path(path, _) => writeln!(out, "SDK: {}", path.display())?,
        Sdk::Version(version) => writeln!(
            out,
            "SDK: mcp-plugin-sdk {version} from crates.io (the one this mcp-host was built \
             with; to build against a checkout instead, rerun with --sdk DIR/plugin-sdk)"
        )?,
    }
    writeln!(out, "\nNext:")?;
    writeln!(out, "  cd {}", dir.display())?;
    writeln!(
        out,
        "  cargo test                 # the tool's tests (the SDK test kit, no host needed)"
    )?;
    writeln!(out, "  cargo build --release")?;
    writeln!(
        out,
        "  mcp-host call --plugin target/release/{} greet --args '{{\"name\": \"Ada\"}}'",
        library_file(krate)
    )?;
    writeln!(
        out,
        "  cp target/release/{} <a tool directory>   # picked up by a running mcp-host",
        library_file(krate)
    )
}

/// A package name cargo takes and a plugin name the host can use for a data directory.
fn check_name(name: &str) -> anyhow::Result<()> {
    let ok = (1..=64).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !ok {
        bail!(
            "invalid plugin name {name:?}: use lower-case letters, digits, `-` and `_`, starting \
             with a letter (e.g. my-tools)"
        );
    }
    Ok(())
}

/// `lib<crate>.so` (or the platform's form).
fn library_file(krate: &str) -> String {
    format!(
        "{}{krate}{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    )
}

/// The `mcp-plugin-sdk = ...` line, with the test kit's feature for `[dev-dependencies]`.
fn sdk_dependency(sdk: &Sdk, testing: bool) -> String {
    let features = if testing {
        ", features = [\"testing\"]"
    } else {
        ""
    };
    match sdk {
        Sdk::Path(path, _) => format!(
            "mcp-plugin-sdk = {{ path = {}{features} }}",
            toml_string(&path.display().to_string())
        ),
        Sdk::Version(version) => format!(
            "# The SDK this mcp-host was built with (`mcp-host --version`); the host loads plugins\n\
             # built with a compatible one. For a checkout: path = \"../mcp-host/plugin-sdk\"\n\
             mcp-plugin-sdk = {{ version = \"{version}\"{features} }}"
        ),
    }
}

/// A TOML basic string.
fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

const CARGO_TOML: &str = r#"[package]
name = "{{name}}"
version = "0.1.0"
edition = "2024"
publish = false
description = "An mcp-host plugin."

[lib]
# A shared library mcp-host loads: target/release/{{library}}.
crate-type = ["cdylib"]

[dependencies]
{{sdk}}
# The derives of argument and result types name these crates.
serde = { version = "1", features = ["derive"] }
schemars = "1"

[dev-dependencies]
# The SDK's test kit (`mcp_plugin_sdk::testing::TestPlugin`), for the tests in src/lib.rs.
{{sdk_testing}}

# A crate of its own, even inside another workspace's directory.
[workspace]

# Plugins are loaded by the hundred: keep them small. `panic` must stay "unwind": the SDK turns a
# tool's panic into an error result.
[profile.release]
codegen-units = 1
strip = "debuginfo"
"#;

const LIB_RS: &str = r#"//! `{{name}}`: an mcp-host plugin.
//!
//! Every `pub fn` of a `#[service]` impl block is a tool (its doc comment is the description the
//! model reads; each parameter is documented under `# Arguments`). The host's configuration
//! section for this plugin is `plugins.{{name}}.config`:
//!
//! ```yaml
//! plugins:
//!   {{name}}:
//!     config:
//!       greeting: Hi      # default: Hello
//!       enabled: true     # false turns the Greeter service (and its tools) off
//! ```

use mcp_plugin_sdk::{
    CallContext, HostApi, JsonSchema, LogLevel, Serialize, UserInfo, export_plugin, service,
};

/// What `greet` returns: clients get it as structured content (with an output schema) and as JSON
/// text.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Greeting {
    /// The greeting.
    pub text: String,
    /// Who asked: the verified caller, when the call has one.
    pub from: Option<String>,
}

/// Greets people with the configured greeting.
pub struct Greeter {
    greeting: String,
}

#[service]
impl Greeter {
    /// Whether the host serves this service's tools: yes, unless the configuration says
    /// `enabled: false` (the host logs a service it skips).
    fn enabled(host: &HostApi) -> bool {
        host.config_value("enabled")
            .and_then(|v| v.as_bool())
            .unwrap_or(true)
    }

    /// Built once, when the host loads the plugin: read the configuration here.
    pub fn new(host: &HostApi) -> Self {
        let greeting = host
            .config_value("greeting")
            .and_then(|v| v.as_str())
            .unwrap_or("Hello");
        Greeter {
            greeting: greeting.to_owned(),
        }
    }

    /// Greet someone by name, with the configured greeting. Use it when the user asks to greet or
    /// welcome a person.
    ///
    /// # Arguments
    /// * `name` - Who to greet, e.g. "Ada".
    /// * `excitement` - How many exclamation marks, from 1 to 5.
    #[tool(read_only, idempotent)]
    pub fn greet(
        &self,
        caller: Option<UserInfo>,
        ctx: &CallContext,
        name: String,
        #[arg(default = 1, min = 1, max = 5)] excitement: u8,
    ) -> Result<Greeting, String> {
        let name = name.trim();
        if name.is_empty() {
            return Err("name is empty: say who to greet, e.g. \"Ada\"".to_owned());
        }
        ctx.log(LogLevel::Info, &format!("greeting {name}"));
        Ok(Greeting {
            text: format!(
                "{}, {name}{}",
                self.greeting,
                "!".repeat(usize::from(excitement))
            ),
            from: caller.map(|c| c.user_id),
        })
    }
}

// Exports every `#[tool]` and `#[service]` of this crate.
export_plugin!();

#[cfg(test)]
mod tests {
    use mcp_plugin_sdk::testing::{CallEvent, TestHost, TestPlugin};
    use mcp_plugin_sdk::{LogLevel, UserInfo, json};

    #[test]
    fn greet_uses_the_configured_greeting_and_the_callers_name() {
        let plugin = TestPlugin::with_host(TestHost::new().with_config(json!({"greeting": "Hi"})));
        let call = plugin.host().call();
        let result = plugin
            .call_with(
                &call,
                Some(&UserInfo::new("ada")),
                "greet",
                json!({"name": "Bob", "excitement": 2}),
            )
            .expect("greet is served");
        assert!(!result.is_error, "{}", result.text());
        let greeting = result.structured_content.expect("structured content");
        assert_eq!(greeting["text"], "Hi, Bob!!");
        assert_eq!(greeting["from"], "ada");
        assert_eq!(
            call.events(),
            [CallEvent::Log {
                level: LogLevel::Info,
                message: "greeting Bob".into()
            }]
        );
    }

    #[test]
    fn greet_arguments_are_checked_against_its_schema_like_the_host_does() {
        let plugin = TestPlugin::new();
        let schema = &plugin.tool("greet").expect("greet is served")["inputSchema"];
        assert_eq!(schema["properties"]["excitement"]["maximum"], 5);
        let result = plugin
            .call("greet", json!({"name": "Bob", "excitement": 9}))
            .expect("greet is served");
        assert!(result.is_error);
        assert!(
            result.text().contains("argument `excitement`"),
            "{}",
            result.text()
        );
        let empty = plugin
            .call("greet", json!({"name": " "}))
            .expect("greet is served");
        assert!(empty.is_error);
    }

    #[test]
    fn the_service_is_off_when_the_configuration_says_so() {
        let plugin = TestPlugin::with_host(TestHost::new().with_config(json!({"enabled": false})));
        assert!(plugin.tools().is_empty());
    }
}
"#;

const README_MD: &str = r#"# {{name}}

An mcp-host plugin, made with `mcp-host new {{name}}` (mcp-host {{version}}).

```sh
cargo test               # the tests in src/lib.rs: the SDK's test kit calls the tools, no host needed
cargo build --release    # target/release/{{library}}
mcp-host check target/release/{{library}}    # what the host sees: build fingerprint, tools (--json: schemas)
mcp-host call --plugin target/release/{{library}} greet --args '{"name": "Ada"}' --user ada
cp target/release/{{library}} /path/to/a/tool/directory/   # a running mcp-host picks it up
```

`--plugin` takes the tool from that one file, without a configuration; once the library is in a
tool directory of the host's configuration, `mcp-host call greet ...` finds it there.

Configure it in the host's configuration under `plugins.{{name}}.config` (see `src/lib.rs`).
"#;
