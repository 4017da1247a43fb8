//! What a binary was built from: its version, the commit (from
//! `KARPENTER_COMMIT` at build time, `unknown` otherwise), the compiler and
//! the architecture. `--version` prints it, and every service exports it as
//! `<prefix>_build_info` (the adapter's is Karpenter's `karpenter_build_info`),
//! a gauge of 1 with upstream's labels: `goversion` carries the Rust
//! compiler's version, so that dashboards grouping by it keep working.

use std::sync::OnceLock;

use prometheus_client::encoding::EncodeLabelSet;

/// The workspace version every binary carries.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The commit the binary was built from, or `unknown`.
pub fn commit() -> &'static str {
    match option_env!("KARPENTER_COMMIT") {
        Some(commit) if !commit.trim().is_empty() => commit,
        _ => "unknown",
    }
}

/// The compiler that built the binary (`rustc 1.95.0 (...)`).
pub const RUSTC: &str = env!("KARPENTER_RUSTC_VERSION");

/// What `--version` prints after the binary's name.
pub fn version() -> &'static str {
    static LINE: OnceLock<String> = OnceLock::new();
    LINE.get_or_init(|| {
        format!(
            "{VERSION} (commit {}, {RUSTC}, {})",
            commit(),
            std::env::consts::ARCH
        )
    })
}

/// The labels of `*_build_info`, named as Karpenter's.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct BuildLabels {
    version: String,
    goversion: String,
    goarch: String,
    commit: String,
}

impl BuildLabels {
    pub(crate) fn of_this_binary() -> Self {
        Self {
            version: VERSION.to_owned(),
            goversion: RUSTC.to_owned(),
            goarch: std::env::consts::ARCH.to_owned(),
            commit: commit().to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    /// Upstream's operator test: the build-info gauge is there, at 1, with
    /// the labels `version`, `goversion`, `goarch` and `commit`.
    #[test]
    fn every_registry_exports_its_build_info() {
        let metrics = crate::Metrics::new("karpenter");
        let text = metrics.encode().expect("encodes");
        let line = text
            .lines()
            .find(|l| l.starts_with("karpenter_build_info{"))
            .unwrap_or_else(|| panic!("no karpenter_build_info in\n{text}"));
        for label in ["version=\"", "goversion=\"rustc ", "goarch=\"", "commit=\""] {
            assert!(line.contains(label), "{label} missing: {line}");
        }
        assert!(line.ends_with(" 1"), "{line}");
        assert!(
            super::version().starts_with(super::VERSION),
            "{}",
            super::version()
        );
    }
}
