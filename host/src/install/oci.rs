//! Registry access for plugin packages through `oci-client`: push a [`Package`], pull one
//! platform's build of one. HTTPS always, except plain HTTP to a registry on a loopback address;
//! credentials from `MCP_HOST_REGISTRY_TOKEN` (a bearer token) or docker's `config.json`
//! (`$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`); every blob is checked against its
//! digest and read through a size bound.

use std::pin::Pin;
use std::task::{Context, Poll};

use base64::Engine as _;
use oci_client::client::{ClientConfig, ClientProtocol, Config as OciConfig, ImageLayer};
use oci_client::manifest::{OciDescriptor, OciImageManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};

use super::InstallError;
use super::package::{
    self, ARTIFACT_TYPE, CONFIG_MEDIA_TYPE, LIBRARY_MEDIA_TYPE, Limit, Limits, MANIFEST_MEDIA_TYPE,
    Package, PlatformBuild, SIGNATURE_MEDIA_TYPE,
};

/// The environment variable holding a bearer token for the registry.
pub const TOKEN_ENV: &str = crate::config::REGISTRY_TOKEN_VAR;

/// A parsed package reference (`registry/repository:tag` or `@sha256:...`; an `oci://` prefix
/// is accepted).
pub fn parse_reference(text: &str) -> Result<Reference, InstallError> {
    let bare = text.strip_prefix("oci://").unwrap_or(text);
    bare.parse::<Reference>()
        .map_err(|e| InstallError::Reference(format!("{text}: {e}")))
}

/// Whether `registry` (`host[:port]`) is on a loopback address, where plain HTTP is allowed.
pub fn is_loopback(registry: &str) -> bool {
    let host = match registry.rsplit_once(':') {
        Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h,
        _ => registry,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// A client for `reference`'s registry: HTTPS, or HTTP for a loopback registry.
fn client(reference: &Reference) -> Client {
    crate::config::tls::use_ring_provider();
    let registry = reference.resolve_registry().to_owned();
    let protocol = if is_loopback(&registry) {
        ClientProtocol::HttpsExcept(vec![registry])
    } else {
        ClientProtocol::Https
    };
    Client::new(ClientConfig {
        protocol,
        connect_timeout: Some(std::time::Duration::from_secs(30)),
        read_timeout: Some(std::time::Duration::from_secs(120)),
        ..ClientConfig::default()
    })
}

/// The credentials for `registry`: [`TOKEN_ENV`], else docker's `config.json` entry, else none.
pub fn credentials(registry: &str) -> RegistryAuth {
    if let Some(token) = std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty()) {
        return RegistryAuth::Bearer(token);
    }
    let file = std::env::var_os("DOCKER_CONFIG")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".docker")))
        .map(|d| d.join("config.json"));
    let Some(text) = file.and_then(|f| {
        crate::config::lock::read_bounded(&f, 1 << 20)
            .ok()
            .flatten()
    }) else {
        return RegistryAuth::Anonymous;
    };
    docker_auth(&text, registry).unwrap_or(RegistryAuth::Anonymous)
}

/// The entry for `registry` in a docker `config.json` (`auths.<registry>.auth`, base64 of
/// `user:password`, or `username` and `password`).
fn docker_auth(text: &str, registry: &str) -> Option<RegistryAuth> {
    let config: serde_json::Value = serde_json::from_str(text).ok()?;
    let auths = config.get("auths")?.as_object()?;
    let entry = auths
        .get(registry)
        .or_else(|| auths.get(&format!("https://{registry}")))
        .or_else(|| auths.get(&format!("http://{registry}")))?;
    if let Some(encoded) = entry.get("auth").and_then(|a| a.as_str()) {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()?;
        let text = String::from_utf8(decoded).ok()?;
        let (user, password) = text.split_once(':')?;
        return Some(RegistryAuth::Basic(user.to_owned(), password.to_owned()));
    }
    let user = entry.get("username")?.as_str()?;
    let password = entry.get("password")?.as_str()?;
    Some(RegistryAuth::Basic(user.to_owned(), password.to_owned()))
}

fn registry_error(reference: &Reference, e: impl std::fmt::Display) -> InstallError {
    InstallError::Registry(format!("{reference}: {e}"))
}

