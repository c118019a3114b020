//! A batch of completions whose lease tokens do not belong to their tasks: a
//! token of another task's lease, one of a past lease, one of no shape the
//! broker makes. Each such completion is LEASE_LOST and changes nothing; the
//! other completions of the batch apply. (MySQL locks a batch's rows by the
//! row a token names, so a token naming another task's row must not settle
//! either task wrongly.)

mod common;

use common::*;
use taskbroker_client::pb;

fn completion(task_id: &str, lease_token: &str) -> pb::CompleteRequest {
    pb::CompleteRequest {
        task_id: task_id.into(),
        lease_token: lease_token.into(),
        ..Default::default()
    }
}

async fn foreign_tokens_settle_nothing(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let ids = submit(&mut c, (0..4).map(|_| spec("foreign-tokens")).collect()).await;
    let leased = lease(&mut c, "foreign-tokens", 4).await;
    assert_eq!(leased.len(), 4);
    let token = |id: &str| {
        leased
            .iter()
            .find(|t| t.task_id == id)
            .expect("leased")
            .lease_token
            .clone()
    };

    let answer = c
        .complete_many(pb::CompleteManyRequest {
            completions: vec![
                // Task 0 with task 1's token, task 1 with its own.
                completion(&ids[0], &token(&ids[1])),
                completion(&ids[1], &token(&ids[1])),
                // Task 2 with a token of no shape the broker makes.
                completion(&ids[2], "not.a.token.9223372036854775808"),
                // Task 3 with a token whose last part is a number no row has.
                completion(&ids[3], "x.-1"),
            ],
            lease_next: None,
        })
        .await
        .expect("complete many")
        .into_inner();
    let outcomes: Vec<pb::CompleteOutcome> = answer.results.iter().map(|r| r.outcome()).collect();
    assert_eq!(
        outcomes,
        [
            pb::CompleteOutcome::LeaseLost,
            pb::CompleteOutcome::Completed,
            pb::CompleteOutcome::LeaseLost,
            pb::CompleteOutcome::LeaseLost,
        ]
    );
    assert_eq!(
        get(&mut admin, &ids[1]).await.state(),
        pb::TaskState::Succeeded
    );
    for id in [&ids[0], &ids[2], &ids[3]] {
        assert_eq!(
            get(&mut admin, id).await.state(),
            pb::TaskState::Leased,
            "{id}"
        );
    }

    // Their own tokens still settle them.
    let answer = c
        .complete_many(pb::CompleteManyRequest {
            completions: [&ids[0], &ids[2], &ids[3]]
                .into_iter()
                .map(|id| completion(id, &token(id)))
                .collect(),
            lease_next: None,
        })
        .await
        .expect("complete many")
        .into_inner();
    assert!(
        answer
            .results
            .iter()
            .all(|r| r.outcome() == pb::CompleteOutcome::Completed)
    );
    app.shutdown().await;
}

#[tokio::test]
async fn foreign_tokens_settle_nothing_sqlite() {
    foreign_tokens_settle_nothing(Backend::Sqlite).await;
}

#[tokio::test]
async fn foreign_tokens_settle_nothing_postgres() {
    foreign_tokens_settle_nothing(Backend::Postgres).await;
}

#[tokio::test]
async fn foreign_tokens_settle_nothing_mysql() {
    foreign_tokens_settle_nothing(Backend::Mysql).await;
}
