//! Plugins as signed OCI packages against a real registry on loopback (Debian's `docker-registry`,
//! started per test with its own storage; skipped with a message when it is not installed unless
//! `MCP_TEST_REQUIRE_CLIENTS` is set): publish → add → call through a running host → update (with
//! its definition and permission diff, and a changed signer refused) → remove; and every refusal
//! (tampered layer, untrusted signer, missing signature, ABI mismatch, a manifest that lies about
//! the library) leaves nothing installed; credentials from docker's `config.json` (a registry that
//! requires a password) and from `MCP_HOST_REGISTRY_TOKEN` (one that accepts only its issuer's tokens).

#![allow(clippy::unwrap_used)]

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use mcp_host::install::{oci, package};
use mcp_host_tests::clients::require_or_skip;
use mcp_host_tests::fleet::free_port;
use mcp_host_tests::serve::{ChildGuard, LEGACY, StdioServer, tool_names};
use mcp_host_tests::{Layout, artifacts};
use serde_json::{Value, json};

/// A `docker-registry` serving on a loopback port until dropped.
struct Registry {
    _child: ChildGuard,
    /// `127.0.0.1:PORT`.
    addr: String,
    storage: tempfile::TempDir,
}

/// How a test registry authenticates its clients.
#[derive(Clone, Copy, PartialEq)]
enum Access {
    /// Anyone may pull and push.
    Open,
    /// `REGISTRY_USER`'s password (htpasswd), as docker's `config.json` holds it.
    Password,
    /// Bearer tokens of docker's token scheme: JWTs that `TOKEN_ISSUER`'s key signed (the key and
    /// its certificate in the registry's storage directory, made by `openssl`).
    Token,
}

/// The issuer and service of the tokens a `Token` registry accepts.
const TOKEN_ISSUER: &str = "mcp-host-tests-issuer";
const TOKEN_SERVICE: &str = "mcp-host-tests-registry";

