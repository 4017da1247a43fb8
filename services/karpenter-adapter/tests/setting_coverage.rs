//! The settings rows of the drop-in coverage page against the environment
//! variables `adapter` takes (the check is shared by every service).

const SERVICE: &str = "adapter";
const BINARY: &str = env!("CARGO_BIN_EXE_adapter");

include!("../../../integration-tests/support/setting_coverage.rs");
