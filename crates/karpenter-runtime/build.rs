//! Records the compiler's version for `--version` and `*_build_info`
//! (the commit comes from `KARPENTER_COMMIT` at build time, as the image
//! build passes it).

fn main() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let version = std::process::Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "rustc unknown".to_owned());
    println!("cargo:rustc-env=KARPENTER_RUSTC_VERSION={version}");
    println!("cargo:rerun-if-env-changed=KARPENTER_COMMIT");
    println!("cargo:rerun-if-changed=build.rs");
}
