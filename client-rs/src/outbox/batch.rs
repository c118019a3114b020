//! One batch of the relay: lock waiting rows, Submit them, then delete them or mark
//! the ones the broker refused for good; and how a refusal is told from a passing
//! failure (which rolls the batch back to be tried again).

use std::time::Duration;

use prost::Message;
use tonic::Code;
use tonic_types::StatusExt;

use super::{Relay, RelayError, RelayReport};
use crate::{Error, TaskSpec, pb};

/// What one batch came to.
pub(super) enum Batch {
    /// No row left to take.
    Empty,
    /// Rows were shipped or marked refused; there may be more.
    Done(RelayReport, usize),
    /// A refusal that named no row: ship the next `n` rows one by one to find it.
    Isolate(usize),
}

impl Relay {
    /// One transaction: lock, Submit, delete (or mark refused), commit.
    pub(super) async fn ship_batch(&self, limit: usize) -> Result<Batch, RelayError> {
        let mut tx = self.cfg.pool.begin().await?;
        let rows = tx.lock_rows(limit, self.cfg.max_batch_bytes).await?;
        if rows.is_empty() {
            return Ok(Batch::Empty);
        }

        let mut report = RelayReport::default();
        let mut specs = Vec::with_capacity(rows.len());
        let mut shipped_ids = Vec::with_capacity(rows.len());
        for (id, key, body, age) in rows {
            match pb::TaskSpec::decode(body.as_slice()) {
                // A row written around `enqueue` (by SQL, or by an older client)
                // that no batch can carry: refused here, not shipped.
                Ok(spec) if let Some((field, why)) = super::unshippable(&spec) => {
                    tx.mark_refused(id, &format!("{field}: {why}")).await?;
                    report.refused += 1;
                }
                Ok(mut spec) => {
                    if spec.key.is_empty() {
                        spec.key = key;
                    }
                    specs.push(TaskSpec::from(spec));
                    shipped_ids.push(id);
                    report.max_lag = report.max_lag.max(secs(age));
                }
                Err(e) => {
                    let why = format!("spec is not a taskbroker.v1.TaskSpec: {e}");
                    tx.mark_refused(id, &why).await?;
                    report.refused += 1;
                }
            }
        }
        let taken = shipped_ids.len() + report.refused as usize;
        if specs.is_empty() {
            tx.commit().await?;
            return Ok(Batch::Done(report, taken));
        }
        match self.cfg.client.submit_many(specs).await {
            Ok(results) => {
                tx.delete(&shipped_ids).await?;
                tx.commit().await?;
                report.shipped += shipped_ids.len() as u64;
                report.deduplicated += results.iter().filter(|r| r.deduplicated).count() as u64;
                report.batches += 1;
                Ok(Batch::Done(report, taken))
            }
            Err(e) if refusal(&e) => match rejected_index(&e) {
                Some(i) if i < shipped_ids.len() => {
                    tx.mark_refused(shipped_ids[i], &e.to_string()).await?;
                    tx.commit().await?;
                    report.refused += 1;
                    Ok(Batch::Done(report, 1))
                }
                _ if shipped_ids.len() == 1 => {
                    tx.mark_refused(shipped_ids[0], &e.to_string()).await?;
                    tx.commit().await?;
                    report.refused += 1;
                    Ok(Batch::Done(report, taken))
                }
                _ => {
                    tx.rollback().await?;
                    tracing::warn!(error = %e, rows = taken, "outbox relay: a batch was refused without naming a row; shipping one by one");
                    Ok(Batch::Isolate(taken))
                }
            },
            // Dropping `tx` rolls back: the rows are unlocked for the next try.
            Err(e) => Err(e.into()),
        }
    }
}

pub(super) fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.max(0.0)).unwrap_or_default()
}

/// A refusal of the batch's content: sending it again would be refused again.
/// RESOURCE_EXHAUSTED without a field is load shedding, which passes.
fn refusal(e: &Error) -> bool {
    match e.code() {
        Some(
            Code::InvalidArgument
            | Code::AlreadyExists
            | Code::OutOfRange
            | Code::FailedPrecondition
            | Code::NotFound,
        ) => true,
        Some(Code::ResourceExhausted) => rejected_index(e).is_some(),
        _ => false,
    }
}

/// The index of the refused task: from the BadRequest field (`tasks[3].queue`), else
/// from the message, which starts with the field.
fn rejected_index(e: &Error) -> Option<usize> {
    let status = e.status()?;
    if let Some(bad) = status.get_details_bad_request()
        && let Some(i) = bad
            .field_violations
            .iter()
            .find_map(|v| task_index(&v.field))
    {
        return Some(i);
    }
    task_index(status.message())
}

fn task_index(s: &str) -> Option<usize> {
    let rest = s.strip_prefix("tasks[")?;
    rest[..rest.find(']')?].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic_types::ErrorDetails;

    #[test]
    fn the_refused_task_is_found_in_the_field_or_the_message() {
        let details = ErrorDetails::with_bad_request_violation("tasks[12].payload", "too big");
        let e = Error::from(tonic::Status::with_error_details(
            Code::ResourceExhausted,
            "tasks[12].payload: too big",
            details,
        ));
        assert_eq!(rejected_index(&e), Some(12));
        assert!(
            refusal(&e),
            "a size limit naming a task is that task's fault"
        );

        let taken = Error::from(tonic::Status::already_exists(
            "tasks[3].key: another producer's task holds this key in queue q",
        ));
        assert_eq!(rejected_index(&taken), Some(3));
        assert!(refusal(&taken));

        let shed = Error::from(tonic::Status::resource_exhausted("too many requests"));
        assert_eq!(rejected_index(&shed), None);
        assert!(!refusal(&shed), "load shedding is retried, not a refusal");
        assert!(!refusal(&Error::from(tonic::Status::unavailable("down"))));
        assert!(!refusal(&Error::from(tonic::Status::unauthenticated(
            "no token"
        ))));
        assert_eq!(task_index("tasks[x].key"), None);
        assert_eq!(task_index("queue: bad"), None);
    }
}