/// Whether `GET /v2/` answers at `addr` (200, or 401 from a registry that requires credentials).
fn registry_ready(addr: &str) -> bool {
    let Ok(mut stream) = TcpStream::connect(addr) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let request = format!("GET /v2/ HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && (head.ends_with(b"200") || head.ends_with(b"401"))
}

/// The user and password of a registry started with credentials required.
const REGISTRY_USER: (&str, &str) = ("ana", "secret");

/// `REGISTRY_USER`'s htpasswd line (bcrypt of cost 4, as `htpasswd -B -C 4` writes it: a cheap
/// check per request).
const HTPASSWD: &str = "ana:$2b$04$B2vZ3sRb2Wr13HqndpKGS.j4RSUQ9flYt.YY8IU15BGhMywIfnHJK\n";

impl Registry {
    /// Where the registry keeps blob `hex` (its SHA-256) on disk.
    fn blob(&self, hex: &str) -> PathBuf {
        self.storage
            .path()
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    /// A bearer token `TOKEN_ISSUER` signs for `sub`, allowing `actions` (`pull`, `push`) on
    /// the repository `tools/installable`, valid for an hour.
    fn token(&self, actions: &[&str]) -> String {
        use base64::Engine as _;
        let dir = self.storage.path();
        let certificate = openssl(&[
            "x509",
            "-in",
            &dir.join("issuer.pem").to_string_lossy(),
            "-outform",
            "DER",
        ]);
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
        header.x5c = Some(vec![
            base64::engine::general_purpose::STANDARD.encode(certificate),
        ]);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let claims = json!({
            "iss": TOKEN_ISSUER, "sub": REGISTRY_USER.0, "aud": TOKEN_SERVICE,
            "iat": now - 60, "nbf": now - 60, "exp": now + 3600, "jti": format!("t{now}"),
            "access": [{"type": "repository", "name": "tools/installable", "actions": actions}],
        });
        let key = std::fs::read(dir.join("issuer.key")).unwrap();
        let key = jsonwebtoken::EncodingKey::from_rsa_pem(&key).unwrap();
        jsonwebtoken::encode(&header, &claims, &key).unwrap()
    }
}

/// Run `openssl ARGS`: its standard output.
fn openssl(args: &[&str]) -> Vec<u8> {
    let out = Command::new("openssl").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// A token issuer's RSA key (`issuer.key`) and self-signed certificate (`issuer.pem`) in `dir`:
/// the certificate's path, or `None` (after saying why) without `openssl`.
fn token_issuer(dir: &Path) -> Option<PathBuf> {
    let found = Command::new("openssl")
        .arg("version")
        .output()
        .is_ok_and(|out| out.status.success());
    require_or_skip("openssl", found.then(|| PathBuf::from("openssl")))?;
    let certificate = dir.join("issuer.pem");
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        &format!("/CN={TOKEN_ISSUER}"),
        "-keyout",
        &dir.join("issuer.key").to_string_lossy(),
        "-out",
        &certificate.to_string_lossy(),
    ]);
    Some(certificate)
}

/// Start a registry on a free loopback port, or `None` (after saying why) when it is missing.
fn registry() -> Option<Registry> {
    registry_with(Access::Open)
}

/// Start a registry on a free loopback port that authenticates as `access` says, or `None`
/// (after saying why) when it is missing.
fn registry_with(access: Access) -> Option<Registry> {
    let bin = PathBuf::from("/usr/bin/docker-registry");
    let bin = require_or_skip(
        "docker-registry (.ci/install-services.sh)",
        bin.is_file().then_some(bin),
    )?;
    for _ in 0..5 {
        let storage = tempfile::tempdir().unwrap();
        let addr = format!("127.0.0.1:{}", free_port());
        let config = storage.path().join("config.yml");
        let mut yaml = format!(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
             http:\n  addr: {addr}\n",
            storage.path().join("data").display()
        );
        match access {
            Access::Open => {}
            Access::Password => {
                let htpasswd = storage.path().join("htpasswd");
                std::fs::write(&htpasswd, HTPASSWD).unwrap();
                yaml.push_str(&format!(
                    "auth:\n  htpasswd:\n    realm: mcp-host-tests\n    path: {}\n",
                    htpasswd.display()
                ));
            }
            Access::Token => {
                // The realm is where a client without a token would fetch one: nothing listens
                // there, so only a token the client already holds gets in.
                let certificate = token_issuer(storage.path())?;
                yaml.push_str(&format!(
                    "auth:\n  token:\n    realm: http://127.0.0.1:9/token\n    service: \
                     {TOKEN_SERVICE}\n    issuer: {TOKEN_ISSUER}\n    rootcertbundle: {}\n",
                    certificate.display()
                ));
            }
        }
        std::fs::write(&config, yaml).unwrap();
        let mut child = ChildGuard::spawn(
            Command::new(&bin)
                .arg("serve")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline && !child.exited() {
            if registry_ready(&addr) {
                return Some(Registry {
                    _child: child,
                    addr,
                    storage,
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // The port was taken first (or the registry did not start): another one.
    }
    panic!("docker-registry did not start on a loopback port");
}

/// A layout with a data directory, two trusted keys (`release`, `second`) and one that is not
/// (`stranger`), and a registry.
struct Setup {
    l: Layout,
    config: PathBuf,
    registry: Registry,
}

/// `mcp-host keygen` of key pair `name` (no password) in the layout's root: its public key.
fn keygen(l: &Layout, name: &str) -> String {
    let out = l.run(
        &l.root.path().join("none.yaml"),
        &[
            "keygen",
            "--out",
            &l.root.path().join(name).to_string_lossy(),
            "--no-password",
        ],
    );
    assert_ok(&out, "keygen");
    let public = std::fs::read_to_string(l.root.path().join(format!("{name}.pub"))).unwrap();
    public.lines().last().unwrap().trim().to_owned()
}

/// A configuration with no tool directory, a data directory, and `keys` (name, public key)
/// trusted.
fn trusting(l: &Layout, keys: &[(&str, String)]) -> PathBuf {
    let keys: String = keys
        .iter()
        .map(|(name, key)| format!("    {name}: \"{key}\"\n"))
        .collect();
    l.config(&format!(
        "tool_dirs: []\ndata_dir: {}\ntrust:\n  keys:\n{keys}",
        l.root.path().join("data").display()
    ))
}

/// The file name of the installable plugin's library on this platform.
fn library_name() -> String {
    format!(
        "{}installable{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    )
}

impl Setup {
    fn new() -> Option<Setup> {
        Some(Setup::with(registry()?))
    }

    /// The layout and keys, with `registry`.
    fn with(registry: Registry) -> Setup {
        let l = Layout::new();
        let trusted = [
            ("release", keygen(&l, "release")),
            ("second", keygen(&l, "second")),
        ];
        keygen(&l, "stranger");
        let config = trusting(&l, &trusted);
        Setup {
            l,
            config,
            registry,
        }
    }

    fn reference(&self, tag: &str) -> String {
        format!("{}/tools/installable:{tag}", self.registry.addr)
    }

    fn key(&self, name: &str) -> String {
        self.l
            .root
            .path()
            .join(format!("{name}.key"))
            .to_string_lossy()
            .into_owned()
    }

    fn run(&self, args: &[&str]) -> Output {
        self.l.run(&self.config, args)
    }

    /// Plugin crate `krate`'s library copied as `libinstallable.so` into a directory of its own.
    fn library(&self, krate: &str) -> PathBuf {
        let file = self.l.dir(&format!("build-{krate}")).join(library_name());
        std::fs::copy(artifacts().plugin(krate), &file).unwrap();
        file
    }

    /// Publish `krate`'s library, plus a stand-in macOS build, under `tag` signed with `key`.
    fn publish(&self, krate: &str, tag: &str, key: &str, extra: &[&str]) -> Output {
        let lib = self.library(krate);
        let mac = lib.with_file_name("libinstallable.dylib");
        std::fs::write(&mac, b"a macOS build stands here").unwrap();
        let mac_arg = format!("macos-aarch64={}", mac.display());
        let key = self.key(key);
        let reference = self.reference(tag);
        let mut args = vec!["publish", "--key", &key];
        args.extend_from_slice(extra);
        args.extend([lib.to_str().unwrap(), &mac_arg, &reference]);
        self.run(&args)
    }

    /// Publish `lib` under `tag` with plugin manifest `manifest` (`--manifest`), signed with the
    /// `release` key: what `publish` did, and the reference.
    fn publish_with_manifest(&self, manifest: &Path, lib: &Path, tag: &str) -> (Output, String) {
        let key = self.key("release");
        let reference = self.reference(tag);
        let out = self.run(&[
            "publish",
            "--key",
            &key,
            "--manifest",
            &manifest.to_string_lossy(),
            &lib.to_string_lossy(),
            &reference,
        ]);
        (out, reference)
    }

    /// The lock file.
    fn lock(&self) -> Value {
        let text = std::fs::read_to_string(self.l.root.path().join("mcp-host.lock")).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    fn managed(&self) -> PathBuf {
        self.l.root.path().join("data").join("plugins")
    }

    /// Assert that nothing is installed: no library, no signature, no staging directory, no
    /// receipt.
    fn assert_nothing_installed(&self, after: &str) {
        let entries: Vec<String> = std::fs::read_dir(self.managed())
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n != "installed.json" && n != mcp_host::install::LOCK_FILE)
                    .collect()
            })
            .unwrap_or_default();
        assert!(entries.is_empty(), "{after} left {entries:?}");
        let listed = self.run(&["list", "--installed", "--json"]);
        assert_eq!(
            serde_json::from_slice::<Value>(&listed.stdout).unwrap(),
            json!({}),
            "{after}"
        );
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn assert_ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed:\nstdout: {}\nstderr: {}",
        stdout(out),
        stderr(out)
    );
}

/// Poll `tools/list` until `done` holds for its names (hot reload is asynchronous).
fn wait_for_tools(server: &mut StdioServer, id: &mut u64, done: impl Fn(&[String]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        *id += 1;
        let names = tool_names(&server.call(*id, "tools/list", json!({})));
        if done(&names) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "tools never became as expected; last {names:?}\nstderr:\n{}",
            server.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn call_tool(server: &mut StdioServer, id: &mut u64, name: &str, args: Value) -> Value {
    *id += 1;
    server.call(*id, "tools/call", json!({"name": name, "arguments": args}))
}

fn text_of(response: &Value) -> String {
    response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn publish_add_call_update_and_remove_against_a_real_registry() {
    let Some(s) = Setup::new() else { return };
    let published = s.publish("fixture-installable", "1", "release", &[]);
    assert_ok(&published, "publish");
    assert!(
        stdout(&published).contains("linux") && stdout(&published).contains("macos-aarch64"),
        "{}",
        stdout(&published)
    );
    let digest_line = stdout(&published)
        .lines()
        .find_map(|l| l.strip_prefix("digest: ").map(str::to_owned))
        .expect("publish prints the digest");

    // A running host with nothing installed yet.
    let mut server = StdioServer::start(&s.config);
    server.initialize(LEGACY);
    let mut id = 0;
    wait_for_tools(&mut server, &mut id, |names| names.is_empty());

    let added = s.run(&["add", &s.reference("1"), "--yes"]);
    assert_ok(&added, "add");
    let shown = stdout(&added);
    for expected in [
        "installable 1.0.0",
        "signed by release",
        "greet",
        "read_file",
        "read /etc/hostname",
        "env INSTALLABLE_GREETING",
        &digest_line,
    ] {
        assert!(
            shown.contains(expected),
            "add did not show {expected:?}:\n{shown}"
        );
    }
    let lib = s.managed().join(library_name());
    assert!(lib.is_file() && Path::new(&format!("{}.minisig", lib.display())).is_file());
    let lock = s.lock();
    assert_eq!(
        lock["installed"]["installable"]["digest"],
        json!(digest_line)
    );
    assert_eq!(lock["tools"]["greet"]["plugin"], "installable");
    assert!(lock["tools"]["read_file"]["sha256"].is_string(), "{lock}");
    let listed = stdout(&s.run(&["list", "--installed"]));
    assert!(
        listed.contains("installable 1.0.0") && listed.contains("read /etc/hostname"),
        "{listed}"
    );

    // The running host picks it up and serves it, sandboxed with what it declared.
    wait_for_tools(&mut server, &mut id, |names| {
        names.iter().any(|n| n == "greet")
    });
    let greeting = call_tool(&mut server, &mut id, "greet", json!({"name": "Ana"}));
    assert_eq!(text_of(&greeting), "Hello, Ana!", "{greeting}");
    let secret = s.l.root.path().join("secret.txt");
    std::fs::write(&secret, "not for plugins").unwrap();
    let refused = call_tool(
        &mut server,
        &mut id,
        "read_file",
        json!({"path": secret.to_string_lossy()}),
    );
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    assert!(
        text_of(&refused).contains("Permission denied"),
        "an undeclared read must fail: {refused}"
    );
    if Path::new("/etc/hostname").exists() {
        let allowed = call_tool(
            &mut server,
            &mut id,
            "read_file",
            json!({"path": "/etc/hostname"}),
        );
        assert_ne!(
            allowed["result"]["isError"], true,
            "declared read: {allowed}"
        );
    }

    // Version 2 under the same tag, signed by another trusted key: refused without consent.
    assert_ok(
        &s.publish("fixture-installable-v2", "1", "second", &[]),
        "publish v2",
    );
    let refused = s.run(&["update", "installable", "--yes"]);
    assert!(!refused.status.success());
    assert!(
        stdout(&refused).contains("refused: signed by second"),
        "{}",
        stdout(&refused)
    );
    assert!(
        lib.is_file(),
        "a refused update keeps the installed version"
    );

    let updated = s.run(&["update", "installable", "--yes", "--allow-new-signer"]);
    assert_ok(&updated, "update");
    let diff = stdout(&updated);
    for expected in [
        "Update installable 1.0.0 -> 2.0.0",
        "Greet someone.",
        "Greet someone warmly.",
        "shout",
        "+ net 127.0.0.1:9",
        "Updated installable to 2.0.0",
    ] {
        assert!(
            diff.contains(expected),
            "update did not show {expected:?}:\n{diff}"
        );
    }
    wait_for_tools(&mut server, &mut id, |names| {
        names.iter().any(|n| n == "shout")
    });
    let again = call_tool(&mut server, &mut id, "greet", json!({"name": "Ana"}));
    assert_eq!(text_of(&again), "Hello again, Ana!", "{again}");
    let up_to_date = s.run(&["update", "--yes", "--allow-new-signer"]);
    assert_ok(&up_to_date, "update again");
    assert!(
        stdout(&up_to_date).contains("up to date"),
        "{}",
        stdout(&up_to_date)
    );

    // Remove: the running host unloads it.
    assert_ok(&s.run(&["remove", "installable"]), "remove");
    wait_for_tools(&mut server, &mut id, |names| names.is_empty());
    s.assert_nothing_installed("remove");
    let lock = s.lock();
    assert!(
        lock.get("installed").is_none() && lock["tools"] == json!({}),
        "{lock}"
    );
    let again = s.run(&["remove", "installable"]);
    assert!(!again.status.success() && stderr(&again).contains("is not installed"));
}

/// `add` of `reference` fails, saying `expected`, and leaves nothing installed.
/// B6: installing a plugin that declares permissions warns that a file gets the permissions of
/// `plugins.<name>` by its name alone only when the operator configured such grants — once, naming
/// the installed file, never its staging copy — and not at all when nothing is configured.
#[test]
fn an_install_warns_of_grants_by_name_once_of_the_installed_file_and_only_when_configured() {
    let Some(s) = Setup::new() else { return };
    assert_ok(
        &s.publish("fixture-installable", "1", "release", &[]),
        "publish",
    );
    let warning = "gets the permissions of plugins.installable";
    let added = s.run(&["add", &s.reference("1"), "--yes"]);
    assert_ok(&added, "add");
    assert!(
        !stderr(&added).contains(warning),
        "nothing is configured for it:\n{}",
        stderr(&added)
    );
    assert_ok(&s.run(&["remove", "installable"]), "remove");

    // The operator grants it by name: said once, of the file in the managed directory.
    let text = std::fs::read_to_string(&s.config).unwrap();
    std::fs::write(
        &s.config,
        format!("{text}plugins:\n  installable:\n    permissions: {{env: [LANG]}}\n"),
    )
    .unwrap();
    for args in [
        &["add", &s.reference("1"), "--yes"][..],
        &["update", "installable", "--yes"],
    ] {
        let out = s.run(args);
        assert_ok(&out, &format!("{args:?}"));
        let log = stderr(&out);
        assert!(!log.contains(".staging-"), "{args:?}:\n{log}");
        assert_eq!(log.matches(warning).count(), 1, "{args:?}:\n{log}");
        let installed = s.managed().join(library_name());
        assert!(
            log.contains(&format!("{} {warning}", installed.display())),
            "{args:?}:\n{log}"
        );
    }
}

fn assert_refused(s: &Setup, reference: &str, expected: &str) {
    assert_refused_under(s, &s.config, reference, &[expected]);
}

/// `add` of `reference` under configuration `config` fails, saying each of `expected`, and
/// leaves nothing installed.
fn assert_refused_under(s: &Setup, config: &Path, reference: &str, expected: &[&str]) {
    let out = s.l.run(config, &["add", reference, "--yes"]);
    assert!(
        !out.status.success(),
        "{reference} was installed:\n{}",
        stdout(&out)
    );
    for expected in expected {
        assert!(
            stderr(&out).contains(expected),
            "{reference}: expected {expected:?} in:\n{}",
            stderr(&out)
        );
    }
    s.assert_nothing_installed(reference);
}

#[test]
fn tampered_unsigned_untrusted_incompatible_and_lying_packages_are_refused() {
    let Some(s) = Setup::new() else { return };
    assert_ok(
        &s.publish("fixture-installable", "good", "release", &[]),
        "publish",
    );
    let runtime = mcp_host_tests::runtime();
    let platform = package::host_platform();
    let good = oci::parse_reference(&s.reference("good")).unwrap();
    let limits = package::Limits::of(&Default::default());
    let pulled = runtime
        .block_on(oci::pull(&good, &platform, &limits))
        .unwrap();
    assert!(pulled.platforms.contains(&"macos-aarch64".to_owned()));
    let repack = |tag: &str, build: package::PlatformBuild| {
        let reference = oci::parse_reference(&s.reference(tag)).unwrap();
        let pkg = package::Package {
            config: json!({"plugin": "installable"}),
            manifest_json: pulled.manifest_json.clone(),
            builds: vec![build],
        };
        runtime.block_on(oci::push(&reference, &pkg)).unwrap();
    };

    // A library changed after signing (one byte).
    let mut tampered = pulled.build.clone();
    let last = tampered.library.len() - 1;
    tampered.library[last] ^= 0xff;
    repack("tampered", tampered);
    assert_refused(&s, &s.reference("tampered"), "does not match the file");

    // No signature layer.
    let mut unsigned = pulled.build.clone();
    unsigned.signature = None;
    repack("unsigned", unsigned);
    assert_refused(&s, &s.reference("unsigned"), "no signature for");

    // Signed by a key that is not in trust.keys.
    assert_ok(
        &s.publish("fixture-installable", "stranger", "stranger", &[]),
        "publish",
    );
    assert_refused(&s, &s.reference("stranger"), "which is not in trust.keys");

    // A library built against another ABI, published with a borrowed manifest.
    let manifest = s.l.root.path().join("manifest.json");
    std::fs::write(&manifest, &pulled.manifest_json).unwrap();
    let abi = s.l.dir("abi").join(library_name());
    std::fs::copy(artifacts().plugin("fixture-abi-mismatch"), &abi).unwrap();
    let (published, reference) = s.publish_with_manifest(&manifest, &abi, "abi");
    assert_ok(&published, "publish abi");
    assert_refused(&s, &reference, "incompatible");

    // A manifest (signed) whose definitions are not the library's.
    let mut lying: Value = serde_json::from_slice(&pulled.manifest_json).unwrap();
    lying["tools"][0]["description"] = json!("Harmless, really.");
    std::fs::write(&manifest, lying.to_string()).unwrap();
    let lib = s.library("fixture-installable");
    let (published, reference) = s.publish_with_manifest(&manifest, &lib, "lying");
    assert_ok(&published, "publish lying");
    assert_refused(&s, &reference, "does not match its library (tools differ)");

    // A package with builds for other platforms only.
    std::fs::write(&manifest, &pulled.manifest_json).unwrap();
    let mac = s.l.dir("mac").join("libinstallable.dylib");
    std::fs::write(&mac, b"a macOS build stands here").unwrap();
    let other = PathBuf::from(format!("macos-aarch64={}", mac.display()));
    let (published, reference) = s.publish_with_manifest(&manifest, &other, "elsewhere");
    assert_ok(&published, "publish elsewhere");
    assert_refused(
        &s,
        &reference,
        &format!("has no build for this platform ({platform}); it has: macos-aarch64"),
    );

    // An image index (one manifest per platform, as multi-arch container images are) naming the
    // good package: not a plugin package, and said so.
    let registry_conn =
        || mcp_host_tests::serve::HttpConn::connect(s.registry.addr.parse().unwrap());
    let manifest_size = registry_conn()
        .request(
            "GET",
            &format!("/v2/tools/installable/manifests/{}", pulled.digest),
            &[("Accept", "application/vnd.oci.image.manifest.v1+json")],
            b"",
        )
        .body
        .len();
    let index = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": pulled.digest,
            "size": manifest_size,
            "platform": {"os": "linux", "architecture": "amd64"},
        }],
    })
    .to_string();
    let put = registry_conn().request(
        "PUT",
        "/v2/tools/installable/manifests/multi",
        &[("Content-Type", "application/vnd.oci.image.index.v1+json")],
        index.as_bytes(),
    );
    assert_eq!(put.status, 201, "{}", String::from_utf8_lossy(&put.body));
    assert_refused(
        &s,
        &s.reference("multi"),
        "is an image index (application/vnd.oci.image.index.v1+json), not an mcp-host plugin package",
    );

    // Blobs the registry serves changed on its disk (same length): the digests catch them.
    let corrupt = |digest: &str, from: &[u8], to: &[u8]| {
        let hex = digest.strip_prefix("sha256:").unwrap();
        let data = s.registry.blob(hex);
        let mut bytes = std::fs::read(&data).unwrap();
        let at = bytes
            .windows(from.len())
            .position(|w| w == from)
            .unwrap_or_else(|| panic!("{from:?} not in blob {digest}"));
        bytes[at..at + to.len()].copy_from_slice(to);
        std::fs::write(&data, bytes).unwrap();
    };
    corrupt(
        &package::sha256_digest(&pulled.build.library),
        b"Hello, ",
        b"Hellx, ",
    );
    assert_refused(&s, &s.reference("good"), "digest");
    corrupt(&pulled.digest, b"mcp-host.plugin.v1", b"mcp-host.plugin.v2");
    assert_refused(&s, &s.reference("good"), "the manifest's digest is sha256:");

    // And a registry that is not there.
    let port = free_port();
    assert_refused(
        &s,
        &format!("127.0.0.1:{port}/tools/installable:1"),
        "registry:",
    );
}

/// Read an HTTP request's head from `stream`: the path it asks for.
fn request_path(stream: &mut TcpStream) -> String {
    let mut request = Vec::new();
    let mut byte = [0u8; 1];
    while !request.ends_with(b"\r\n\r\n") && stream.read_exact(&mut byte).is_ok() {
        request.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&request);
    text.split_whitespace().nth(1).unwrap_or("/").to_owned()
}

/// Serve the files of `dir` over plain HTTP on a loopback port (GET only, one request per
/// connection, 404 for anything else) for the rest of the test binary; the address.
fn serve_files(dir: &Path) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let dir = dir.to_path_buf();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let path = request_path(&mut stream);
            let file = dir.join(path.trim_start_matches('/'));
            let reply = match std::fs::read(&file) {
                Ok(body) if !path.contains("..") => {
                    let mut reply = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    )
                    .into_bytes();
                    reply.extend(body);
                    reply
                }
                _ => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    .to_vec(),
            };
            let _ = stream.write_all(&reply);
        }
    });
    addr
}

