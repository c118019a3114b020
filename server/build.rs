//! Generates the gRPC server stubs from `proto/` with protox (no system `protoc`).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "taskbroker/v1/broker.proto",
        "taskbroker/v1/admin.proto",
        "taskbroker/v1/schedule.proto",
    ];
    let fds = protox::compile(files, ["../proto"])?;
    // The encoded descriptors serve gRPC reflection.
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("taskbroker_descriptor.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;
    tonic_prost_build::configure()
        .build_client(false)
        .compile_fds(fds)?;
    println!("cargo:rerun-if-changed=../proto");
    Ok(())
}
