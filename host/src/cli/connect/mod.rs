//! `mcp-host connect URL`: an MCP client in the terminal, on the host's own upstream connection
//! (`mcp_host::plugins::upstream::client`) and OAuth engine (`mcp_host::access::upstream`) — the
//! way to try a server before adding it as an upstream, and what the conformance suite's client
//! mode runs. It discovers the server (`--protocol`), authorizes when the server asks (OAuth, the
//! authorization URL shown, opened or fetched, its callback on a loopback listener: [`oauth`]),
//! lists its tools (resources and prompts on request), calls tools, answers the server's form
//! questions as `--answer` says ([`answers`]) and prints it all ([`report`]).
//!
//! Exit status: 0 when everything asked for worked; 2 when authorization was refused (by the
//! host's checks — a resource, issuer or `iss` that does not match, an authorization server
//! without PKCE — or by the authorization server); 1 for anything else (the server could not be
//! reached, a call failed or returned a tool error).

mod answers;
mod browser;
mod callback;
mod oauth;
mod report;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use mcp_host::plugins::upstream::client::{Client, ClientError, ClientOptions, Lifecycle};
use serde_json::{Map, Value};

pub(crate) use answers::Answer;

/// The protocol revision `connect` speaks (`--protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Protocol {
    /// `server/discover` (2026-07-28) first, `initialize` (2025-11-25) if the server refuses it.
    Auto,
    /// `initialize`, a session (2025-11-25).
    #[value(name = "2025-11-25")]
    V2025,
    /// `server/discover`, stateless (2026-07-28).
    #[value(name = "2026-07-28")]
    V2026,
}

/// `mcp-host connect`'s arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct ConnectArgs {
    /// The server's Streamable HTTP endpoint, e.g. https://mcp.example.com/mcp.
    pub(crate) url: String,
    /// Which protocol revision to speak.
    #[arg(long, value_enum, default_value = "auto")]
    pub(crate) protocol: Protocol,
    /// A header sent with every request, NAME=VALUE (repeatable).
    #[arg(long = "header", value_name = "NAME=VALUE")]
    pub(crate) headers: Vec<String>,
    /// Call this tool, with these arguments (a JSON object; default: made up from its schema's
    /// required fields). Repeatable; calls are made in order.
    #[arg(long = "call", value_name = "NAME[=JSON]")]
    pub(crate) calls: Vec<String>,
    /// Call every listed tool, with arguments made up from its schema's required fields.
    #[arg(long)]
    pub(crate) call_all: bool,
    /// List the server's resources (and templates).
    #[arg(long)]
    pub(crate) resources: bool,
    /// List the server's prompts.
    #[arg(long)]
    pub(crate) prompts: bool,
    /// Read every listed resource and get every listed prompt (arguments made up).
    #[arg(long)]
    pub(crate) read_all: bool,
    /// How to answer the server's form questions (elicitations) during a call.
    #[arg(long, value_enum, default_value = "decline")]
    pub(crate) answer: Answer,
    /// How long the connection (an authorization in the browser included) and each call may
    /// take, in seconds.
    #[arg(long, default_value_t = 300, value_name = "SECS")]
    pub(crate) timeout: u64,
    /// Print JSON instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(
        flatten,
        next_help_heading = "OAuth (when the server asks for authorization)"
    )]
    pub(crate) oauth: oauth::OAuthArgs,
}

