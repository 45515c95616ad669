//! Disconnecting a user from an upstream: the credential is revoked at its authorization server
//! (RFC 7009, where its metadata names a `revocation_endpoint`: the refresh token, then the access
//! token, with the client authentication the token was issued to) — best effort — and the row is
//! deleted whatever the server answered. Audited `upstream_auth.revoked` with whether the server
//! took it; never a token.

use std::future::Future;
use std::pin::Pin;

use base64::Engine as _;

use super::{CredError, Credentials, lock};
use crate::access::upstream::Principal;
use crate::access::upstream::http::Client;
use crate::access::upstream::registration::{AuthMethod, Registration};
use crate::access::upstream::vault::{AtServer, Credential, Revocation};

/// Revocation at the authorization servers the gateway knows.
struct AtIssuer<'a> {
    credentials: &'a Credentials,
}

impl Revocation for AtIssuer<'_> {
    fn revoke<'a>(
        &'a self,
        _principal: &'a str,
        upstream: &'a str,
        credential: &'a Credential,
    ) -> Pin<Box<dyn Future<Output = AtServer> + Send + 'a>> {
        Box::pin(async move {
            match self
                .credentials
                .revoke_at_server(upstream, credential)
                .await
            {
                Ok(at) => at,
                Err(why) => AtServer::Failed(why),
            }
        })
    }
}

/// What revocation did, in words (the credential was deleted either way).
pub(super) fn describe(at: &AtServer) -> String {
    match at {
        AtServer::Revoked => "revoked at the authorization server".to_owned(),
        AtServer::NotOffered => "deleted; the server offers no revocation".into(),
        AtServer::Skipped(why) => format!("deleted only: {why}"),
        AtServer::Failed(why) => format!("deleted; revocation failed: {why}"),
    }
}

/// A form body, URL-encoded.
fn form(pairs: &[(&str, &str)]) -> Vec<u8> {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
        .into_bytes()
}

impl Credentials {
    /// Revoke and delete `who`'s connection to `upstream` (every upstream when empty); how many
    /// were removed. The user's cached token goes too.
    pub async fn disconnect(&self, who: &Principal, upstream: &str) -> Result<usize, CredError> {
        let only = Some(upstream).filter(|u| !u.is_empty());
        let revoked = self
            .vault
            .revoke(&who.0, only, &AtIssuer { credentials: self })
            .await?;
        for r in &revoked {
            let at = &r.connection.upstream;
            lock(&self.cache).remove(&(who.0.clone(), at.clone()));
            let (outcome, detail) = ("ok", describe(&r.at_authorization_server));
            self.audit(
                "upstream_auth.revoked",
                Some(&who.0),
                at,
                outcome,
                Some(&detail),
            );
            tracing::info!("Upstream {at}: {who} disconnected ({detail})");
        }
        Ok(revoked.len())
    }

    /// RFC 7009 at the authorization server of `credential` (issued for `upstream`'s client).
    async fn revoke_at_server(
        &self,
        upstream: &str,
        credential: &Credential,
    ) -> Result<AtServer, String> {
        let spec = self
            .spec(upstream)
            .ok_or_else(|| format!("upstream {upstream} is no longer configured"))?;
        self.revoke_with(&spec, credential).await
    }

    /// RFC 7009 at the authorization server of `credential`, found and authenticated to as
    /// `spec` says (the upstream's configuration the credential was obtained under).
    pub(super) async fn revoke_with(
        &self,
        spec: &super::Spec,
        credential: &Credential,
    ) -> Result<AtServer, String> {
        if spec.key_header.is_some() {
            return Ok(AtServer::Skipped("a static key: nothing to revoke".into()));
        }
        let upstream = spec.upstream.as_str();
        let challenge = self.challenge(upstream);
        let found = self
            .discover(spec, challenge.as_deref())
            .await
            .map_err(|e| e.to_string())?;
        if found.issuer != credential.issuer {
            return Ok(AtServer::Skipped(format!(
                "its authorization server is now {}, not {}",
                found.issuer, credential.issuer
            )));
        }
        let Some(endpoint) = found
            .metadata
            .additional_fields
            .get("revocation_endpoint")
            .and_then(|v| v.as_str())
            .map(str::to_owned)
        else {
            return Ok(AtServer::NotOffered);
        };
        let registration = self
            .client_for(spec, &found.issuer, &credential.client_id)
            .await
            .ok_or_else(|| format!("the client {} is no longer known", credential.client_id))?;
        let url = url::Url::parse(&spec.url).map_err(|e| e.to_string())?;
        let reach = crate::access::upstream::http::Reach::of(&url, self.settings().allow_private);
        let http = Client::new(reach, !spec.resource).map_err(|e| e.to_string())?;
        // The refresh token first: revoking it ends the grant (RFC 7009 §2.1). An access token
        // some servers cannot revoke (a JWT) is then best effort.
        if let Some(refresh) = &credential.refresh_token {
            post_revocation(
                &http,
                &endpoint,
                &registration,
                refresh.expose(),
                "refresh_token",
            )
            .await?;
            let access = credential.access_token.expose();
            if let Err(e) =
                post_revocation(&http, &endpoint, &registration, access, "access_token").await
            {
                tracing::debug!("Upstream {upstream}: the access token was not revoked: {e}");
            }
        } else {
            let access = credential.access_token.expose();
            post_revocation(&http, &endpoint, &registration, access, "access_token").await?;
        }
        Ok(AtServer::Revoked)
    }
}

/// POST one token to `endpoint`, authenticated as `registration` says.
async fn post_revocation(
    http: &Client,
    endpoint: &str,
    registration: &Registration,
    token: &str,
    hint: &str,
) -> Result<(), String> {
    let mut pairs = vec![("token", token), ("token_type_hint", hint)];
    let secret = registration.client_secret.as_ref().map(|s| s.expose());
    let mut request = http::Request::builder()
        .method("POST")
        .uri(endpoint)
        .header(
            http::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        );
    match (registration.method, secret) {
        (AuthMethod::ClientSecretBasic, Some(secret)) => {
            let enc =
                |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
            let basic = format!("{}:{}", enc(&registration.client_id), enc(secret));
            let value = base64::engine::general_purpose::STANDARD.encode(basic);
            request = request.header(http::header::AUTHORIZATION, format!("Basic {value}"));
        }
        (AuthMethod::ClientSecretPost, Some(secret)) => {
            pairs.push(("client_id", &registration.client_id));
            pairs.push(("client_secret", secret));
        }
        _ => pairs.push(("client_id", &registration.client_id)),
    }
    let request = request.body(form(&pairs)).map_err(|e| e.to_string())?;
    let answer = http.send(request, false).await.map_err(|e| e.to_string())?;
    if answer.status().is_success() {
        Ok(())
    } else {
        Err(format!("revocation answered HTTP {}", answer.status()))
    }
}
