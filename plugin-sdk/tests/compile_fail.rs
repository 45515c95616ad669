//! The macros' error messages, pinned: each file under `tests/ui/` must fail to compile with
//! exactly the errors in its `.stderr` snapshot. After changing a message on purpose, regenerate
//! with `TRYBUILD=overwrite cargo test -p mcp-plugin-sdk --test compile_fail` and review the diff.

#[test]
fn macro_misuse_is_a_compile_error_that_says_what_to_do() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}
