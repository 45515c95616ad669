//! Resource URIs in normal form: what a client's `uri` is compared, policed, routed and read as,
//! so that one resource has one spelling — `FILE:///srv//payroll/./a`, `file:///srv/x/../payroll/a`
//! and `file:///srv/%70ayroll/a` are all `file:///srv/payroll/a` to a policy rule, an agent's
//! view, the registry and the upstream that reads it.
//!
//! The normal form is RFC 3986's syntax-based normalisation (§6.2.2, done by the maintained
//! [`fluent_uri`] crate: scheme and host lower-cased, percent-encoded unreserved characters
//! decoded and the hex digits of the others upper-cased, dot segments removed, a scheme's default
//! port dropped), with non-ASCII characters percent-encoded (RFC 3987 §3.1: an IRI and its URI are
//! one resource), and two scheme-independent steps RFC 3986 leaves to the scheme (§6.2.3) that a
//! server reading paths from a file system takes anyway: a run of `/` in the path is one `/`
//! (before dot segments are removed, as a file system resolves `a//../b`), and `file://localhost/`
//! is `file:///` (RFC 8089).
//!
//! What cannot be normalised without guessing is refused ([`UriError`]): a string that is not an
//! absolute URI (or IRI), an encoded `/` or `\` (`%2F`, `%5C`: one server decodes it into a
//! separator, another does not) or an encoded NUL (`%00`: a C string ends there) in the host or
//! the path, a `..` that climbs above the path's root, and dot segments in a path without a leading
//! `/` (which RFC 3986 leaves alone). The query and the fragment keep their `%2F`s.

use std::borrow::Cow;

use fluent_uri::normalize::Normalizer;
use fluent_uri::{Iri, Uri};

/// Why a resource URI has no normal form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UriError {
    /// Not an absolute URI or IRI (RFC 3986 / 3987): no scheme, a character URIs do not have, a
    /// broken `%` escape.
    #[error("not an absolute URI (RFC 3986): {0}")]
    Invalid(String),
    /// `%2F`, `%5C` or `%00` in the host or the path.
    #[error(
        "an encoded `/`, `\\` or NUL (%2F, %5C, %00) in its host or path: servers do not agree on \
         what it names"
    )]
    EncodedSeparator,
    /// A `..` above the root of the path.
    #[error("its path climbs above its root (`..`)")]
    AboveRoot,
    /// `.` or `..` segments in a path that does not start with `/`.
    #[error("dot segments (`.`, `..`) in a path without a leading `/`")]
    RelativeDots,
}

/// The normal form of resource URI `raw` (borrowed when `raw` is already in it), or why it has
/// none.
///
/// ```
/// use mcp_host::registry::uri::normalize;
/// assert_eq!(normalize("FILE:///srv//x/../payroll/%61.txt").unwrap(), "file:///srv/payroll/a.txt");
/// assert_eq!(normalize("Test://Static-Text").unwrap(), "test://static-text");
/// assert!(normalize("file:///srv/public%2F..%2Fpayroll/a.txt").is_err());
/// assert!(normalize("file:///srv/../../etc/passwd").is_err());
/// ```
pub fn normalize(raw: &str) -> Result<Cow<'_, str>, UriError> {
    let converted;
    let uri = match Uri::parse(raw) {
        Ok(uri) => uri,
        Err(e) if raw.is_ascii() => return Err(UriError::Invalid(e.to_string())),
        Err(_) => {
            let iri = Iri::parse(raw).map_err(|e| UriError::Invalid(e.to_string()))?;
            converted = iri.to_uri();
            converted.borrow()
        }
    };
    let authority = uri.authority().map_or("", |a| a.as_str());
    let path = uri.path().as_str();
    if encodes_a_separator(authority) || encodes_a_separator(path) {
        return Err(UriError::EncodedSeparator);
    }
    if uri.as_str() == raw && !path.contains("//") && looks_normal(&uri) {
        return Ok(Cow::Borrowed(raw));
    }
    let collapsed;
    let uri = if path.contains("//") {
        collapsed = collapse_slashes(&uri);
        Uri::parse(collapsed.as_str()).map_err(|e| UriError::Invalid(e.to_string()))?
    } else {
        uri
    };
    let normal = Normalizer::new()
        .allow_path_underflow(false)
        .normalize(&uri)
        .map_err(|_| UriError::AboveRoot)?;
    let path = normal.path().as_str();
    if !path.starts_with('/') && path.split('/').any(|s| s == "." || s == "..") {
        return Err(UriError::RelativeDots);
    }
    let mut normal = normal.into_string();
    if normal.starts_with("file://localhost/") {
        normal.replace_range(.."file://localhost".len(), "file://");
    }
    Ok(if normal == raw {
        Cow::Borrowed(raw)
    } else {
        Cow::Owned(normal)
    })
}

