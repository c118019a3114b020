//! Payload schemas on every store, over real gRPC: a queue's `payload_schema`
//! refuses payloads that do not match it (naming the task and the JSON path
//! of the first error) on every submit path, UpdateQueue refuses schemas that
//! are not valid or too large or need a remote document, and a change of the
//! schema leaves the tasks already stored alone.

mod common;

use std::time::Duration;

use common::*;
use taskbroker_client::pb;
use taskbroker_client::pb::admin_service_client::AdminServiceClient;
use taskbroker_client::pb::broker_service_client::BrokerServiceClient;
use tonic::Code;
use tonic::transport::Channel;

const ORDER: &str = r#"{"type":"object","required":["amount"],
  "properties":{"amount":{"type":"integer"},"note":{"type":"string"}}}"#;

async fn set_schema(
    admin: &mut AdminServiceClient<Channel>,
    queue: &str,
    schema: &str,
) -> Result<pb::Queue, tonic::Status> {
    admin
        .update_queue(pb::UpdateQueueRequest {
            name: queue.into(),
            config: Some(pb::QueueConfig {
                payload_schema: schema.into(),
                ..Default::default()
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["payload_schema".into()],
            }),
        })
        .await
        .map(|r| r.into_inner().queue.expect("queue"))
}

async fn schema_of(admin: &mut AdminServiceClient<Channel>, queue: &str) -> String {
    admin
        .get_queue(pb::GetQueueRequest { name: queue.into() })
        .await
        .expect("get queue")
        .into_inner()
        .queue
        .and_then(|q| q.config)
        .expect("config")
        .payload_schema
}

fn with_payload(queue: &str, payload: &[u8]) -> pb::TaskSpec {
    pb::TaskSpec {
        payload: payload.to_vec(),
        ..spec(queue)
    }
}

async fn refused(c: &mut BrokerServiceClient<Channel>, tasks: Vec<pb::TaskSpec>) -> tonic::Status {
    c.submit(pb::SubmitRequest { tasks })
        .await
        .expect_err("submit refused")
}

