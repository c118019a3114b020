//! Generates the gRPC server stubs from `proto/` with protox (no system `protoc`),
//! and KEDA's external scaler protocol from `server/proto/keda` (server and client:
//! the tests call it as KEDA would), and the store's statements from the `.sql`
//! files of each backend folder (`store_sql.rs`).
#[path = "store_sql.rs"]
mod store_sql;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    store_sql::generate()?;
    let files = [
        "taskbroker/v1/broker.proto",
        "taskbroker/v1/admin.proto",
        "taskbroker/v1/schedule.proto",
        "taskbroker/v1/event.proto",
        "taskbroker/v1/queue.proto",
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
    // sqlx::migrate! embeds the migrations: a new file must rebuild the server.
    println!("cargo:rerun-if-changed=../migrations");

    // google.rpc's error details (BadRequest, RetryInfo, QuotaFailure, ErrorInfo...),
    // served by reflection so a generic client (grpcurl) decodes the details of
    // an error status. Only the descriptor is needed: tonic-types has the types.
    let rpc = protox::compile(["google/rpc/error_details.proto"], ["proto"])?;
    std::fs::write(
        out.join("rpc_descriptor.bin"),
        prost::Message::encode_to_vec(&rpc),
    )?;
    println!("cargo:rerun-if-changed=proto/google");

    let keda = protox::compile(["externalscaler.proto"], ["proto/keda"])?;
    std::fs::write(
        out.join("externalscaler_descriptor.bin"),
        prost::Message::encode_to_vec(&keda),
    )?;
    tonic_prost_build::configure().compile_fds(keda)?;
    println!("cargo:rerun-if-changed=proto/keda");
    Ok(())
}
