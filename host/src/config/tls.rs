//! The process's TLS set-up. Every TLS client the host builds — the OTLP exporter, `rediss://`
//! stores, HTTPS upstream servers, OCI registries and plugin downloads — is rustls with the ring
//! provider. reqwest and redis are built without a provider of their own (no aws-lc, no openssl),
//! so the process must install one before it builds a client, or the client panics.

/// Installs ring as the process's rustls provider. Idempotent and cheap: the first call installs
/// it, later ones (or one by another part of the process, which is as good) change nothing. Call
/// it before building any TLS client.
pub fn use_ring_provider() {
    // An `Err` means a provider is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod tests {
    #[test]
    fn installing_twice_leaves_one_provider() {
        super::use_ring_provider();
        super::use_ring_provider();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }
}
