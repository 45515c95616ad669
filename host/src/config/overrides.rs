//! The command line's layer over the configuration (`serve --listen`): applied on top of the
//! file, overlay and environment at start and again at every reload, so a re-read configuration
//! never falls back to what the command line replaced.

use std::net::SocketAddr;

use super::Config;

/// Values given on the command line, over every layer of the configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `serve --listen`: the HTTP address (and so the default `auth.resource`).
    pub listen: Option<SocketAddr>,
}

impl Overrides {
    /// Set what the command line gave in `config`.
    pub fn apply(&self, config: &mut Config) {
        if let Some(addr) = self.listen {
            config.listen = addr;
        }
    }

    /// Whether the command line overrides nothing.
    pub fn is_empty(&self) -> bool {
        self == &Overrides::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listen_override_replaces_the_configured_address() {
        let mut config = Config::default();
        Overrides::default().apply(&mut config);
        assert_eq!(config.listen, Config::default().listen);
        let addr = SocketAddr::from(([127, 0, 0, 1], 19203));
        let cli = Overrides { listen: Some(addr) };
        assert!(!cli.is_empty());
        cli.apply(&mut config);
        assert_eq!(config.listen, addr);
    }
}
