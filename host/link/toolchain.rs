//! Which toolchain the start-up ordering file (`startup-order.txt`) was made for, and which one a
//! build uses: shared by `host/build.rs`, which hands the file to the linker only for that toolchain,
//! and the `first_run` test, which checks the README's build placed the listed functions first.

use std::ffi::OsStr;
use std::process::Command;

/// The toolchain named in the ordering file's header (`# rustc <release> <commit> <target>`).
pub fn made_for(order: &str) -> Option<&str> {
    order
        .lines()
        .find_map(|l| l.strip_prefix("# rustc "))
        .map(str::trim)
}

/// `<release> <commit> <target>` of `rustc` (from `rustc -vV`) building for `target` (its own host
/// when `None`).
pub fn of(rustc: &OsStr, target: Option<&str>) -> Option<String> {
    let out = Command::new(rustc).arg("-vV").output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    Some(format!(
        "{} {} {}",
        field("release:")?,
        field("commit-hash:")?,
        target.or_else(|| field("host:"))?
    ))
}
