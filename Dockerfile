# One image with the four service binaries the chart runs (adapter,
# scheduler, provider-aws, provider-kwok), each pod choosing its own with
# `command:`.
#
# The build stage needs no network: the crates come from vendor/, which
# `cargo vendor` fills from Cargo.lock beforehand. scripts/build-image does
# both, and builds with `docker build --network=none`.
#
#   cargo vendor --locked vendor ──▶ build: cargo build --release --offline
#                                       └──▶ distroless/cc, non-root: /usr/local/bin/<service>

ARG RUST_IMAGE=docker.io/library/rust:1.95.0-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY . .
# The toolchain is the image's own (rust-toolchain.toml would ask rustup
# for components over the network), the crates are vendor/'s.
RUN rm -f rust-toolchain.toml \
    && { test -d vendor || { echo "vendor/ is missing: run scripts/build-image (or cargo vendor --locked vendor)" >&2; exit 1; }; } \
    && mkdir -p .cargo \
    && printf '[source.crates-io]\nreplace-with = "vendored-sources"\n\n[source.vendored-sources]\ndirectory = "vendor"\n' > .cargo/config.toml
# The commit --version and karpenter_build_info report (scripts/build-image
# passes it).
ARG KARPENTER_COMMIT=unknown
RUN cargo build --release --offline --locked \
        --bin adapter --bin scheduler --bin provider-aws --bin provider-kwok \
    && mkdir /out \
    && for bin in adapter scheduler provider-aws provider-kwok; do cp "target/release/$bin" /out/; done

# glibc and libgcc, no shell, user 65532 (the chart's runAsUser).
FROM ${RUNTIME_IMAGE}
COPY --from=build /out/ /usr/local/bin/
USER 65532:65532
EXPOSE 50051 8080
CMD ["scheduler"]
