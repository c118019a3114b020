# syntax=docker/dockerfile:1
# The taskbroker image: `docker build -t taskbroker:0.1.0 .` from the repository root
# (docs/deploy.md). BuildKit (the default builder) is needed for the cache mounts.

FROM rust:1-slim-bookworm AS build
WORKDIR /src
# Only what the server build reads; .dockerignore keeps the rest out of the context.
COPY Cargo.toml Cargo.lock ./
COPY proto proto
COPY migrations migrations
COPY server server
COPY client-rs client-rs
COPY bench bench
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p taskbroker-server --bin taskbroker \
 && install -D -m 0755 target/release/taskbroker /out/taskbroker \
 && mkdir -p /out/data

# glibc and libgcc, no shell, CA certificates; matches the builder's Debian 12.
FROM gcr.io/distroless/cc-debian12
COPY --from=build /out/taskbroker /usr/local/bin/taskbroker
# SQLite lives here (sqlite:///data/taskbroker.db); mount a volume over it.
COPY --from=build --chown=10001:10001 /out/data /data
USER 10001:10001
WORKDIR /data
ENV TASKBROKER_LISTEN=0.0.0.0:50051 \
    TASKBROKER_METRICS_LISTEN=0.0.0.0:9090 \
    TASKBROKER_DATABASE_URL=sqlite:///data/taskbroker.db
VOLUME ["/data"]
EXPOSE 50051 9090
ENTRYPOINT ["/usr/local/bin/taskbroker"]
CMD ["serve"]
