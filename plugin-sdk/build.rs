//! Records the target triple so a plugin's build fingerprint can name it.
fn main() {
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".to_owned());
    println!("cargo:rustc-env=MCP_SDK_TARGET={target}");
    println!("cargo:rerun-if-changed=build.rs");
}
