//! Which scopes an authorization asks for. The first: the configured ones when there are any,
//! else those the upstream's challenge names, else all of its protected-resource metadata's
//! `scopes_supported`, else none (the `scope` parameter is left out). A re-authorization — a
//! step-up after 403 `insufficient_scope`, or after a 401 — asks for what was granted before and
//! what is now challenged together (SEP-2350): the challenge names what the operation needs, not
//! all the client may keep. `offline_access` is added only when the authorization server lists it
//! (SEP-2207), and only to a request that asks for something.

/// The scopes of a request: `base` (configured, challenged or from metadata), with `granted`
/// before them (a re-authorization), and `offline_access` when the authorization server's
/// `scopes_supported` (`server`) lists it; each once, in first-seen order.
pub fn request(granted: &[String], base: &[String], server: Option<&[String]>) -> Vec<String> {
    let mut scopes = union(granted, base);
    let offered = server.is_some_and(|s| s.iter().any(|x| x == "offline_access"));
    if offered && !scopes.is_empty() && !scopes.iter().any(|s| s == "offline_access") {
        scopes.push("offline_access".into());
    }
    scopes
}

/// `a` then what of `b` is not in it, each once.
pub fn union(a: &[String], b: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(a.len() + b.len());
    for scope in a.iter().chain(b) {
        if !scope.is_empty() && !out.contains(scope) {
            out.push(scope.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_step_up_asks_for_what_was_granted_and_what_is_challenged() {
        // Granted mcp:basic, now challenged for mcp:write only: both (SEP-2350).
        assert_eq!(
            request(&v(&["mcp:basic"]), &v(&["mcp:write"]), None),
            v(&["mcp:basic", "mcp:write"])
        );
        // Each once, in first-seen order.
        assert_eq!(
            union(&v(&["a", "b"]), &v(&["b", "c", "a"])),
            v(&["a", "b", "c"])
        );
    }

    #[test]
    fn offline_access_is_asked_for_only_when_the_authorization_server_lists_it() {
        let listed = v(&["mcp:basic", "offline_access"]);
        assert_eq!(
            request(&[], &v(&["mcp:basic"]), Some(&listed)),
            v(&["mcp:basic", "offline_access"])
        );
        assert_eq!(
            request(&[], &v(&["mcp:basic"]), Some(&v(&["mcp:basic"]))),
            v(&["mcp:basic"])
        );
        assert_eq!(request(&[], &v(&["mcp:basic"]), None), v(&["mcp:basic"]));
        // A request that asks for nothing leaves `scope` out altogether.
        assert!(request(&[], &[], Some(&listed)).is_empty());
        // Not twice.
        assert_eq!(
            request(&v(&["offline_access"]), &v(&["x"]), Some(&listed)),
            v(&["offline_access", "x"])
        );
    }
}
