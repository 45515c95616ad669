//! What counts as a secret in an upstream server's settings (`tool_dirs[].server`): one rule for
//! `mcp-host import`, which puts a `${NAME}` reference in a secret's place, and for `mcp-host
//! config`, which prints it redacted. A value is a secret when its name (an environment variable,
//! a header, a command-line flag) says so, when it has a known token's form or a generated key's
//! shape, or when it is a URL with a password; an `Authorization` header always is.

/// Words of a variable, header or flag name that make its value a secret.
const SECRET_WORDS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "KEY",
    "APIKEY",
    "CREDENTIAL",
    "CREDENTIALS",
    "AUTH",
    "AUTHORIZATION",
    "COOKIE",
    "PAT",
    "PRIVATE",
    "SIGNATURE",
];

/// Prefixes of well-known token formats.
const TOKEN_PREFIXES: &[&str] = &[
    "sk-",
    "sk_",
    "pk_",
    "rk_",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "github_pat_",
    "glpat-",
    "xoxb-",
    "xoxp-",
    "xapp-",
    "AKIA",
    "AIza",
    "eyJ",
    "Bearer ",
    "Basic ",
    "npm_",
    "hf_",
    "lin_api_",
];

/// Whether `value`, of environment variable (or header, or flag) `name`, is a secret: the name
/// says so, the value has a token's known form or shape, or it is a URL with a password. An empty
/// value and a lone `${NAME}` reference are not.
pub fn is_secret(name: &str, value: &str) -> bool {
    if value.is_empty() || is_reference(value) {
        return false;
    }
    names_a_secret(name) || has_secret_form(value)
}

/// Whether header `name`'s `value` is a secret: every `Authorization` value (but a lone
/// reference), and what [`is_secret`] says of the rest.
pub fn is_secret_header(name: &str, value: &str) -> bool {
    (name.eq_ignore_ascii_case("authorization") && !value.is_empty() && !is_reference(value))
        || is_secret(name, value)
}

/// The items of a command line that hold a secret: the value after a flag whose name names one
/// (`--api-key VALUE`, `--api-key=VALUE`: the index and the offset of the value in the item),
/// and any item with a token's known form (`ghp_…`) or a URL with a password. Plain words and
/// paths are not judged by shape here: a package name looks like a key too often.
pub fn secret_arguments(argv: &[String]) -> Vec<(usize, usize)> {
    let mut found = Vec::new();
    for (i, arg) in argv.iter().enumerate() {
        if let Some((flag, value)) = arg.split_once('=').filter(|(f, _)| f.starts_with('-')) {
            if is_secret(flag, value) || (!value.is_empty() && has_known_form(value)) {
                found.push((i, flag.len() + 1));
            }
            continue;
        }
        let after_secret_flag = i
            .checked_sub(1)
            .and_then(|p| argv.get(p))
            .is_some_and(|flag| {
                flag.starts_with('-') && !flag.contains('=') && names_a_secret(flag)
            });
        let a_value = !arg.is_empty() && !arg.starts_with('-') && !is_reference(arg);
        if (after_secret_flag && a_value) || (!arg.is_empty() && has_known_form(arg)) {
            found.push((i, 0));
        }
    }
    found
}

/// Whether a variable, header or flag name names a secret (`GITHUB_TOKEN`, `X-Api-Key`,
/// `--password`).
fn names_a_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    upper
        .split(|c: char| !c.is_ascii_alphanumeric())
        .any(|word| SECRET_WORDS.contains(&word))
        || ["TOKEN", "SECRET", "PASSWORD", "APIKEY"]
            .iter()
            .any(|w| upper.contains(w))
}

/// Whether a value has a secret's form whatever its name: a known token prefix, a generated
/// key's shape, a URL with a password.
fn has_secret_form(value: &str) -> bool {
    has_known_form(value) || token_shaped(value)
}

/// A known token prefix, or a URL with a password (`scheme://user:password@host`).
fn has_known_form(value: &str) -> bool {
    TOKEN_PREFIXES.iter().any(|p| value.starts_with(p))
        || value.split_once("://").is_some_and(|(_, rest)| {
            let authority = rest.split('/').next().unwrap_or(rest);
            authority
                .split_once('@')
                .is_some_and(|(user, _)| user.contains(':'))
        })
}

/// A long run of letters and digits (and `-_.=+/`) mixing both, without spaces or a path's
/// slashes: what generated keys look like.
fn token_shaped(value: &str) -> bool {
    value.len() >= 24
        && !value.contains(char::is_whitespace)
        && !value.starts_with('/')
        && !value.contains("://")
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.=+/".contains(c))
        && value.chars().any(|c| c.is_ascii_digit())
        && value.chars().any(|c| c.is_ascii_alphabetic())
        && value.chars().filter(|c| *c == '/').count() <= 2
}

/// Whether `value` is a lone `${NAME}` reference.
fn is_reference(value: &str) -> bool {
    value.starts_with("${") && value.ends_with('}') && value.matches("${").count() == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_recognised_by_name_form_and_shape() {
        for (key, value) in [
            ("GITHUB_PERSONAL_ACCESS_TOKEN", "abc"),
            ("OPENAI_API_KEY", "x"),
            ("DB_PASSWORD", "hunter2"),
            ("ANYTHING", "ghp_0123456789abcdefghij"),
            ("ANYTHING", "sk-proj-xyz"),
            ("DATABASE_URL", "postgres://me:pw@db.example/prod"),
            ("BLOB", "a8F3kZ29qLm0Xw7Yt5Rb1Nc4Vd6Ue"),
        ] {
            assert!(is_secret(key, value), "{key}={value}");
        }
        for (key, value) in [
            ("LOG_LEVEL", "debug"),
            ("ALLOWED_DIR", "/srv/docs/2024/reports/quarterly"),
            ("KEYBOARD_LAYOUT", "us"),
            ("BASE_URL", "https://api.example.com/v1"),
            ("GITHUB_TOKEN", "${GITHUB_TOKEN}"),
            ("GITHUB_TOKEN", ""),
        ] {
            assert!(!is_secret(key, value), "{key}={value}");
        }
    }

    #[test]
    fn headers_name_their_secrets_and_authorization_always_is_one() {
        assert!(is_secret_header("Authorization", "Bearer abc.def"));
        assert!(is_secret_header("authorization", "whatever"));
        assert!(is_secret_header("X-Api-Key", "k"));
        assert!(is_secret_header("Cookie", "session=1"));
        assert!(!is_secret_header("X-Team", "blue"));
        assert!(!is_secret_header("Authorization", "${TOKEN}"));
    }

    #[test]
    fn secret_arguments_follow_secret_flags_or_have_a_tokens_form() {
        let argv: Vec<String> = [
            "-y",
            "@modelcontextprotocol/server-github",
            "--api-key",
            "abc",
            "--token=xyz",
            "--region",
            "eu",
            "ghp_0123456789abcdefghij",
            "mcp-server-postgres-2024-edition",
            "--password",
            "${PW}",
        ]
        .map(String::from)
        .into();
        assert_eq!(secret_arguments(&argv), [(3, 0), (4, 8), (7, 0)]);
    }
}
