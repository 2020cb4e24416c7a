//! Builds the provider plugins under `plugins/` for `wasm32-wasip2` (installing the target
//! with rustup when it is missing), so that the `bulkhead` binary can bundle them and the tests
//! can load them. Their directory is passed to the crate as `BULKHEAD_PLUGINS_DIR`.
//!
//! The plugins are a workspace of their own with their own target directory
//! (`plugins/target`); this script runs a nested `cargo build` on it, cleaned of the outer
//! build's flags (a host `RUSTFLAGS` or clippy wrapper must not leak into a Wasm build).

use std::path::Path;
use std::process::Command;

const TARGET: &str = "wasm32-wasip2";

fn main() {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo");
    let root = Path::new(&manifest_dir).join("../..");
    let plugins = root.join("plugins");
    let sdk = root.join("sdk");
    println!(
        "cargo:rerun-if-changed={}",
        plugins.join("Cargo.toml").display()
    );
    println!(
        "cargo:rerun-if-changed={}",
        plugins.join("Cargo.lock").display()
    );
    for entry in std::fs::read_dir(&plugins).expect("plugins/ exists") {
        let path = entry.expect("readable plugins/").path();
        if path.join("Cargo.toml").exists() {
            println!(
                "cargo:rerun-if-changed={}",
                path.join("Cargo.toml").display()
            );
            println!("cargo:rerun-if-changed={}", path.join("src").display());
        }
    }
    for watched in ["Cargo.toml", "src", "wit"] {
        println!("cargo:rerun-if-changed={}", sdk.join(watched).display());
    }

    target_install();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let target_dir = plugins.join("target");
    let output = Command::new(cargo)
        .args(["build", "--release", "--target", TARGET, "--manifest-path"])
        .arg(plugins.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", &target_dir)
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("RUSTC_WRAPPER")
        .env_remove("CARGO_PRIMARY_PACKAGE")
        .output()
        .expect("cargo runs");
    if !output.status.success() {
        panic!(
            "building the Wasm plugins (cargo build --release --target {TARGET} --manifest-path plugins/Cargo.toml) failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let dir = target_dir.join(TARGET).join("release");
    let dir = dir.canonicalize().unwrap_or(dir);
    println!("cargo:rustc-env=BULKHEAD_PLUGINS_DIR={}", dir.display());
}

/// Installs the Wasm target when rustup does not list it as installed.
fn target_install() {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output();
    let has_target = installed
        .as_ref()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains(TARGET));
    if has_target {
        return;
    }
    let status = Command::new("rustup")
        .args(["target", "add", TARGET])
        .status();
    assert!(
        status.is_ok_and(|status| status.success()),
        "the {TARGET} target is missing and `rustup target add {TARGET}` failed: install rustup's {TARGET} target, then build again"
    );
}