/// Push `package` to `reference`; the pushed manifest's digest.
pub async fn push(reference: &Reference, package: &Package) -> Result<String, InstallError> {
    let client = client(reference);
    let auth = credentials(reference.resolve_registry());
    let mut layers = vec![ImageLayer::new(
        package.manifest_json.clone(),
        MANIFEST_MEDIA_TYPE.to_owned(),
        Some(package::annotations(None, "manifest.json")),
    )];
    for build in &package.builds {
        layers.push(ImageLayer::new(
            build.library.clone(),
            LIBRARY_MEDIA_TYPE.to_owned(),
            Some(package::annotations(
                Some(&build.platform),
                &build.file_name,
            )),
        ));
        if let Some(signature) = &build.signature {
            layers.push(ImageLayer::new(
                signature.clone().into_bytes(),
                SIGNATURE_MEDIA_TYPE.to_owned(),
                Some(package::annotations(
                    Some(&build.platform),
                    &format!("{}.minisig", build.file_name),
                )),
            ));
        }
    }
    let config_data =
        serde_json::to_vec(&package.config).map_err(|e| registry_error(reference, e))?;
    let config = OciConfig::new(config_data, CONFIG_MEDIA_TYPE.to_owned(), None);
    let mut manifest = OciImageManifest::build(&layers, &config, None);
    manifest.artifact_type = Some(ARTIFACT_TYPE.to_owned());
    client
        .push(reference, &layers, config, &auth, Some(manifest.clone()))
        .await
        .map_err(|e| registry_error(reference, e))?;
    let digest = client
        .fetch_manifest_digest(reference, &auth)
        .await
        .map_err(|e| registry_error(reference, e))?;
    Ok(digest)
}

/// One platform's build of a package, as pulled.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// The OCI manifest's digest.
    pub digest: String,
    /// The plugin manifest JSON.
    pub manifest_json: Vec<u8>,
    /// The build for the platform asked for.
    pub build: PlatformBuild,
    /// Every platform the package has a library for.
    pub platforms: Vec<String>,
}

/// Pull the build for `platform` of the package at `reference`: its manifest JSON, library and
/// signature, each checked against its digest and read within its limit.
pub async fn pull(
    reference: &Reference,
    platform: &str,
    limits: &Limits,
) -> Result<Pulled, InstallError> {
    let client = client(reference);
    let (manifest, digest) = package_manifest(&client, reference, limits.manifest).await?;
    let platforms: Vec<String> = manifest
        .layers
        .iter()
        .filter(|d| d.media_type == LIBRARY_MEDIA_TYPE)
        .filter_map(layer_platform)
        .collect();
    let manifest_layer = find_layer(&manifest, MANIFEST_MEDIA_TYPE, None).ok_or_else(|| {
        InstallError::Package(format!("{reference} has no plugin manifest layer"))
    })?;
    let (library_layer, file_name) = library_layer(&manifest, reference, platform, &platforms)?;
    let manifest_json = pull_bounded(&client, reference, manifest_layer, limits.manifest).await?;
    let library = pull_bounded(&client, reference, library_layer, limits.library).await?;
    let signature =
        pull_signature(&client, reference, &manifest, platform, limits.signature).await?;
    Ok(Pulled {
        digest,
        manifest_json,
        build: PlatformBuild {
            platform: platform.to_owned(),
            file_name,
            library,
            signature,
        },
        platforms,
    })
}

