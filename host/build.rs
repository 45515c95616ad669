//! Build script: lays out the `mcp-host` binary's start-up code together.
//!
//! `link/startup-order.txt` lists, by their mangled names, the functions the host runs while it
//! starts and answers its first requests (made by `link/update-startup-order.py`). Handed to the
//! linker as a symbol ordering file, they are placed first in `.text`: a start then touches about
//! 2 MB of the binary's code instead of faulting in pages spread over all 14 MB of it, which is less
//! resident memory and fewer page faults. It changes nothing the program does.
//!
//! Symbol names carry a hash of each crate's version, features and compiler, so the list applies
//! only to release builds by the rustc and target written in its header, linked by that rustc's own
//! linker (rust-lld, the default on x86_64 Linux since Rust 1.90); any other build links as before.
//! The linker reads a copy in `OUT_DIR`: cargo keeps this script's output for as long as the file is
//! unchanged, also for another checkout sharing the target directory, so the path it names must live
//! as long as the target directory does.

use std::path::Path;

#[path = "link/toolchain.rs"]
mod toolchain;

const ORDER: &str = "link/startup-order.txt";

fn main() {
    println!("cargo:rerun-if-changed={ORDER}");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=link/toolchain.rs");
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    println!("cargo:rerun-if-env-changed=CARGO_ENCODED_RUSTFLAGS");
    if let Some(file) = startup_order() {
        println!("cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={file}");
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
}

/// The path of the ordering file's copy, when this build is the one it was made for.
fn startup_order() -> Option<String> {
    let env = |name: &str| std::env::var(name).unwrap_or_default();
    // Release builds only, linked by rustc's default linker (a configured linker or linker flags
    // may not be lld).
    let default_linker = std::env::var_os("RUSTC_LINKER").is_none()
        && !env("CARGO_ENCODED_RUSTFLAGS").contains("linker");
    if env("PROFILE") != "release" || !default_linker {
        return None;
    }
    let path = Path::new(&env("CARGO_MANIFEST_DIR")).join(ORDER);
    let text = std::fs::read_to_string(&path).ok()?;
    let this_build = toolchain::of(&std::env::var_os("RUSTC")?, Some(&env("TARGET")))?;
    if toolchain::made_for(&text)? != this_build {
        return None;
    }
    let copy = Path::new(&std::env::var_os("OUT_DIR")?).join("startup-order.txt");
    std::fs::write(&copy, &text).ok()?;
    Some(copy.display().to_string())
}
