# Sourced by the other scripts: makes sure what the project needs is on the
# machine, installing what is missing. Nothing here needs to be done by hand.

ensure_rust() {
    if ! command -v cargo >/dev/null 2>&1; then
        if [ -x "$HOME/.cargo/bin/cargo" ]; then
            export PATH="$HOME/.cargo/bin:$PATH"
        else
            echo "setup: no Rust toolchain found (cargo); install rustup, then rerun" >&2
            exit 1
        fi
    fi
    # rust-toolchain.toml pins the version; rustup installs it (and rustfmt,
    # clippy) on first use if it is missing.
    cargo --version >/dev/null
}

# Python packages the cross-language tests use.
ensure_python_packages() {
    local python="${PYTHON:-python3}"
    if ! command -v "$python" >/dev/null 2>&1; then
        echo "setup: installing python3" >&2
        apt-get update -qq && apt-get install -y -qq python3 python3-pip >/dev/null
    fi
    if ! "$python" -c 'import grpc_tools, grpc_reflection' >/dev/null 2>&1; then
        echo "setup: installing grpcio-tools and grpcio-reflection from PyPI" >&2
        "$python" -m pip install --quiet --disable-pip-version-check grpcio-tools grpcio-reflection
    fi
}

# cargo-nextest runs the tests; plain `cargo test` if it cannot be had.
nextest_available() {
    if cargo nextest --version >/dev/null 2>&1; then
        return 0
    fi
    echo "setup: installing cargo-nextest" >&2
    cargo install --locked --quiet cargo-nextest >/dev/null 2>&1
}