/// The media types of OCI and Docker image indexes: one manifest per platform, which a plugin
/// package is not.
const INDEX_MEDIA_TYPES: &[&str] = &[
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

/// The OCI manifest at `reference` and its digest, read within `limit` and checked against the
/// digest the reference or the registry names; refused unless it is a plugin package.
async fn package_manifest(
    client: &Client,
    reference: &Reference,
    limit: Limit,
) -> Result<(OciImageManifest, String), InstallError> {
    let body = manifest_bytes(client, reference, limit).await?;
    let digest = package::sha256_digest(&body.bytes);
    for expected in [reference.digest(), body.header_digest.as_deref()]
        .into_iter()
        .flatten()
        .filter(|d| d.starts_with("sha256:"))
    {
        if expected != digest {
            return Err(registry_error(
                reference,
                format!("the manifest's digest is {digest}, not {expected}"),
            ));
        }
    }
    let value: serde_json::Value = serde_json::from_slice(&body.bytes)
        .map_err(|e| registry_error(reference, format!("the manifest is not JSON: {e}")))?;
    if let Some(media_type) = value["mediaType"]
        .as_str()
        .filter(|m| INDEX_MEDIA_TYPES.contains(m))
    {
        return Err(InstallError::Package(format!(
            "{reference} is an image index ({media_type}), not an mcp-host plugin package (one \
             manifest whose layers carry each platform's build)"
        )));
    }
    let manifest: OciImageManifest = serde_json::from_value(value)
        .map_err(|e| registry_error(reference, format!("not an OCI image manifest: {e}")))?;
    if manifest.artifact_type.as_deref() != Some(ARTIFACT_TYPE) {
        return Err(InstallError::Package(format!(
            "{reference} is not an mcp-host plugin package (artifactType {:?}, expected {ARTIFACT_TYPE})",
            manifest.artifact_type.as_deref().unwrap_or("none")
        )));
    }
    Ok((manifest, digest))
}

/// A manifest as the registry sent it, and the digest it named (`Docker-Content-Digest`).
struct ManifestBody {
    bytes: Vec<u8>,
    header_digest: Option<String>,
}

/// GET the manifest at `reference` (authenticated as `client` does it), within `limit`:
/// oci-client reads manifests whole, so this request is made here.
async fn manifest_bytes(
    client: &Client,
    reference: &Reference,
    limit: Limit,
) -> Result<ManifestBody, InstallError> {
    let registry = reference.resolve_registry();
    let auth = credentials(registry);
    let token = client
        .auth(reference, &auth, RegistryOperation::Pull)
        .await
        .map_err(|e| registry_error(reference, e))?;
    let loopback = is_loopback(registry);
    let url = format!(
        "{}://{registry}/v2/{}/manifests/{}",
        if loopback { "http" } else { "https" },
        reference.repository(),
        reference
            .digest()
            .or_else(|| reference.tag())
            .unwrap_or("latest")
    );
    let http = super::download::http_client(loopback).map_err(|e| registry_error(reference, e))?;
    let mut request = http.get(&url).header(
        reqwest::header::ACCEPT,
        format!(
            "{},{}",
            oci_client::manifest::OCI_IMAGE_MEDIA_TYPE,
            INDEX_MEDIA_TYPES.join(",")
        ),
    );
    request = match (token, &auth) {
        (Some(token), _) => request.bearer_auth(token),
        (None, RegistryAuth::Basic(user, password)) => request.basic_auth(user, Some(password)),
        (None, _) => request,
    };
    let response = request
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| registry_error(reference, e))?;
    let header_digest = response
        .headers()
        .get("docker-content-digest")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let what = format!("{reference}: the OCI manifest");
    let bytes = super::download::bounded_body(response, limit, &what).await?;
    Ok(ManifestBody {
        bytes,
        header_digest,
    })
}

/// The platform a layer is annotated with (none for the plugin manifest's layer).
fn layer_platform(d: &OciDescriptor) -> Option<String> {
    d.annotations
        .as_ref()
        .and_then(|a| a.get(package::PLATFORM_ANNOTATION))
        .cloned()
}

/// The first layer of `media_type` for `platform` (`None`: a layer of no platform).
fn find_layer<'a>(
    manifest: &'a OciImageManifest,
    media_type: &str,
    platform: Option<&str>,
) -> Option<&'a OciDescriptor> {
    manifest
        .layers
        .iter()
        .find(|d| d.media_type == media_type && layer_platform(d).as_deref() == platform)
}

/// The library layer for `platform` and the file name it carries (one this host installs); the
/// error names the `platforms` the package has.
fn library_layer<'a>(
    manifest: &'a OciImageManifest,
    reference: &Reference,
    platform: &str,
    platforms: &[String],
) -> Result<(&'a OciDescriptor, String), InstallError> {
    let layer = find_layer(manifest, LIBRARY_MEDIA_TYPE, Some(platform)).ok_or_else(|| {
        InstallError::Package(format!(
            "{reference} has no build for this platform ({platform}); it has: {}",
            if platforms.is_empty() {
                "none".to_owned()
            } else {
                platforms.join(", ")
            }
        ))
    })?;
    let file_name = layer
        .annotations
        .as_ref()
        .and_then(|a| a.get(package::TITLE_ANNOTATION))
        .cloned()
        .filter(|n| installable_file_name(n))
        .ok_or_else(|| {
            InstallError::Package(format!(
                "{reference}: the {platform} library has no usable file name ({})",
                package::TITLE_ANNOTATION
            ))
        })?;
    Ok((layer, file_name))
}