/// Whether `uri` is in normal form as far as a quick look tells (the usual case, read without
/// the normaliser's allocations): no escape to decode or upper-case, no upper-case letter in the
/// scheme or the host, no port to drop, no IP literal, no dot segment, not `localhost`. `false`
/// only means the whole normalisation is run.
fn looks_normal(uri: &Uri<&str>) -> bool {
    let lower = |text: &str| !text.bytes().any(|b| b.is_ascii_uppercase());
    !uri.as_str().contains('%')
        && lower(uri.scheme().as_str())
        && uri.authority().is_none_or(|a| {
            let host = a.host();
            a.port().is_none() && lower(host) && !host.starts_with('[') && host != "localhost"
        })
        && !uri
            .path()
            .as_str()
            .split('/')
            .any(|s| s == "." || s == "..")
}

/// Whether `text` holds `%2F`, `%5C` or `%00` (either case).
fn encodes_a_separator(text: &str) -> bool {
    text.as_bytes().windows(3).any(|w| {
        w[0] == b'%'
            && matches!(
                (w[1], w[2].to_ascii_uppercase()),
                (b'2', b'F') | (b'5', b'C') | (b'0', b'0')
            )
    })
}

/// `uri` with each run of `/` in its path made one.
fn collapse_slashes(uri: &Uri<&str>) -> String {
    let text = uri.as_str();
    let start =
        uri.scheme().as_str().len() + 1 + uri.authority().map_or(0, |a| a.as_str().len() + 2);
    let path = uri.path().as_str();
    let mut out = String::with_capacity(text.len());
    out.push_str(&text[..start]);
    let mut previous = None;
    for c in path.chars() {
        if !(c == '/' && previous == Some('/')) {
            out.push(c);
        }
        previous = Some(c);
    }
    out.push_str(&text[start + path.len()..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn normal(raw: &str) -> String {
        normalize(raw)
            .unwrap_or_else(|e| panic!("{raw}: {e}"))
            .into_owned()
    }

    #[test]
    fn every_spelling_of_the_payroll_uri_is_one() {
        let payroll = "file:///srv/payroll/salaries.txt";
        for raw in [
            "file:///srv/payroll/salaries.txt",
            "file:///srv//payroll/salaries.txt",
            "file:////srv/payroll//salaries.txt",
            "file:///srv/./payroll/salaries.txt",
            "file:///srv/public/../payroll/salaries.txt",
            "file:///srv/public//../payroll/salaries.txt",
            "file:///srv/public/%2E%2E/payroll/salaries.txt",
            "file:///srv/public/.%2e/payroll/./salaries.txt",
            "file:///srv/%70ayroll/salaries.txt",
            "file:///%73rv/payroll/salaries%2Etxt",
            "FILE:///srv/payroll/salaries.txt",
            "File://LocalHost/srv/payroll/salaries.txt",
            "file://localhost/srv/payroll/salaries.txt",
        ] {
            assert_eq!(normal(raw), payroll, "{raw}");
        }
        assert!(matches!(
            normalize(payroll),
            Ok(Cow::Borrowed(p)) if p == payroll
        ));
    }

    #[test]
    fn scheme_and_host_case_escapes_and_ports_are_normalised() {
        assert_eq!(normal("Test://Static-Text"), "test://static-text");
        assert_eq!(normal("x://Host/Path/A"), "x://host/Path/A");
        assert_eq!(
            normal("x://h/a%7e%41?q=%2f%7E#f%2f"),
            "x://h/a~A?q=%2F~#f%2F"
        );
        assert_eq!(normal("x://h/%c3%a9"), "x://h/%C3%A9");
        assert_eq!(normal("x://h/é"), "x://h/%C3%A9");
        assert_eq!(normal("HTTP://Example.COM:80/a"), "http://example.com/a");
        assert_eq!(normal("x://[0:0:0:0:0:0:0:1]/a"), "x://[::1]/a");
        assert_eq!(normal("urn:isbn:0451450523"), "urn:isbn:0451450523");
        assert_eq!(normal("x:/a/./b/../c"), "x:/a/c");
        assert_eq!(normal("x://h/a/b/.."), "x://h/a/");
        // A path's meaning is not guessed beyond that: a trailing `/`, `file://host/`.
        assert_eq!(normal("x://h/a/"), "x://h/a/");
        assert_eq!(normal("file://server/share/a"), "file://server/share/a");
    }

    #[test]
    fn what_cannot_be_normalised_is_refused() {
        let refused = |raw: &str| normalize(raw).expect_err(raw);
        assert_eq!(
            refused("file:///srv/public%2F..%2Fpayroll/a"),
            UriError::EncodedSeparator
        );
        assert_eq!(refused("file:///srv/a%2fb"), UriError::EncodedSeparator);
        assert_eq!(refused("file:///srv/a%5Cb"), UriError::EncodedSeparator);
        assert_eq!(refused("file:///srv/a%00.txt"), UriError::EncodedSeparator);
        assert_eq!(refused("x://h%2Fx/a"), UriError::EncodedSeparator);
        assert_eq!(refused("file:///srv/../../etc/passwd"), UriError::AboveRoot);
        assert_eq!(refused("x://h/.."), UriError::AboveRoot);
        assert_eq!(refused("x://h/%2e%2E/a"), UriError::AboveRoot);
        assert_eq!(refused("x:a/../b"), UriError::RelativeDots);
        assert_eq!(refused("x:%2E/b"), UriError::RelativeDots);
        for raw in [
            "",
            "no-scheme",
            "/srv/a",
            "x://h/a b",
            "file:///srv\\payroll",
            "x://h/a%zz",
            "x://h/{id}",
            "1x://h",
        ] {
            assert!(
                matches!(refused(raw), UriError::Invalid(_)),
                "{raw}: {:?}",
                normalize(raw)
            );
        }
        // In a query or a fragment an encoded `/` is data.
        assert_eq!(normal("x://h/a?p=a%2Fb#c%2Fd"), "x://h/a?p=a%2Fb#c%2Fd");
    }

    /// Characters a URI's path is made of, and their usual disguises.
    fn piece() -> impl Strategy<Value = &'static str> {
        prop::sample::select(
            &[
                "/", "//", ".", "..", "a", "B", "%2e", "%2E", "%41", "%7e", "%20", "%c3%a9", "é",
                "-", "~", "%25", "p", "x.y", ";", "=", "@", ":",
            ][..],
        )
    }

    fn uri() -> impl Strategy<Value = String> {
        (
            prop::sample::select(&["x", "X", "file", "FiLe", "urn", "http", "a+b.c-d"][..]),
            prop::sample::select(
                &[
                    "",
                    "//",
                    "//H",
                    "//h",
                    "//h:80",
                    "//h:8080",
                    "//h:",
                    "//localhost",
                    "//LocalHost",
                    "//1.2.3.4",
                    "//[::1]",
                    "//[0::1]",
                    "//u@h",
                    "//%41",
                ][..],
            ),
            prop::collection::vec(piece(), 0..10),
            prop::option::of(prop::sample::select(
                &["?q=%2f", "?a=1&b=%41", "#F", "?q=a/b/../c", "#x/./y"][..],
            )),
        )
            .prop_map(|(scheme, authority, pieces, tail)| {
                format!(
                    "{scheme}:{authority}/{}{}",
                    pieces.concat(),
                    tail.unwrap_or("")
                )
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2048, failure_persistence: None,
                                            ..ProptestConfig::default() })]
        #[test]
        fn a_normal_form_is_its_own_normal_form_and_has_no_disguises(raw in uri()) {
            if let Ok(n) = normalize(&raw) {
                let again = normalize(&n).map(Cow::into_owned);
                prop_assert_eq!(again.as_deref(), Ok(&*n), "{} -> {}", raw, n);
                let parsed = Uri::parse(&*n);
                prop_assert!(parsed.is_ok(), "{} -> {}", raw, n);
                let path = parsed.as_ref().map_or("", |u| u.path().as_str());
                prop_assert!(!path.contains("//"), "{} -> {}", raw, n);
                prop_assert!(!path.split('/').any(|s| s == "." || s == ".."), "{} -> {}", raw, n);
                let unreserved = ["%2E", "%41", "%7E", "%2e", "%7e"];
                prop_assert!(!unreserved.iter().any(|e| n.contains(e)), "{} -> {}", raw, n);
                prop_assert!(n.is_ascii() && n == n.trim());
                prop_assert!(!n.starts_with("file://localhost/"));
            }
        }

        #[test]
        fn what_looks_normal_is_what_the_normaliser_makes_of_it(raw in uri()) {
            if let Ok(uri) = Uri::parse(raw.as_str())
                && looks_normal(&uri)
            {
                let normal = Normalizer::new().normalize(&uri).map(Uri::into_string);
                prop_assert_eq!(normal.as_deref(), Ok(raw.as_str()));
            }
        }

        #[test]
        fn any_text_normalises_or_is_refused_without_panic(raw in ".{0,40}") {
            if let Ok(n) = normalize(&raw) {
                prop_assert_eq!(normalize(&n).map(Cow::into_owned), Ok(n.into_owned()));
            }
        }
    }
}
