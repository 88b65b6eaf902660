# gpugate's container image: the gpugate binary on a distroless base.
#
#   docker build -t REGISTRY/gpugate:TAG .
#
# Not built in CI: the project's machines have no container engine. See
# docs/install.md, "Building the image".

# Build stage. rust:1 follows the latest stable Rust (Cargo.toml asks for
# 1.85 or later); bookworm matches the runtime's Debian 12, so the binary
# links against the same glibc.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
# --locked: build exactly the dependency versions in Cargo.lock.
RUN cargo build --release --locked --bin gpugate \
 && cp target/release/gpugate /gpugate

# Runtime stage: glibc and libgcc, no shell, no package manager.
# The nonroot tag runs as uid/gid 65532, as deploy/base's securityContext
# expects (runAsNonRoot with runAsUser 65532).
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /gpugate /gpugate
USER 65532:65532
ENTRYPOINT ["/gpugate"]
