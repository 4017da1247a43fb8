//! The settings rows of the drop-in coverage page against the environment
//! variables `provider-aws` takes (the check is shared by every service).

const SERVICE: &str = "provider-aws";
const BINARY: &str = env!("CARGO_BIN_EXE_provider-aws");

include!("../../../integration-tests/support/setting_coverage.rs");
