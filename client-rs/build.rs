//! Generates the gRPC client from `proto/` with protox, so no system `protoc` is needed.
//! `client-rs/proto` links to the repository's `proto/`; `cargo package` copies the files in, so
//! the published crate builds on its own.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "taskbroker/v1/broker.proto",
        "taskbroker/v1/admin.proto",
        "taskbroker/v1/schedule.proto",
        "taskbroker/v1/event.proto",
        "taskbroker/v1/queue.proto",
    ];
    let fds = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .build_server(false)
        .compile_fds(fds)?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
