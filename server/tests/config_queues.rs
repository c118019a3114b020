//! `[queues.NAME]` tables of a configuration file, on every store: a broker
//! started from a file whose queue sets a `bucket` and a `payload_schema` (or
//! `payload_schema_file`) answers them in GetQueue and refuses a payload the
//! schema does not match; an operator's UpdateQueue outlives a restart with
//! the same file.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::*;
use taskbroker_client::pb;
use taskbroker_client::pb::admin_service_client::AdminServiceClient;
use tonic::Code;
use tonic::transport::Channel;

const ORDER: &str =
    r#"{"type": "object", "required": ["amount"], "properties": {"amount": {"type": "integer"}}}"#;

fn temp_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "tb-config-queues-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The settings `taskbroker serve --config FILE` starts with.
fn settings_of(file: &Path) -> taskbroker_server::service::Settings {
    let args = taskbroker_server::config::ServeArgs {
        config: Some(file.to_path_buf()),
        ..Default::default()
    };
    let config = args.load().expect("the file loads");
    config.validate().expect("the file is valid").app.settings
}

/// A file with `orders` (bucket, schema file) and `notes` (inline schema).
fn config_file(dir: &Path) -> PathBuf {
    let schema = dir.join("order.schema.json");
    std::fs::write(&schema, format!("{ORDER}\n")).unwrap();
    let file = dir.join("taskbroker.toml");
    std::fs::write(
        &file,
        format!(
            "[queues.orders]\nbucket = \"partner-api\"\npayload_schema_file = {:?}\n\n\
             [queues.notes]\npayload_schema = '{{\"type\": \"string\"}}'\n",
            schema.display().to_string()
        ),
    )
    .unwrap();
    file
}

async fn config_of(admin: &mut AdminServiceClient<Channel>, queue: &str) -> pb::QueueConfig {
    admin
        .get_queue(pb::GetQueueRequest { name: queue.into() })
        .await
        .expect("get queue")
        .into_inner()
        .queue
        .and_then(|q| q.config)
        .expect("config")
}

fn with_payload(queue: &str, payload: &str) -> pb::TaskSpec {
    pb::TaskSpec {
        payload: payload.as_bytes().to_vec(),
        ..spec(queue)
    }
}

async fn a_configured_schema_and_bucket_apply_from_the_start(b: Backend) {
    let Some(db) = test_db(b).await else {
        return;
    };
    let db = Arc::new(db);
    let file = config_file(&temp_dir());
    let opts = || Options {
        settings: settings_of(&file),
        ..Options::default()
    };
    let app = spawn_on(db.clone(), opts()).await;
    let (mut admin, mut broker) = (app.admin().await, app.broker().await);
    let orders = config_of(&mut admin, "orders").await;
    assert_eq!(orders.payload_schema, ORDER, "the file's text, trimmed");
    assert_eq!(orders.bucket, "partner-api");
    assert_eq!(
        config_of(&mut admin, "notes").await.payload_schema,
        r#"{"type": "string"}"#
    );

    let refused = broker
        .submit(pb::SubmitRequest {
            tasks: vec![with_payload("orders", r#"{"amount": "lots"}"#)],
        })
        .await
        .expect_err("the schema refuses it");
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    assert!(
        refused.message().contains("tasks[0].payload") && refused.message().contains("/amount"),
        "{}",
        refused.message()
    );
    let refused = broker
        .submit(pb::SubmitRequest {
            tasks: vec![with_payload("notes", "not json")],
        })
        .await
        .expect_err("not JSON");
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    let id = submit_one(&mut broker, with_payload("orders", r#"{"amount": 12}"#)).await;
    assert_eq!(get(&mut admin, &id).await.bucket, "partner-api");

    // An operator's change wins over the file, across a restart with it.
    admin
        .update_queue(pb::UpdateQueueRequest {
            name: "orders".into(),
            config: Some(pb::QueueConfig {
                payload_schema: "true".into(),
                ..Default::default()
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["payload_schema".into()],
            }),
        })
        .await
        .expect("update queue");
    app.shutdown().await;
    let app = spawn_on(db, opts()).await;
    let (mut admin, mut broker) = (app.admin().await, app.broker().await);
    let orders = config_of(&mut admin, "orders").await;
    assert_eq!(orders.payload_schema, "true");
    assert_eq!(orders.bucket, "partner-api");
    submit_one(&mut broker, with_payload("orders", r#"{"amount": "lots"}"#)).await;
    app.shutdown().await;
}

all_backends!(a_configured_schema_and_bucket_apply_from_the_start);