/// `mcp-host sign` of `lib` with key pair `k` of the layout's root.
fn sign_with_k(l: &Layout, config: &Path, lib: &Path) {
    let key = l.root.path().join("k.key");
    let out = l.run(
        config,
        &[
            "sign",
            "--key",
            &key.to_string_lossy(),
            &lib.to_string_lossy(),
        ],
    );
    assert_ok(&out, "sign");
}

#[test]
fn add_takes_a_signed_file_or_url_and_refuses_an_unsigned_one() {
    let l = Layout::new();
    let config = trusting(&l, &[("k", keygen(&l, "k"))]);
    let lib = l.install("build", "fixture-installable", None);
    let refused = l.run(&config, &["add", &lib.to_string_lossy(), "--yes"]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("no signature for"),
        "{}",
        stderr(&refused)
    );
    sign_with_k(&l, &config, &lib);
    // Over HTTP: plain only to a loopback address; the same checks.
    let refused = l.run(
        &config,
        &["add", "http://example.com/libinstallable.so", "--yes"],
    );
    assert!(
        !refused.status.success() && stderr(&refused).contains("http:// is not accepted"),
        "{}",
        stderr(&refused)
    );
    let url = format!(
        "http://{}/{}",
        serve_files(lib.parent().unwrap()),
        lib.file_name().unwrap().to_string_lossy()
    );
    let added = l.run(&config, &["add", &url, "--yes"]);
    assert_ok(&added, "add url");
    assert!(
        stdout(&added).contains(&format!("from {url}")),
        "{}",
        stdout(&added)
    );
    assert_ok(&l.run(&config, &["remove", "installable"]), "remove");

    let added = l.run(&config, &["add", &lib.to_string_lossy(), "--yes"]);
    assert_ok(&added, "add file");
    assert!(
        stdout(&added).contains("read /etc/hostname"),
        "{}",
        stdout(&added)
    );
    let (rows, _) = l.list(&config);
    let greet = rows
        .iter()
        .find(|r| r["tool"] == "greet")
        .unwrap_or_else(|| panic!("greet not listed: {rows:?}"));
    assert_eq!(greet["status"], "active", "{greet}");
    assert_eq!(greet["isolation"], "sandbox", "{greet}");
    assert_eq!(
        greet["permissions"]["read"],
        json!(["/etc/hostname"]),
        "the declared grant: {greet}"
    );
    assert_eq!(
        greet["declared"],
        json!({"read": ["/etc/hostname"], "env": ["INSTALLABLE_GREETING"]}),
        "list shows what the plugin declares: {greet}"
    );
}

