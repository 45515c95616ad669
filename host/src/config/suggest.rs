//! "Did you mean": the closest of a few known names to one that is not known (a tool, a key).

/// The candidate closest to `word`, when it is close enough to be a likely typo: an edit distance
/// of at most a third of the word's length (at least 1), or one is the start of the other.
pub fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let lower = word.to_lowercase();
    let limit = (word.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .filter(|c| *c != word)
        .map(|c| {
            let other = c.to_lowercase();
            // A name cut short or run on (`call_timeout` for `call_timeout_secs`) is close too.
            let prefix = lower.len().min(other.len()) >= 4
                && (other.starts_with(&lower) || lower.starts_with(&other));
            let distance = strsim::damerau_levenshtein(&lower, &other);
            (if prefix { distance.min(1) } else { distance }, c)
        })
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, c)| (*d, c.len()))
        .map(|(_, c)| c)
}

/// serde's "unknown field `x`, expected one of `a`, `b`" (or "expected `a`"), with "(did you mean
/// `a`?)" after the unknown name when one of them is close.
pub(super) fn with_suggestion(message: String) -> String {
    let Some(rest) = message.strip_prefix("unknown field `") else {
        return message;
    };
    let Some((unknown, expected)) = rest.split_once('`') else {
        return message;
    };
    let known: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    match did_you_mean(unknown, known) {
        Some(close) => format!("unknown field `{unknown}` (did you mean `{close}`?){expected}"),
        None => message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_near_name_is_suggested_and_a_far_one_is_not() {
        let tools = ["greet", "echo", "whoami"];
        assert_eq!(did_you_mean("gret", tools), Some("greet"));
        assert_eq!(did_you_mean("Echo", tools), Some("echo"));
        assert_eq!(did_you_mean("calendar", tools), None);
        let message = "unknown field `call_timeout`, expected one of `call_timeout_secs`, \
                       `max_call_depth`"
            .to_owned();
        assert!(with_suggestion(message).starts_with(
            "unknown field `call_timeout` (did you mean `call_timeout_secs`?), expected"
        ),);
        let far = "unknown field `zzz`, expected `path`".to_owned();
        assert_eq!(with_suggestion(far.clone()), far);
    }
}