async fn a_payload_must_match_its_queue_schema(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let (mut admin, mut c) = (app.admin().await, app.broker().await);
    let q = set_schema(&mut admin, "orders", ORDER)
        .await
        .expect("set schema");
    assert_eq!(q.config.expect("config").payload_schema, ORDER);
    // Stored with the queue's settings: a reload from the database keeps it.
    app.service().queues_reload().await.expect("reload");
    assert_eq!(schema_of(&mut admin, "orders").await, ORDER);
    submit(&mut c, vec![with_payload("orders", br#"{"amount": 3}"#)]).await;
    let e = refused(&mut c, vec![with_payload("orders", br#"{"amount": "x"}"#)]).await;
    assert_eq!(e.code(), Code::InvalidArgument);
    assert_eq!(bad_field(&e).as_deref(), Some("tasks[0].payload"));
    assert_eq!(
        e.message(),
        r#"tasks[0].payload: /amount: "x" is not of type "integer""#
    );
    let e = refused(&mut c, vec![with_payload("orders", b"amount=3")]).await;
    assert_eq!(e.code(), Code::InvalidArgument);
    assert_eq!(bad_field(&e).as_deref(), Some("tasks[0].payload"));
    assert!(e.message().contains("is not JSON"), "{}", e.message());
    // Other queues keep opaque payloads.
    submit(&mut c, vec![with_payload("other", b"amount=3")]).await;
    // Clearing the schema makes the queue's payloads opaque again.
    set_schema(&mut admin, "orders", "").await.expect("clear");
    assert_eq!(schema_of(&mut admin, "orders").await, "");
    submit(&mut c, vec![with_payload("orders", b"amount=3")]).await;
    app.shutdown().await;
}

async fn a_batch_with_one_bad_payload_writes_nothing(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let (mut admin, mut c) = (app.admin().await, app.broker().await);
    set_schema(&mut admin, "orders", ORDER)
        .await
        .expect("set schema");
    let mut batch: Vec<pb::TaskSpec> = (0..5)
        .map(|i| with_payload("orders", format!(r#"{{"amount": {i}}}"#).as_bytes()))
        .collect();
    batch[3] = with_payload("orders", br#"{"amount": 1, "note": 7}"#);
    // A fan-out spec in the batch: its copies are written only with the rest.
    batch.push(pb::TaskSpec {
        fanout: Some(pb::Fanout {
            copies: 3,
            ..Default::default()
        }),
        ..with_payload("orders", br#"{"amount": 9}"#)
    });
    let e = refused(&mut c, batch).await;
    assert_eq!(e.code(), Code::InvalidArgument);
    assert_eq!(bad_field(&e).as_deref(), Some("tasks[3].payload"));
    assert!(
        e.message().contains(r#"/note: 7 is not of type "string""#),
        "{}",
        e.message()
    );
    assert!(lease(&mut c, "orders", 100).await.is_empty());
    // A fan-out spec whose payload fails is refused whole.
    let e = refused(
        &mut c,
        vec![pb::TaskSpec {
            fanout: Some(pb::Fanout {
                copies: 3,
                ..Default::default()
            }),
            ..with_payload("orders", b"{}")
        }],
    )
    .await;
    assert_eq!(bad_field(&e).as_deref(), Some("tasks[0].payload"));
    assert!(
        e.message().contains("tasks[0].payload: /: "),
        "{}",
        e.message()
    );
    assert!(lease(&mut c, "orders", 100).await.is_empty());
    app.shutdown().await;
}

async fn update_queue_refuses_bad_schemas_and_changes_nothing(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let mut admin = app.admin().await;
    set_schema(&mut admin, "orders", ORDER)
        .await
        .expect("set schema");
    for bad in ["{", r#"{"type": "nope"}"#, "[1]", r#"{"minimum": "x"}"#] {
        let e = set_schema(&mut admin, "orders", bad).await.expect_err(bad);
        assert_eq!(e.code(), Code::InvalidArgument, "{bad}");
        assert_eq!(
            bad_field(&e).as_deref(),
            Some("config.payload_schema"),
            "{bad}"
        );
        assert!(
            e.message().starts_with("config.payload_schema: "),
            "{}",
            e.message()
        );
        assert!(!e.message().contains('\n'), "{}", e.message());
    }
    // Remote and file references are never fetched: the schema is refused.
    for r in ["https://example.com/order.json", "file:///etc/passwd"] {
        let schema = format!(r#"{{"$ref": "{r}"}}"#);
        let e = set_schema(&mut admin, "orders", &schema)
            .await
            .expect_err(r);
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(e.message().contains("is not fetched"), "{}", e.message());
    }
    // Over the size limit: a valid schema padded past 64 KiB.
    let huge = format!(
        r#"{{"type":"object","description":"{}"}}"#,
        "x".repeat(64 * 1024)
    );
    let e = set_schema(&mut admin, "orders", &huge)
        .await
        .expect_err("huge");
    assert_eq!(e.code(), Code::ResourceExhausted);
    assert_eq!(bad_field(&e).as_deref(), Some("config.payload_schema"));
    assert!(e.message().contains("65536"), "{}", e.message());
    // A local $ref resolves.
    let local =
        r##"{"$defs":{"n":{"type":"integer"}},"properties":{"amount":{"$ref":"#/$defs/n"}}}"##;
    set_schema(&mut admin, "local", local)
        .await
        .expect("local ref");
    assert_eq!(schema_of(&mut admin, "orders").await, ORDER);
    app.shutdown().await;
}

async fn a_schema_change_leaves_stored_tasks_alone(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let (mut admin, mut c) = (app.admin().await, app.broker().await);
    let before = submit(
        &mut c,
        vec![
            with_payload("orders", b"not json at all"),
            with_payload("orders", br#"{"amount": "x"}"#),
        ],
    )
    .await;
    set_schema(&mut admin, "orders", ORDER)
        .await
        .expect("set schema");
    let leased = lease(&mut c, "orders", 10).await;
    let mut ids: Vec<String> = leased.iter().map(|t| t.task_id.clone()).collect();
    ids.sort();
    let mut want = before.clone();
    want.sort();
    assert_eq!(ids, want);
    for t in &leased {
        c.complete(pb::CompleteRequest {
            task_id: t.task_id.clone(),
            lease_token: t.lease_token.clone(),
            ..Default::default()
        })
        .await
        .expect("complete");
    }
    for id in &before {
        let t = get(&mut admin, id).await;
        assert_eq!(state(&t), pb::TaskState::Succeeded);
    }
    app.shutdown().await;
}

async fn hostile_payloads_are_refused_without_harm(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let (mut admin, mut c) = (app.admin().await, app.broker().await);
    let nested =
        r##"{"$defs":{"n":{"type":"array","items":{"$ref":"#/$defs/n"}}},"$ref":"#/$defs/n"}"##;
    set_schema(&mut admin, "deep", nested)
        .await
        .expect("set schema");
    let deep = format!("{}{}", "[".repeat(200_000), "]".repeat(200_000));
    let e = refused(&mut c, vec![with_payload("deep", deep.as_bytes())]).await;
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("is not JSON"), "{}", e.message());
    assert!(e.message().len() < 600, "{}", e.message().len());
    // The largest payload the queue takes (1 MiB by default) is checked whole.
    set_schema(
        &mut admin,
        "big",
        r#"{"type":"string","maxLength":2000000}"#,
    )
    .await
    .expect("set schema");
    let max = 1 << 20;
    let big = format!("\"{}\"", "x".repeat(max - 2));
    submit(&mut c, vec![with_payload("big", big.as_bytes())]).await;
    let wrong = format!("[\"{}\"]", "x".repeat(max - 4));
    let e = refused(&mut c, vec![with_payload("big", wrong.as_bytes())]).await;
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().len() < 600, "{}", e.message().len());
    let over = format!("\"{}\"", "x".repeat(max - 1));
    let e = refused(&mut c, vec![with_payload("big", over.as_bytes())]).await;
    assert_eq!(e.code(), Code::ResourceExhausted);
    app.shutdown().await;
}

fn every_second(id: &str, payload: &[u8]) -> pb::Schedule {
    pb::Schedule {
        schedule_id: id.into(),
        spec: Some(pb::ScheduleSpec {
            kind: Some(pb::schedule_spec::Kind::Every(prost_types::Duration {
                seconds: 1,
                nanos: 0,
            })),
            ..Default::default()
        }),
        task: Some(pb::TaskTemplate {
            queue: "orders".into(),
            payload: payload.to_vec(),
            ..Default::default()
        }),
        overlap: pb::OverlapPolicy::Allow as i32,
        ..Default::default()
    }
}

async fn schedules_are_checked_against_their_queue_schema(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let (mut admin, mut s) = (app.admin().await, app.schedules().await);
    set_schema(&mut admin, "orders", ORDER)
        .await
        .expect("set schema");
    let e = s
        .create_schedule(pb::CreateScheduleRequest {
            schedule: Some(every_second("bad", br#"{"amount": 1.5}"#)),
        })
        .await
        .expect_err("bad template payload");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert_eq!(bad_field(&e).as_deref(), Some("schedule.task.payload"));
    assert!(
        e.message().contains("/amount: 1.5 is not of type"),
        "{}",
        e.message()
    );
    s.create_schedule(pb::CreateScheduleRequest {
        schedule: Some(every_second("good", br#"{"amount": 1}"#)),
    })
    .await
    .expect("create");
    let e = s
        .update_schedule(pb::UpdateScheduleRequest {
            schedule: Some(every_second("good", b"{}")),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["task".into()],
            }),
        })
        .await
        .expect_err("bad update");
    assert_eq!(bad_field(&e).as_deref(), Some("schedule.task.payload"));
    app.advance(Duration::from_secs(1));
    let fired = app.fire_schedules().await.fired;
    assert!(fired >= 1);
    // A stricter schema: the template no longer matches, so fires make no task.
    let strict = r#"{"type":"object","required":["amount","currency"]}"#;
    set_schema(&mut admin, "orders", strict)
        .await
        .expect("stricter");
    app.advance(Duration::from_secs(1));
    let pass = app.fire_schedules().await;
    assert_eq!(pass.fired, 0);
    assert!(pass.dropped >= 1);
    let e = s
        .trigger_schedule(pb::TriggerScheduleRequest {
            schedule_id: "good".into(),
        })
        .await
        .expect_err("trigger");
    assert_eq!(bad_field(&e).as_deref(), Some("schedule.task.payload"));
    // The tasks fired before the change stay, and run.
    let leased = lease(&mut app.broker().await, "orders", 10).await;
    assert_eq!(leased.len() as u64, fired);
    assert!(
        leased
            .iter()
            .all(|t| t.payload == br#"{"amount": 1}"#.to_vec())
    );
    app.shutdown().await;
}

all_backends!(
    a_payload_must_match_its_queue_schema,
    a_batch_with_one_bad_payload_writes_nothing,
    update_queue_refuses_bad_schemas_and_changes_nothing,
    a_schema_change_leaves_stored_tasks_alone,
    hostile_payloads_are_refused_without_harm,
    schedules_are_checked_against_their_queue_schema,
);