/// Poll `greet` until it answers `expected` (the running host serves the version that says it).
fn wait_for_greeting(server: &mut StdioServer, id: &mut u64, expected: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = call_tool(server, id, "greet", json!({"name": "Ana"}));
        if text_of(&answer) == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "greet never answered {expected:?}; last {answer}\nstderr:\n{}",
            server.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Poll `read_file` of `path` until it is allowed (`true`) or denied by the sandbox (`false`).
fn wait_for_read(server: &mut StdioServer, id: &mut u64, path: &str, allowed: bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = call_tool(server, id, "read_file", json!({"path": path}));
        let denied =
            answer["result"]["isError"] == true && text_of(&answer).contains("Permission denied");
        let ok = answer["result"].is_object() && answer["result"]["isError"] != true;
        if (allowed && ok) || (!allowed && denied) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "reading {path} never became {}; last {answer}\nstderr:\n{}",
            if allowed { "allowed" } else { "denied" },
            server.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The installed plugins' receipts (`list --installed --json`).
fn receipts(s: &Setup) -> Value {
    let out = s.run(&["list", "--installed", "--json"]);
    assert_ok(&out, "list --installed");
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn an_update_revokes_dropped_permissions_and_asks_before_granting_new_ones() {
    let Some(s) = Setup::new() else { return };
    let declared = "/etc/hostname";
    if !Path::new(declared).is_file() {
        eprintln!("skipped: the fixtures declare a read of {declared}, which this system lacks");
        return;
    }
    assert_ok(
        &s.publish("fixture-installable", "1", "release", &[]),
        "publish v1",
    );
    let mut server = StdioServer::start(&s.config);
    server.initialize(LEGACY);
    let mut id = 0;
    assert_ok(&s.run(&["add", &s.reference("1"), "--yes"]), "add");
    wait_for_greeting(&mut server, &mut id, "Hello, Ana!");
    wait_for_read(&mut server, &mut id, declared, true);

    // Version 3 no longer declares the read: the update says so, and the running host's sandbox
    // stops granting it.
    assert_ok(
        &s.publish("fixture-installable-v3", "1", "release", &[]),
        "publish v3",
    );
    let narrower = s.run(&["update", "installable", "--yes"]);
    assert_ok(&narrower, "update to v3");
    assert!(
        stdout(&narrower).contains(&format!("- read {declared}")),
        "{}",
        stdout(&narrower)
    );
    wait_for_greeting(&mut server, &mut id, "Hi, Ana.");
    let denied = call_tool(&mut server, &mut id, "read_file", json!({"path": declared}));
    assert!(
        denied["result"]["isError"] == true && text_of(&denied).contains("Permission denied"),
        "a revoked read must fail as soon as version 3 serves: {denied}"
    );
    assert_eq!(
        receipts(&s)["installable"]["permissions"],
        json!({"env": ["INSTALLABLE_GREETING"]})
    );

    // Version 2 asks for more: shown, and not granted when nobody can be asked.
    assert_ok(
        &s.publish("fixture-installable-v2", "1", "release", &[]),
        "publish v2",
    );
    let declined = s.run(&["update", "installable"]);
    assert!(!declined.status.success(), "{}", stdout(&declined));
    for expected in [
        &format!("+ read {declared}"),
        "+ net 127.0.0.1:9",
        "Update installable and grant it the added permissions?",
        "standard input is not a terminal (pass --yes",
        "Not updated.",
    ] {
        assert!(
            stdout(&declined).contains(expected),
            "{expected:?} not in:\n{}",
            stdout(&declined)
        );
    }
    assert_eq!(receipts(&s)["installable"]["version"], "3.0.0");
    wait_for_read(&mut server, &mut id, declared, false);

    let wider = s.run(&["update", "installable", "--yes"]);
    assert_ok(&wider, "update to v2");
    wait_for_greeting(&mut server, &mut id, "Hello again, Ana!");
    wait_for_read(&mut server, &mut id, declared, true);
    assert_eq!(
        receipts(&s)["installable"]["permissions"]["net"],
        json!(["127.0.0.1:9"])
    );
}

impl Setup {
    /// `mcp-host ARGS` started, not waited for.
    fn spawn(&self, args: &[&str]) -> std::process::Child {
        self.spawn_in(&self.l.dir("no-docker-config"), args)
    }

    /// `mcp-host ARGS` started with docker's configuration directory `docker_config` (and no
    /// registry token), not waited for.
    fn spawn_in(&self, docker_config: &Path, args: &[&str]) -> std::process::Child {
        self.command(docker_config, args).spawn().unwrap()
    }

    /// The command `mcp-host ARGS` with docker's configuration directory `docker_config` and no
    /// registry token, its output piped.
    fn command(&self, docker_config: &Path, args: &[&str]) -> Command {
        let mut command = Command::new(&artifacts().host);
        command
            .arg("--config")
            .arg(&self.config)
            .args(args)
            .env_remove("MCP_TOOL_DIRS")
            .env_remove(oci::TOKEN_ENV)
            .env("DOCKER_CONFIG", docker_config)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    /// Run `mcp-host ARGS` for each of `runs` at once: their outputs, in order.
    fn run_at_once(&self, runs: &[Vec<&str>]) -> Vec<Output> {
        let children: Vec<_> = runs.iter().map(|args| self.spawn(args)).collect();
        children
            .into_iter()
            .map(|c| c.wait_with_output().unwrap())
            .collect()
    }
}

#[test]
fn concurrent_adds_and_removes_lose_nothing() {
    let Some(s) = Setup::new() else { return };
    // The packaged plugins, published as they are built.
    let key = s.key("release");
    let mut references = Vec::new();
    for krate in ["mcp-time", "mcp-text"] {
        let reference = format!("{}/tools/{krate}:1", s.registry.addr);
        let lib = artifacts().plugin(krate);
        let out = s.run(&["publish", "--key", &key, &lib.to_string_lossy(), &reference]);
        assert_ok(&out, krate);
        references.push(reference);
    }

    // Two processes add one plugin each at once: both recorded, in the receipts and the lock.
    let adds: Vec<Vec<&str>> = references
        .iter()
        .map(|r| vec!["add", r.as_str(), "--yes"])
        .collect();
    for out in s.run_at_once(&adds) {
        assert_ok(&out, "a concurrent add");
    }
    let installed = receipts(&s);
    let names: Vec<String> = installed.as_object().unwrap().keys().cloned().collect();
    assert_eq!(names.len(), 2, "{installed}");
    let lock = s.lock();
    for name in &names {
        assert!(lock["installed"][name].is_object(), "{name}: {lock}");
        let file = installed[name]["file"].as_str().unwrap();
        assert!(s.managed().join(file).is_file(), "{file}");
        let tools = lock["tools"].as_object().unwrap();
        assert!(
            tools.values().any(|pin| pin["plugin"] == name.as_str()),
            "{name}'s tools are not pinned: {lock}"
        );
    }

    // A client calls their tools through a running host.
    let mut server = StdioServer::start(&s.config);
    server.initialize(LEGACY);
    let mut id = 0;
    wait_for_tools(&mut server, &mut id, |names| {
        ["current_time", "hash_text"]
            .iter()
            .all(|t| names.iter().any(|n| n == t))
    });
    let hashed = call_tool(&mut server, &mut id, "hash_text", json!({"text": "hello"}));
    assert!(
        hashed
            .to_string()
            .contains("2cf24dba5fb0a30e26e83b2ac5b9e29e"),
        "{hashed}"
    );
    let now = call_tool(&mut server, &mut id, "current_time", json!({"zone": "UTC"}));
    assert!(
        now["result"].is_object() && now["result"]["isError"] != true,
        "{now}"
    );

    // Two processes remove them at once: nothing left, and the host unloads them.
    let removes: Vec<Vec<&str>> = names.iter().map(|n| vec!["remove", n.as_str()]).collect();
    for out in s.run_at_once(&removes) {
        assert_ok(&out, "a concurrent remove");
    }
    s.assert_nothing_installed("concurrent removes");
    wait_for_tools(&mut server, &mut id, |names| names.is_empty());
    let lock = s.lock();
    assert!(
        lock.get("installed").is_none() && lock["tools"] == json!({}),
        "{lock}"
    );

    // The same plugin added by two processes that both passed their checks before either
    // commits: one installs it, the other is refused when its transaction finds it installed.
    let outs = s.add_at_once_held(&[&references[0], &references[0]]);
    let succeeded = outs.iter().filter(|o| o.status.success()).count();
    assert_eq!(
        succeeded,
        1,
        "{:?}",
        outs.iter().map(stderr).collect::<Vec<_>>()
    );
    let refused = outs.iter().find(|o| !o.status.success()).unwrap();
    assert!(
        stderr(refused).contains("is already installed"),
        "{}",
        stderr(refused)
    );
    let installed = receipts(&s);
    let only: Vec<&String> = installed.as_object().unwrap().keys().collect();
    assert_eq!(only.len(), 1, "{installed}");
    assert_ok(&s.run(&["remove", only[0].as_str()]), "remove");

    // And two plugins, likewise: both recorded.
    for out in s.add_at_once_held(&[&references[0], &references[1]]) {
        assert_ok(&out, "a held concurrent add");
    }
    assert_eq!(receipts(&s).as_object().unwrap().len(), 2);
    assert_eq!(s.lock()["installed"].as_object().unwrap().len(), 2);
    // `pin` rewrites the lock file and keeps what the installs recorded there.
    assert_ok(&s.run(&["pin"]), "pin");
    assert_eq!(s.lock()["installed"].as_object().unwrap().len(), 2);
    let left: Vec<String> = std::fs::read_dir(s.managed())
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".staging-"))
        .collect();
    assert!(left.is_empty(), "staging left behind: {left:?}");
}

impl Setup {
    /// `add --yes` of each of `references` at once, each process let into its commit only once
    /// all have fetched and checked their plugin and shown it: the test holds the managed
    /// directory's lock from when their staging directories exist until every one has printed
    /// what it installs (one that finishes before the lock is taken simply commits first).
    fn add_at_once_held(&self, references: &[&str]) -> Vec<Output> {
        let mut running: Vec<_> = references
            .iter()
            .map(|r| {
                let mut child = self.spawn(&["add", r, "--yes"]);
                let stdout = child.stdout.take().unwrap();
                let (tx, rx) = std::sync::mpsc::channel();
                std::thread::spawn(move || {
                    use std::io::BufRead as _;
                    for line in std::io::BufReader::new(stdout).lines() {
                        let Ok(line) = line else { break };
                        if tx.send(line).is_err() {
                            break;
                        }
                    }
                });
                (child, rx, String::new())
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(120);
        while self.staging_dirs() < references.len() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let lock = std::fs::File::options()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(self.managed().join(mcp_host::install::LOCK_FILE))
            .unwrap();
        lock.lock().unwrap();
        for (_, lines, seen) in &mut running {
            // Until it has shown its permissions (then it commits), or ended.
            while !seen.contains("runs sandboxed") {
                match lines.recv_timeout(Duration::from_secs(120)) {
                    Ok(line) => {
                        seen.push_str(&line);
                        seen.push('\n');
                    }
                    Err(_) => break,
                }
            }
        }
        drop(lock);
        running
            .into_iter()
            .map(|(child, lines, mut seen)| {
                let mut out = child.wait_with_output().unwrap();
                seen.extend(lines.iter().map(|l| l + "\n"));
                out.stdout = seen.into_bytes();
                out
            })
            .collect()
    }

    /// How many staging directories the managed directory has.
    fn staging_dirs(&self) -> usize {
        std::fs::read_dir(self.managed()).map_or(0, |d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with(".staging-"))
                .count()
        })
    }
}

#[test]
fn oversized_package_parts_are_refused_naming_the_limit() {
    let Some(s) = Setup::new() else { return };
    assert_ok(
        &s.publish("fixture-installable", "1", "release", &[]),
        "publish",
    );
    let base = std::fs::read_to_string(&s.config).unwrap();
    for (key, max, part) in [
        ("max_manifest_bytes", 256, "the OCI manifest"),
        ("max_library_bytes", 4096, package::LIBRARY_MEDIA_TYPE),
        ("max_signature_bytes", 64, package::SIGNATURE_MEDIA_TYPE),
    ] {
        let config = s.l.root.path().join(format!("{key}.yaml"));
        std::fs::write(
            &config,
            format!("{base}limits:\n  packages:\n    {key}: {max}\n"),
        )
        .unwrap();
        let limit = format!("over the limit of {max} bytes (limits.packages.{key})");
        assert_refused_under(&s, &config, &s.reference("1"), &[part, &limit]);
    }
}

#[test]
fn a_registry_that_requires_credentials_gets_them_from_dockers_config() {
    let Some(registry) = registry_with(Access::Password) else {
        return;
    };
    let s = Setup::with(registry);
    let (user, password) = REGISTRY_USER;
    let docker = s.l.dir("docker");
    let auth = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        format!("{user}:{password}"),
    );
    std::fs::write(
        docker.join("config.json"),
        json!({"auths": {s.registry.addr.clone(): {"auth": auth}}}).to_string(),
    )
    .unwrap();
    let with = |args: &[&str]| s.spawn_in(&docker, args).wait_with_output().unwrap();
    let without = |args: &[&str]| s.spawn(args).wait_with_output().unwrap();

    let lib = s.library("fixture-installable");
    let key = s.key("release");
    let reference = s.reference("1");
    let publish = ["publish", "--key", &key, lib.to_str().unwrap(), &reference];
    let refused = without(&publish);
    assert!(
        !refused.status.success() && stderr(&refused).contains("registry:"),
        "published without credentials:\n{}",
        stderr(&refused)
    );
    assert_ok(&with(&publish), "publish with credentials");

    let refused = without(&["add", &reference, "--yes"]);
    assert!(
        !refused.status.success() && stderr(&refused).contains("registry:"),
        "added without credentials:\n{}",
        stderr(&refused)
    );
    s.assert_nothing_installed("add without credentials");
    let added = with(&["add", &reference, "--yes"]);
    assert_ok(&added, "add with credentials");
    assert!(
        stdout(&added).contains("Installed installable 1.0.0"),
        "{}",
        stdout(&added)
    );
}

/// Serve `body` at any path over plain HTTP on a loopback port, sending its length and only its
/// first half, then holding the connection until the client goes; the address, and a receiver
/// that hears once the half is sent.
fn serve_half(body: Vec<u8>) -> (String, std::sync::mpsc::Receiver<()>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let Ok((mut stream, _)) = listener.accept() else {
            return;
        };
        request_path(&mut stream);
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        let _ = stream.write_all(head.as_bytes());
        let _ = stream.write_all(&body[..body.len() / 2]);
        let _ = stream.flush();
        let _ = tx.send(());
        // Until the client is gone (killed): a read returns 0 or fails.
        let _ = stream.read(&mut [0u8; 1]);
    });
    (addr, rx)
}

