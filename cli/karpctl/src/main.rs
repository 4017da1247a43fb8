//! `karpctl`: see the library documentation.

use std::process::ExitCode;

// A `plan` of tens of thousands of pods makes and frees millions of small
// JSON and Kubernetes objects; mimalloc handles that churn far faster than
// the system allocator (see BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    karpctl::cli::main(std::env::args_os())
}
