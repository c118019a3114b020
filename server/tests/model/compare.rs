//! Settling in the model, and the whole store compared with the model after each step.

use super::*;

pub(super) fn complete_params(t: &MTask, token: &str, now: i64) -> CompleteParams {
    CompleteParams {
        task_id: t.id.clone(),
        lease_token: token.into(),
        result: format!("done-{token}").into_bytes(),
        now: at(now),
    }
}

/// A Complete in the model; returns the kind of answer expected.
pub(super) fn model_complete(m: &mut Model, i: usize, token: &str) -> &'static str {
    let now = m.now;
    let t = &mut m.tasks[i];
    match check(t, token, now, Outcome::Succeeded) {
        Check::LeaseLost => "lease_lost",
        Check::AlreadySettled => "already_settled",
        Check::Proceed => {
            t.state = StoredState::Succeeded;
            t.outcome = Some(Outcome::Succeeded);
            t.expires = None;
            t.result = Some(format!("done-{token}").into_bytes());
            "applied"
        }
    }
}

pub(super) fn settled_kind<T>(s: &Settled<T>) -> &'static str {
    match s {
        Settled::Applied(_) => "applied",
        Settled::AlreadySettled(_) => "already_settled",
        Settled::LeaseLost => "lease_lost",
        Settled::NotFound => "not_found",
    }
}

pub(super) fn changed_kind(c: &Changed) -> &'static str {
    match c {
        Changed::Done(_) => "done",
        Changed::NotFound => "not_found",
        Changed::WrongState(_) => "wrong_state",
    }
}

/// Every task as stored matches the model.
async fn compare_all(s: &dyn Store, m: &Model, after: &Op) -> Result<(), TestCaseError> {
    let filter = TaskFilter {
        limit: 1000,
        now: at(m.now),
        ..TaskFilter::default()
    };
    let stored = s
        .task_list(&filter)
        .await
        .map_err(|e| fail(format!("task_list: {e:?}")))?;
    same!(stored.len(), m.tasks.len(), "tasks stored after {after:?}");
    let stored: BTreeMap<&str, &store::TaskRecord> =
        stored.iter().map(|r| (r.id.as_str(), r)).collect();
    for t in &m.tasks {
        let r = stored
            .get(t.id.as_str())
            .ok_or_else(|| fail(format!("task {} is gone", t.id)))?;
        let ctx = format!("task {} after {after:?}", t.id);
        same!(r.state, t.state, "state of {ctx}");
        same!(r.attempt, t.attempt, "attempt of {ctx}");
        same!(
            r.attempts_allowed,
            t.attempts_allowed,
            "attempts allowed of {ctx}"
        );
        same!(r.fencing_token, t.fencing, "fencing token of {ctx}");
        same!(r.checkpoint, t.checkpoint, "checkpoint of {ctx}");
        same!(
            r.cancel_requested,
            t.cancel_requested,
            "cancel requested of {ctx}"
        );
        if t.state == StoredState::Succeeded {
            same!(r.result, t.result, "result of {ctx}");
        }
        if t.state == StoredState::Leased {
            same!(
                r.lease_token.as_ref(),
                t.tokens.last(),
                "lease token of {ctx}"
            );
            same!(
                r.lease_expires_at.map(ms_of),
                t.expires,
                "lease expiry of {ctx}"
            );
        }
        if t.state == StoredState::Pending {
            same!(ms_of(r.run_at), t.run_at, "run_at of {ctx}");
        }
        same!(
            r.finished_at.is_some(),
            t.state.is_finished(),
            "finished_at set of {ctx}"
        );
    }
    Ok(())
}

pub(super) async fn run_case(s: &dyn Store, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut m = Model {
        now: t0(),
        ..Model::default()
    };
    for (n, op) in ops.iter().enumerate() {
        let checked = match step(s, &mut m, op).await {
            Ok(()) => compare_all(s, &m, op).await,
            Err(e) => Err(e),
        };
        if let Err(e) = checked {
            let recent = &ops[n.saturating_sub(3)..n];
            return Err(fail(format!(
                "step {n} of {}: {e}\n(the steps before it: {recent:?})",
                ops.len()
            )));
        }
    }
    Ok(())
}