/// The signature of the `platform` library, when the package has one.
async fn pull_signature(
    client: &Client,
    reference: &Reference,
    manifest: &OciImageManifest,
    platform: &str,
    limit: Limit,
) -> Result<Option<String>, InstallError> {
    let Some(layer) = find_layer(manifest, SIGNATURE_MEDIA_TYPE, Some(platform)) else {
        return Ok(None);
    };
    let bytes = pull_bounded(client, reference, layer, limit).await?;
    String::from_utf8(bytes).map(Some).map_err(|_| {
        InstallError::Package(format!("{reference}: the {platform} signature is not text"))
    })
}

/// A file name a package may carry: one plain name, no path, a shared library's extension
/// (`so`, `dylib`, `dll`: the platforms' own).
pub fn valid_file_name(name: &str) -> bool {
    let path = std::path::Path::new(name);
    !name.is_empty()
        && !name.starts_with(['.', '_'])
        && !name.contains(['/', '\\', '\0'])
        && path.extension().is_some_and(|e| {
            ["so", "dylib", "dll"]
                .iter()
                .any(|x| e.eq_ignore_ascii_case(x))
        })
}

/// A file name this host installs and serves: [`valid_file_name`] with this platform's extension.
pub fn installable_file_name(name: &str) -> bool {
    valid_file_name(name) && crate::plugins::discovery::is_plugin_file(std::path::Path::new(name))
}

/// Pull blob `layer`, refusing one whose declared or actual size is over `limit`; oci-client
/// checks the digest.
async fn pull_bounded(
    client: &Client,
    reference: &Reference,
    layer: &OciDescriptor,
    limit: Limit,
) -> Result<Vec<u8>, InstallError> {
    let what = format!("{reference}: layer {} ({})", layer.digest, layer.media_type);
    if u64::try_from(layer.size).map_or(true, |s| s > limit.max) {
        return Err(limit.refuse(&what, layer.size));
    }
    let mut out = Bounded {
        data: Vec::new(),
        max: limit.max_len(),
    };
    client
        .pull_blob(reference, layer, &mut out)
        .await
        .map_err(|e| {
            if out.data.len() >= out.max {
                limit.refuse_over(&what)
            } else {
                registry_error(reference, format!("layer {}: {e}", layer.digest))
            }
        })?;
    Ok(out.data)
}

/// An in-memory sink that fails once more than `max` bytes arrive.
struct Bounded {
    data: Vec<u8>,
    max: usize,
}

impl tokio::io::AsyncWrite for Bounded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.data.len() + buf.len() > self.max {
            let max = self.max;
            self.data.resize(max, 0);
            return Poll::Ready(Err(std::io::Error::other("blob over the size limit")));
        }
        self.data.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_registries_and_docker_credentials() {
        assert!(is_loopback("127.0.0.1:5000"));
        assert!(is_loopback("localhost:5000"));
        assert!(is_loopback("[::1]:5000"));
        assert!(!is_loopback("ghcr.io"));
        assert!(!is_loopback("10.0.0.1:5000"));
        let text = r#"{"auths": {"reg.example:5000": {"auth": "YW5hOnNlY3JldA=="}}}"#;
        match docker_auth(text, "reg.example:5000") {
            Some(RegistryAuth::Basic(u, p)) => {
                assert_eq!((u.as_str(), p.as_str()), ("ana", "secret"))
            }
            other => panic!("{other:?}"),
        }
        assert!(docker_auth(text, "other").is_none());
        assert!(valid_file_name(&format!(
            "libx.{}",
            std::env::consts::DLL_EXTENSION
        )));
        assert!(!valid_file_name("../libx.so"));
        assert!(!valid_file_name("notes.txt"));
        assert!(valid_file_name("libx.dylib"));
        assert!(!installable_file_name("libx.dylib") || cfg!(target_os = "macos"));
    }
}
