//! Trust end to end: signed plugins (keys made and files signed with the real `mcp-host keygen` and
//! `mcp-host sign`, refused or served by a real `mcp-host serve` on start and on hot reload) and
//! pinned definitions (`mcp-host pin`, `pin --diff`, a rug-pulled plugin held under `enforce` and
//! served and logged under `warn`, the lock surviving a restart).
//!
//! The plugin is `fixture-catalog`, whose `catalog_edition` description carries a marker the tests
//! rewrite in a copy of the library: a one-byte change that leaves a loadable plugin, so only the
//! signature check (or the pin) can be what refuses it.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use mcp_host_tests::serve::{StdioServer, with_meta};
use mcp_host_tests::{Layout, artifacts, patch_bytes, replace_atomically, row};
use serde_json::{Value, json};

const EDITION_1: &[u8] = b"CATALOG-EDITION-0001";
const EDITION_2: &[u8] = b"CATALOG-EDITION-0002";

/// `mcp-host <args>` (no configuration needed: keygen, sign).
fn mcp_host(args: &[&str]) -> Output {
    Command::new(&artifacts().host)
        .args(args)
        .env_remove("MCP_HOST_CONFIG")
        .output()
        .unwrap()
}

/// A key pair from `mcp-host keygen`: the secret key file and the public key line.
fn keygen(l: &Layout, name: &str) -> (PathBuf, String) {
    let out = l.root.path().join(name);
    let done = mcp_host(&[
        "keygen",
        "--out",
        out.to_str().unwrap(),
        "--name",
        name,
        "--no-password",
    ]);
    let printed = String::from_utf8_lossy(&done.stdout).into_owned();
    assert!(
        done.status.success(),
        "keygen failed: {printed}{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let public = std::fs::read_to_string(out.with_extension("pub")).unwrap();
    let key = public.lines().nth(1).unwrap().trim().to_owned();
    assert!(printed.contains(&format!("{name}: \"{key}\"")), "{printed}");
    (out.with_extension("key"), key)
}

/// `mcp-host sign --key <key> <file>`.
fn sign(key: &Path, file: &Path) {
    let done = mcp_host(&[
        "sign",
        "--key",
        key.to_str().unwrap(),
        file.to_str().unwrap(),
    ]);
    assert!(
        done.status.success(),
        "sign failed: {}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert!(
        file.with_file_name(format!(
            "{}.minisig",
            file.file_name().unwrap().to_string_lossy()
        ))
        .exists()
    );
}

/// Tool names of a `tools/list` response.
fn names(resp: &Value) -> Vec<String> {
    resp["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("not a tools/list result: {resp}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// A 2026 stdio client with request ids of its own.
struct Client {
    s: StdioServer,
    next: i64,
}

impl Client {
    fn start(config: &Path) -> Self {
        Client {
            s: StdioServer::start(config),
            next: 0,
        }
    }

    fn rpc(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        self.s.call(self.next, method, with_meta(params))
    }

    fn tools(&mut self) -> Vec<String> {
        names(&self.rpc("tools/list", json!({})))
    }

    fn description(&mut self, tool: &str) -> Option<String> {
        let list = self.rpc("tools/list", json!({}));
        list["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == tool)
            .map(|t| t["description"].as_str().unwrap().to_owned())
    }

    /// Wait (up to the generous deadline) until what `read` reads of the server satisfies
    /// `check`: the registry is published after a reload logs what it found, so a log line alone
    /// does not mean a list already shows it.
    fn until<T: std::fmt::Debug>(
        &mut self,
        what: &str,
        read: impl Fn(&mut Self) -> T,
        check: impl Fn(&T) -> bool,
    ) {
        let deadline = std::time::Instant::now() + mcp_host_tests::serve::WAIT;
        loop {
            let now = read(self);
            if check(&now) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{what}: {now:?}\nlog:\n{}",
                self.s.stderr()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Wait until `tools/list` satisfies `check`.
    fn until_tools(&mut self, what: &str, check: impl Fn(&[String]) -> bool) {
        self.until(what, Self::tools, |tools| check(tools));
    }

    /// Wait until `tool` is served with `description`.
    fn until_description(&mut self, tool: &str, description: &str) {
        self.until(
            &format!("{tool} described as {description:?}"),
            |c| c.description(tool),
            |now| now.as_deref() == Some(description),
        );
    }

    fn logged(&self, needle: &str) -> bool {
        self.s.logged(needle)
    }
}

fn has(tools: &[String], name: &str) -> bool {
    tools.iter().any(|t| t == name)
}

/// Sign a copy of `src` with `key` in a staging directory, then deploy it into `d` as `name`:
/// the signature first, then the plugin (renamed into place). The deployed file.
fn deploy_signed(l: &Layout, src: &Path, key: &Path, name: &str) -> PathBuf {
    let staged = l.dir("staging").join(name);
    std::fs::copy(src, &staged).unwrap();
    sign(key, &staged);
    let live = l.dir("d").join(name);
    let sig = |p: &Path| p.with_file_name(format!("{name}.minisig"));
    std::fs::copy(sig(&staged), sig(&live)).unwrap();
    replace_atomically(&staged, &live);
    live
}

/// The catalog plugin installed in `dir` under the name `file`.
fn catalog(l: &Layout, dir: &str, file: &str) -> PathBuf {
    l.install(dir, "fixture-catalog", Some(file))
}

fn trust_config(l: &Layout, dirs: &str, key: &str, extra: &str) -> PathBuf {
    l.config(&format!(
        "tool_dirs: {dirs}\nprobe_cache: {}\ntrust:\n  require_signature: true\n  keys:\n    release: \"{key}\"\n{extra}",
        l.root.path().join("probe-cache").display()
    ))
}

// ---------------------------------------------------------------------------------------------
// Signatures

#[test]
fn on_start_a_signed_plugin_is_served_and_tampered_wrong_key_and_unsigned_ones_are_refused() {
    let l = Layout::new();
    let (release, key) = keygen(&l, "release");
    let (other, _) = keygen(&l, "other");
    let good = catalog(&l, "good", "libcat.so");
    sign(&release, &good);
    let tampered = catalog(&l, "tampered", "libcat.so");
    sign(&release, &tampered);
    patch_bytes(&tampered, EDITION_1, EDITION_2); // one byte, after signing
    let wrong = catalog(&l, "wrong", "libcat.so");
    sign(&other, &wrong);
    catalog(&l, "unsigned", "libcat.so");
    let cfg = trust_config(
        &l,
        "[{path: good, prefix: g_}, {path: tampered, prefix: t_}, {path: wrong, prefix: w_}, {path: unsigned, prefix: u_}]",
        &key,
        "",
    );

    let mut c = Client::start(&cfg);
    let tools = c.tools();
    assert!(has(&tools, "g_catalog_edition"), "{tools:?}");
    assert!(
        !tools
            .iter()
            .any(|t| t.starts_with("t_") || t.starts_with("w_") || t.starts_with("u_")),
        "{tools:?}"
    );
    let path = |dir: &str| {
        l.root
            .path()
            .join(dir)
            .join("libcat.so")
            .display()
            .to_string()
    };
    let refused = |dir: &str| {
        format!(
            "Error loading plugin {}: refused, signature check failed: ",
            path(dir)
        )
    };
    assert!(c.logged(&format!(
        "{}the signature by key \"release\"",
        refused("tampered")
    )));
    assert!(
        c.logged("does not match the file (changed after signing, or signed for another file)")
    );
    assert!(c.logged(&format!("{}signed with key ID", refused("wrong"))));
    assert!(c.logged("which is not in trust.keys"));
    assert!(c.logged(&format!(
        "{}unsigned: no signature file libcat.so.minisig",
        refused("unsigned")
    )));

    // `list` and `check` name the signer.
    let (rows, _) = l.list(&cfg);
    let good_row = rows
        .iter()
        .find(|r| r["tool"] == "g_catalog_edition")
        .unwrap();
    assert_eq!(good_row["signer"], "release", "{good_row}");
    let report = l.check(&cfg, &good);
    assert_eq!(report["signature"]["key"], "release", "{report}");
    assert!(
        report["signature"]["comment"]
            .as_str()
            .unwrap()
            .contains("file:libcat.so"),
        "{report}"
    );
    let checked = l.run(&cfg, &["check", tampered.to_str().unwrap()]);
    assert!(!checked.status.success());
    assert!(String::from_utf8_lossy(&checked.stderr).contains("does not match the file"));
}

#[test]
fn on_hot_reload_unsigned_tampered_and_wrong_key_plugins_are_refused_and_a_signed_one_is_served() {
    let l = Layout::new();
    let (release, key) = keygen(&l, "release");
    let (other, _) = keygen(&l, "other");
    l.dir("d");
    let cfg = trust_config(&l, "[d]", &key, "");
    let mut c = Client::start(&cfg);
    assert!(c.tools().is_empty());
    let staging = l.dir("staging");

    // Unsigned: refused. Signing it afterwards (a new .minisig, the plugin unchanged) loads it.
    let src = catalog(&l, "staging", "libcat.so");
    let live = l.root.path().join("d").join("libcat.so");
    replace_atomically(&src, &live);
    assert!(c.logged(&format!(
        "Error loading plugin {}: refused, signature check failed: unsigned: no signature file libcat.so.minisig",
        live.display()
    )));
    assert!(!has(&c.tools(), "catalog_edition"));
    sign(&release, &live);
    c.until_tools("signed after the fact", |t| has(t, "catalog_edition"));

    // Tampered (one byte, keeping the old signature): refused; the signed version stays in service.
    let edited = staging.join("edited.so");
    std::fs::copy(&src, &edited).unwrap();
    patch_bytes(&edited, EDITION_1, EDITION_2);
    replace_atomically(&edited, &live);
    assert!(c.logged(&format!(
        "Error loading plugin {}: refused, signature check failed: the signature by key \"release\"",
        live.display()
    )));
    assert!(c.logged("the previous version stays in service"));
    let description = c.description("catalog_edition").unwrap();
    assert!(
        description.contains("CATALOG-EDITION-0001"),
        "{description}"
    );

    // Signed with a key the host does not trust: refused too.
    let wrong = deploy_signed(&l, &src, &other, "libwrong.so");
    assert!(c.logged(&format!(
        "Error loading plugin {}: refused, signature check failed: signed with key ID",
        wrong.display()
    )));

    // A good signed plugin dropped in is served.
    let fresh = deploy_signed(&l, &edited, &release, "libfresh.so");
    assert!(c.logged(&format!("Reloaded plugin {}", fresh.display())));
    let log = c.s.stderr();
    assert!(
        !log.contains(&format!("Error loading plugin {}", fresh.display())),
        "{log}"
    );
}

#[test]
fn a_file_tampered_in_place_is_refused_although_the_probe_cache_knows_its_identity() {
    let l = Layout::new();
    let (release, key) = keygen(&l, "release");
    let plugin = catalog(&l, "d", "libcat.so");
    sign(&release, &plugin);
    let cfg = trust_config(&l, "[d]", &key, "");
    let (rows, _) = l.list(&cfg);
    assert_eq!(
        row(&rows, "catalog_edition", "libcat.so")["status"],
        "active"
    );
    let cache = std::fs::read_to_string(l.root.path().join("probe-cache")).unwrap();
    assert!(cache.contains("libcat.so"), "{cache}");
    // Same inode, size and modification time: the probe cache takes it for the file it probed.
    let modified = std::fs::metadata(&plugin).unwrap().modified().unwrap();
    let mut bytes = std::fs::read(&plugin).unwrap();
    let at = bytes
        .windows(EDITION_1.len())
        .position(|w| w == EDITION_1)
        .unwrap();
    bytes[at + EDITION_1.len() - 1] = b'2';
    std::io::Write::write_all(
        &mut std::fs::OpenOptions::new()
            .write(true)
            .open(&plugin)
            .unwrap(),
        &bytes,
    )
    .unwrap();
    std::fs::File::options()
        .write(true)
        .open(&plugin)
        .unwrap()
        .set_modified(modified)
        .unwrap();
    let (rows, log) = l.list(&cfg);
    let failed = rows
        .iter()
        .find(|r| r["status"] == "load_error")
        .unwrap_or_else(|| panic!("{rows:#?}\n{log}"));
    assert!(
        failed["detail"]
            .as_str()
            .unwrap()
            .contains("does not match the file"),
        "{failed}"
    );
}

// ---------------------------------------------------------------------------------------------
// Pinning

/// A layout serving the catalog from `d` with `pinning`, pinned with the real `mcp-host pin`.
fn pinned_layout(pinning: &str) -> (Layout, PathBuf, PathBuf) {
    let l = Layout::new();
    let live = catalog(&l, "d", "libcat.so");
    let cfg = l.config(&format!(
        "tool_dirs: [{{path: d, pinning: {pinning}}}]\nplugins:\n  fixture-catalog:\n    config: {{count: 3}}\n"
    ));
    let pinned = l.run(&cfg, &["pin"]);
    let out = String::from_utf8_lossy(&pinned.stdout);
    assert!(
        pinned.status.success(),
        "pin failed: {out}{}",
        String::from_utf8_lossy(&pinned.stderr)
    );
    assert!(
        out.contains("Pinned 4 tools, 0 resources and 0 prompts in"),
        "{out}"
    );
    let lock: Value = serde_json::from_str(
        &std::fs::read_to_string(l.root.path().join("mcp-host.lock")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        lock["tools"]["catalog_edition"]["plugin"], "fixture-catalog",
        "{lock}"
    );
    (l, cfg, live)
}

/// A copy of the catalog whose `catalog_edition` description says edition 2.
fn rug_pulled(l: &Layout) -> PathBuf {
    let copy = l.dir("staging").join("libcat.so");
    std::fs::copy(artifacts().plugin("fixture-catalog"), &copy).unwrap();
    patch_bytes(&copy, EDITION_1, EDITION_2);
    copy
}

const OLD: &str = "Report which edition of the catalog is installed (CATALOG-EDITION-0001).";
const NEW: &str = "Report which edition of the catalog is installed (CATALOG-EDITION-0002).";

#[test]
fn under_enforce_a_reload_that_changes_a_description_is_held_until_re_pinned_and_the_lock_survives_restart()
 {
    let (l, cfg, live) = pinned_layout("enforce");
    let mut c = Client::start(&cfg);
    assert_eq!(c.description("catalog_edition").as_deref(), Some(OLD));

    // Reloaded with the same definitions: served as before, nothing held.
    replace_atomically(&artifacts().plugin("fixture-catalog"), &live);
    assert!(c.logged(&format!("Reloaded plugin {}: +0 -0 tools", live.display())));
    assert!(!c.s.stderr().contains("is held"));

    // Replaced by a build whose description changed: that tool is held, the others stay.
    replace_atomically(&rug_pulled(&l), &live);
    let held = format!(
        "Tool catalog_edition from {} is held (pinning: enforce): it differs from the lock file: description: \"{OLD}\" -> \"{NEW}\"",
        live.display()
    );
    assert!(c.logged(&held), "{}", c.s.stderr());
    c.until_tools("held", |t| {
        !has(t, "catalog_edition") && has(t, "list_invoice")
    });
    let call = c.rpc(
        "tools/call",
        json!({"name": "catalog_edition", "arguments": {}}),
    );
    assert_eq!(
        call["error"]["message"], "Unknown tool: catalog_edition",
        "{call}"
    );

    // `pin --diff` shows exactly what changed, and exits 1.
    let diff = l.run(&cfg, &["pin", "--diff"]);
    assert_eq!(diff.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&diff.stdout),
        format!(
            "changed tool catalog_edition (plugin fixture-catalog)\n  description\n    - \"{OLD}\"\n    + \"{NEW}\"\n"
        )
    );
    let (rows, _) = l.list(&cfg);
    let status = row(&rows, "catalog_edition", "libcat.so");
    assert_eq!(status["status"], "held", "{status}");

    // The lock survives a restart: still held.
    drop(c);
    let mut c = Client::start(&cfg);
    assert!(c.logged(&held));
    assert!(!has(&c.tools(), "catalog_edition"));

    // Re-pinning accepts the new text; the running server picks the lock up.
    let pinned = l.run(&cfg, &["pin"]);
    assert!(pinned.status.success());
    assert!(String::from_utf8_lossy(&pinned.stdout).contains("changed tool catalog_edition"));
    c.until_tools("re-pinned", |t| has(t, "catalog_edition"));
    assert_eq!(c.description("catalog_edition").as_deref(), Some(NEW));
    let diff = l.run(&cfg, &["pin", "--diff"]);
    assert_eq!(
        diff.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&diff.stdout)
    );
}

#[test]
fn under_warn_a_reload_that_changes_a_description_is_served_and_logged() {
    let (l, cfg, live) = pinned_layout("warn");
    let mut c = Client::start(&cfg);
    assert_eq!(c.description("catalog_edition").as_deref(), Some(OLD));
    replace_atomically(&rug_pulled(&l), &live);
    assert!(c.logged(&format!(
        "Tool catalog_edition from {} is served although it differs from the lock file: description: \"{OLD}\" -> \"{NEW}\" (pinning: warn)",
        live.display()
    )));
    c.until_description("catalog_edition", NEW);
}

#[test]
fn under_enforce_a_tool_not_in_the_lock_is_not_served() {
    let l = Layout::new();
    catalog(&l, "d", "libcat.so");
    let cfg = l.config("tool_dirs: [{path: d, pinning: enforce}]\nplugins:\n  fixture-catalog:\n    config: {count: 2}\n");
    let mut c = Client::start(&cfg);
    assert!(c.tools().is_empty());
    assert!(c.logged("mcp-host.lock: does not exist (run `mcp-host pin` to write it)"));
    assert!(c.logged("Tool catalog_edition from"));
    assert!(c.logged("is held (pinning: enforce): it is not in the lock file"));
}

#[test]
fn a_signed_library_renamed_to_pass_for_another_file_is_refused() {
    let l = Layout::new();
    let (release, key) = keygen(&l, "release");
    // Signed as libcat.so, deployed (with its signature) as libother.so.
    let staged = catalog(&l, "staging", "libcat.so");
    sign(&release, &staged);
    let dir = l.dir("d");
    std::fs::copy(&staged, dir.join("libother.so")).unwrap();
    std::fs::copy(
        staged.with_file_name("libcat.so.minisig"),
        dir.join("libother.so.minisig"),
    )
    .unwrap();
    let cfg = trust_config(&l, "[d]", &key, "");
    let (rows, log) = l.list(&cfg);
    let row = rows
        .iter()
        .find(|r| {
            r["file"]
                .as_str()
                .is_some_and(|f| f.ends_with("libother.so"))
        })
        .unwrap_or_else(|| panic!("no row: {rows:#?}"));
    assert_eq!(row["status"], "load_error", "{row}\n{log}");
    assert!(
        row.to_string()
            .contains("signed for a file named libcat.so, not libother.so"),
        "{row}"
    );
}

#[test]
fn under_enforce_a_tool_whose_meta_changed_after_pinning_is_held() {
    let l = Layout::new();
    let live = l.install("d", "fixture-schema", None);
    let cfg = l.config("tool_dirs: [{path: d, pinning: enforce}]\n");
    let pinned = l.run(&cfg, &["pin"]);
    assert!(
        pinned.status.success(),
        "{}",
        String::from_utf8_lossy(&pinned.stderr)
    );
    let (rows, log) = l.list(&cfg);
    assert_eq!(
        row(&rows, "custom_schema", "libfixture_schema.so")["status"],
        "active",
        "{log}"
    );
    // The same library, but its `_meta` now points a client's UI somewhere else.
    let copy = l.dir("staging").join("libfixture_schema.so");
    std::fs::copy(&live, &copy).unwrap();
    patch_bytes(&copy, b"example.com/ui", b"example.com/ux");
    replace_atomically(&copy, &live);
    let (rows, log) = l.list(&cfg);
    let held = row(&rows, "custom_schema", "libfixture_schema.so");
    assert_eq!(held["status"], "held", "{held}\n{log}");
    assert!(held.to_string().contains("_meta"), "{held}");
}
