//! Repeated benchmark runs: `MCP_BENCH_RUNS` whole runs, reported as the median of each figure.

// Each benchmark uses part of this module.
#![allow(dead_code)]

/// How many whole runs to make (`MCP_BENCH_RUNS`, default 1).
pub fn runs() -> usize {
    std::env::var("MCP_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n: &usize| n > 0)
        .unwrap_or(1)
}

/// A row cut into numbers and the text between them.
#[derive(Debug, PartialEq)]
enum Token<'a> {
    Number(&'a str),
    Text(&'a str),
}

fn tokens(row: &str) -> Vec<Token<'_>> {
    let bytes = row.as_bytes();
    let (mut out, mut start, mut i) = (Vec::new(), 0, 0);
    while i < bytes.len() {
        if bytes[i].is_ascii_digit() {
            let begin = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            if i + 1 < bytes.len() && bytes[i] == b'.' && bytes[i + 1].is_ascii_digit() {
                i += 1;
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
            }
            if start < begin {
                out.push(Token::Text(&row[start..begin]));
            }
            out.push(Token::Number(&row[begin..i]));
            start = i;
        } else {
            i += 1;
        }
    }
    if start < row.len() {
        out.push(Token::Text(&row[start..]));
    }
    out
}

/// The rows of several runs of the same table, each number replaced by its median over the runs
/// and each other difference (a verdict such as `met` / `**missed**`) by the most common text —
/// which, for an odd number of runs and a verdict that is a threshold on a figure of its row, is
/// the verdict of the median figure. A row whose shape differs between runs is taken from the
/// middle run.
pub fn median_rows(runs: &[Vec<String>]) -> Vec<String> {
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    if runs.len() == 1 {
        return first.clone();
    }
    (0..first.len())
        .map(|r| {
            let rows: Vec<&str> = runs
                .iter()
                .map(|run| run.get(r).map_or("", String::as_str))
                .collect();
            let cut: Vec<Vec<Token>> = rows.iter().map(|row| tokens(row)).collect();
            let same_shape = cut.iter().all(|t| {
                t.len() == cut[0].len()
                    && t.iter().zip(&cut[0]).all(|(a, b)| {
                        matches!(
                            (a, b),
                            (Token::Number(_), Token::Number(_)) | (Token::Text(_), Token::Text(_))
                        )
                    })
            });
            if !same_shape {
                return rows[rows.len() / 2].to_owned();
            }
            (0..cut[0].len())
                .map(|k| median_token(cut.iter().map(|t| &t[k])))
                .collect()
        })
        .collect()
}

fn median_token<'a>(column: impl Iterator<Item = &'a Token<'a>>) -> String {
    let column: Vec<&str> = column
        .map(|t| match t {
            Token::Number(s) | Token::Text(s) => *s,
        })
        .collect();
    if column.iter().all(|s| *s == column[0]) {
        return column[0].to_owned();
    }
    if column[0].as_bytes()[0].is_ascii_digit() {
        let decimals = column
            .iter()
            .map(|s| s.split_once('.').map_or(0, |(_, d)| d.len()))
            .max()
            .unwrap_or(0);
        let mut values: Vec<f64> = column.iter().filter_map(|s| s.parse().ok()).collect();
        values.sort_by(f64::total_cmp);
        return format!("{:.*}", decimals, values[values.len() / 2]);
    }
    // The most common text (the first of equally common ones).
    column
        .iter()
        .max_by_key(|s| {
            (
                column.iter().filter(|o| o == s).count(),
                std::cmp::Reverse(column.iter().position(|o| o == *s)),
            )
        })
        .map_or_else(String::new, |s| (*s).to_owned())
}
