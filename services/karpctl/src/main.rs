//! `karpctl`: see the library documentation.

use std::process::ExitCode;

fn main() -> ExitCode {
    karpctl::cli::main(std::env::args_os())
}