#[test]
fn an_interrupted_download_leaves_nothing_installed() {
    let l = Layout::new();
    let config = trusting(&l, &[("k", keygen(&l, "k"))]);
    let lib = l.install("build", "fixture-installable", None);
    sign_with_k(&l, &config, &lib);
    let (addr, half_sent) = serve_half(std::fs::read(&lib).unwrap());
    let url = format!(
        "http://{addr}/{}",
        lib.file_name().unwrap().to_string_lossy()
    );
    let mut child = Command::new(&artifacts().host)
        .arg("--config")
        .arg(&config)
        .args(["add", &url, "--yes"])
        .env_remove("MCP_TOOL_DIRS")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    half_sent
        .recv_timeout(Duration::from_secs(120))
        .expect("the download never started");
    let managed = l.root.path().join("data").join("plugins");
    let entries = || -> Vec<String> {
        std::fs::read_dir(&managed)
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n != mcp_host::install::LOCK_FILE)
            .collect()
    };
    child.kill().unwrap();
    let _ = child.wait();

    // Killed halfway through the library: at most its staging directory, nothing installed.
    let left = entries();
    assert!(
        left.iter().all(|n| n.starts_with(".staging-")),
        "an interrupted add left {left:?}"
    );
    let listed = l.run(&config, &["list", "--installed", "--json"]);
    assert_eq!(
        serde_json::from_slice::<Value>(&listed.stdout).unwrap(),
        json!({})
    );

    // The next add clears what the interrupted one left, and installs.
    assert_ok(
        &l.run(&config, &["add", &lib.to_string_lossy(), "--yes"]),
        "add after an interrupted one",
    );
    let left = entries();
    assert!(
        !left.iter().any(|n| n.starts_with(".staging-")),
        "staging left behind: {left:?}"
    );
    assert!(left.iter().any(|n| n == "installed.json"), "{left:?}");
}

