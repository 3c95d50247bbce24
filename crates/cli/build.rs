//! Build information for `bursar --version` and `bursar_build_info`: the commit the binary was built
//! from (`BURSAR_COMMIT` when the environment gives it, as a package build from a tarball would;
//! else `git rev-parse`; else `unknown`).

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=BURSAR_COMMIT");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for f in [".git/HEAD", ".git/index"] {
        let p = root.join(f);
        if p.exists() {
            println!("cargo:rerun-if-changed={}", p.display());
        }
    }
    let commit = std::env::var("BURSAR_COMMIT").ok().filter(|c| !c.trim().is_empty()).unwrap_or_else(|| {
        Command::new("git")
            .args(["-C", &root.display().to_string(), "rev-parse", "--short=12", "HEAD"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_else(|| "unknown".to_owned())
    });
    let dirty = Command::new("git")
        .args(["-C", &root.display().to_string(), "status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .is_some_and(|o| !o.stdout.is_empty());
    let commit = format!("{commit}{}", if dirty { "-dirty" } else { "" });
    // What every build of this binary is built with (the workspace has no optional features yet).
    let features = "wasm,cluster,jwt,munge,sqlite";
    println!("cargo:rustc-env=BURSAR_COMMIT={commit}");
    println!("cargo:rustc-env=BURSAR_FEATURES={features}");
    println!(
        "cargo:rustc-env=BURSAR_VERSION_LINE={} (commit {commit}; {})",
        env!("CARGO_PKG_VERSION"),
        features.replace(',', ", ")
    );
}
