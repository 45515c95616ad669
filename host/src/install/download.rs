//! `mcp-host add https://.../libx.so`: a library and its `.minisig` fetched over HTTPS (plain
//! HTTP only from a loopback address), each read through a size bound.

use futures_util::StreamExt as _;

use super::InstallError;
use super::package::{Limit, Limits, PlatformBuild};

/// The library at `url` and the signature at `url.minisig` (`None` when that answers 404), each
/// within its limit.
pub(super) async fn build(
    url: &str,
    platform: &str,
    limits: &Limits,
) -> Result<PlatformBuild, InstallError> {
    let parsed =
        reqwest::Url::parse(url).map_err(|e| InstallError::Reference(format!("{url}: {e}")))?;
    let host = parsed.host_str().unwrap_or_default();
    let loopback = super::oci::is_loopback(host);
    match parsed.scheme() {
        "https" => {}
        "http" if loopback => {}
        other => {
            return Err(InstallError::Reference(format!(
                "{url}: {other}:// is not accepted (https://, or http:// to a loopback address)"
            )));
        }
    }
    let file_name = parsed
        .path_segments()
        .and_then(|mut s| s.next_back())
        .filter(|n| super::oci::installable_file_name(n))
        .ok_or_else(|| {
            InstallError::Package(format!(
                "{url}: the URL does not end in a plugin library's name ({}NAME.{})",
                std::env::consts::DLL_PREFIX,
                std::env::consts::DLL_EXTENSION
            ))
        })?
        .to_owned();
    let client =
        http_client(loopback).map_err(|e| InstallError::Registry(format!("{url}: {e}")))?;
    let library = get(&client, url, limits.library)
        .await?
        .ok_or_else(|| InstallError::Registry(format!("{url}: 404 Not Found")))?;
    let signature = get(&client, &format!("{url}.minisig"), limits.signature)
        .await?
        .map(|bytes| {
            String::from_utf8(bytes)
                .map_err(|_| InstallError::Signature(format!("{url}.minisig is not a signature")))
        })
        .transpose()?;
    Ok(PlatformBuild {
        platform: platform.to_owned(),
        file_name,
        library,
        signature,
    })
}

/// The body at `url`, within `limit`; `None` for a 404.
async fn get(
    client: &reqwest::Client,
    url: &str,
    limit: Limit,
) -> Result<Option<Vec<u8>>, InstallError> {
    let failed = |e: &dyn std::fmt::Display| InstallError::Registry(format!("{url}: {e}"));
    let response = client.get(url).send().await.map_err(|e| failed(&e))?;
    if response.status() == reqwest::StatusCode::NOT_FOUND {
        return Ok(None);
    }
    let response = response.error_for_status().map_err(|e| failed(&e))?;
    bounded_body(response, limit, url).await.map(Some)
}

/// The body of `response` (from `what`), refused once it is over `limit` — by its announced
/// length before reading, or as it arrives.
pub(super) async fn bounded_body(
    response: reqwest::Response,
    limit: Limit,
    what: &str,
) -> Result<Vec<u8>, InstallError> {
    if let Some(n) = response.content_length().filter(|n| *n > limit.max) {
        return Err(limit.refuse(what, n));
    }
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| InstallError::Registry(format!("{what}: {e}")))?;
        if (body.len() + chunk.len()) as u64 > limit.max {
            return Err(limit.refuse_over(what));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The HTTP client of downloads and registry requests: HTTPS only unless the server is on
/// loopback, TLS by the process's ring provider, bounded connect and read waits.
pub(super) fn http_client(loopback: bool) -> reqwest::Result<reqwest::Client> {
    crate::config::tls::use_ring_provider();
    reqwest::Client::builder()
        .https_only(!loopback)
        .connect_timeout(std::time::Duration::from_secs(30))
        .read_timeout(std::time::Duration::from_secs(120))
        .build()
}