#[test]
fn a_registry_token_from_the_environment_is_sent_as_a_bearer_token() {
    let Some(registry) = registry_with(Access::Token) else {
        return;
    };
    let s = Setup::with(registry);
    let with_token = |token: &str, args: &[&str]| {
        let mut command = s.command(&s.l.dir("no-docker-config"), args);
        command.env(oci::TOKEN_ENV, token).output().unwrap()
    };
    let lib = s.library("fixture-installable");
    let key = s.key("release");
    let reference = s.reference("1");
    let publish = ["publish", "--key", &key, lib.to_str().unwrap(), &reference];

    let refused = s.spawn(&publish).wait_with_output().unwrap();
    assert!(
        !refused.status.success() && stderr(&refused).contains("registry:"),
        "published without a token:\n{}",
        stderr(&refused)
    );
    let pull_only = s.registry.token(&["pull"]);
    let refused = with_token(&pull_only, &publish);
    assert!(
        !refused.status.success() && stderr(&refused).contains("registry:"),
        "published with a token that only allows pulls:\n{}",
        stderr(&refused)
    );
    assert_ok(
        &with_token(&s.registry.token(&["pull", "push"]), &publish),
        "publish with a token allowing pushes",
    );

    let refused = s
        .spawn(&["add", &reference, "--yes"])
        .wait_with_output()
        .unwrap();
    assert!(
        !refused.status.success() && stderr(&refused).contains("registry:"),
        "added without a token:\n{}",
        stderr(&refused)
    );
    s.assert_nothing_installed("add without a token");
    let added = with_token(&pull_only, &["add", &reference, "--yes"]);
    assert_ok(&added, "add with a token allowing pulls");
    assert!(
        stdout(&added).contains("Installed installable 1.0.0"),
        "{}",
        stdout(&added)
    );
}
