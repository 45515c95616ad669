use mcp_plugin_sdk::{FilterInput, FilterVerdict, filter};

/// Two parameters: a filter takes its input only.
#[filter]
fn two(input: FilterInput, extra: u32) -> FilterVerdict {
    let _ = (input, extra);
    FilterVerdict::default()
}

/// Options: a filter takes none.
#[filter(name = "x")]
fn optioned(input: FilterInput) -> FilterVerdict {
    let _ = input;
    FilterVerdict::default()
}

fn main() {}