/// Run `mcp-host connect`, writing its report to `out`.
pub(crate) fn connect(args: ConnectArgs, out: &mut dyn std::io::Write) -> anyhow::Result<ExitCode> {
    let timeout = Duration::from_secs(args.timeout.max(1));
    let auth = oauth::authorizer(&args, timeout)?;
    let options = ClientOptions {
        name: oauth::upstream_name(&args.url),
        url: args.url.clone(),
        headers: headers(&args.headers)?,
        lifecycle: match args.protocol {
            Protocol::Auto => Lifecycle::Auto,
            Protocol::V2025 => Lifecycle::Initialize,
            Protocol::V2026 => Lifecycle::Discover,
        },
        auth: auth.as_ref().map(|a| Arc::clone(a) as _),
        timeout,
    };
    let refused = || auth.as_ref().is_some_and(|a| a.was_refused());
    let mut report = report::Report::new(args.json);
    let client = match Client::connect(options) {
        Ok(client) => client,
        Err(e) => {
            report.failed(&format!("cannot connect to {}", args.url), &e.to_string());
            report.write(out)?;
            return Ok(exit(true, refused()));
        }
    };
    report.connected(&args.url, &client);
    if args.resources || args.read_all {
        report.resources(client.manifest());
    }
    if args.prompts || args.read_all {
        report.prompts(client.manifest());
    }
    let failed = calls(&args, &client, &mut report)?;
    report.write(out)?;
    Ok(exit(failed, refused()))
}

/// The exit status: 2 when authorization was refused, 1 when anything else failed, else 0.
fn exit(failed: bool, refused: bool) -> ExitCode {
    match (failed, refused) {
        (_, true) => ExitCode::from(2),
        (true, false) => ExitCode::from(1),
        (false, false) => ExitCode::SUCCESS,
    }
}

/// `--header NAME=VALUE`s as pairs.
fn headers(given: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    given
        .iter()
        .map(|h| {
            let (name, value) = h
                .split_once('=')
                .with_context(|| format!("--header {h}: not NAME=VALUE"))?;
            Ok((name.trim().to_owned(), value.to_owned()))
        })
        .collect()
}

/// The tool calls, resource reads and prompts asked for, into `report`; whether any failed.
fn calls(args: &ConnectArgs, client: &Client, report: &mut report::Report) -> anyhow::Result<bool> {
    let input = answers::Answers::new(args.answer);
    let mut failed = false;
    for (name, arguments) in planned(args, client)? {
        let result = client.call_tool(&name, &arguments, Some(input.clone() as _), None);
        failed |= report.call(&name, &arguments, &result);
    }
    if args.read_all {
        for resource in client.manifest().resources.iter().filter(|r| !r.template) {
            let result = client.read_resource(&resource.uri, Some(input.clone() as _));
            failed |= report.read(&resource.uri, &result);
        }
        for prompt in &client.manifest().prompts {
            let arguments: Map<String, Value> = prompt
                .arguments
                .iter()
                .filter(|a| a.required)
                .map(|a| (a.name.clone(), Value::String("test".into())))
                .collect();
            let result = client.get_prompt(&prompt.name, &arguments, Some(input.clone() as _));
            failed |= report.prompt(&prompt.name, &result);
        }
    }
    Ok(failed)
}

/// The tool calls to make: `--call`s in order, then (`--call-all`) every listed tool not called
/// yet, each with its arguments.
fn planned(
    args: &ConnectArgs,
    client: &Client,
) -> anyhow::Result<Vec<(String, Map<String, Value>)>> {
    let tools = &client.manifest().tools;
    let schema = |name: &str| {
        tools
            .iter()
            .find(|t| t.name == name)
            .map(|t| &t.input_schema)
    };
    let mut planned = Vec::new();
    for call in &args.calls {
        let (name, arguments) = match call.split_once('=') {
            Some((name, json)) => match serde_json::from_str(json) {
                Ok(Value::Object(map)) => (name.to_owned(), map),
                _ => anyhow::bail!("--call {name}=…: the arguments are not a JSON object"),
            },
            None => (
                call.clone(),
                schema(call).map(answers::arguments).unwrap_or_default(),
            ),
        };
        planned.push((name, arguments));
    }
    if args.call_all {
        for tool in tools {
            if !planned.iter().any(|(n, _)| *n == tool.name) {
                planned.push((tool.name.clone(), answers::arguments(&tool.input_schema)));
            }
        }
    }
    Ok(planned)
}

/// The outcome of one request, for the report.
pub(crate) type Outcome = Result<Value, ClientError>;
