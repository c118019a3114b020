//! One operation applied to the store and to the model, and their answers compared.

use super::*;

/// Records a task the store leased, after checking the model allows it.
fn take_lease(m: &mut Model, rec: &store::TaskRecord, lease_ms: u64) -> Result<(), TestCaseError> {
    let i = m
        .index_of(&rec.id)
        .ok_or_else(|| fail(format!("leased an unknown task {}", rec.id)))?;
    let now = m.now;
    let t = &mut m.tasks[i];
    let token = rec
        .lease_token
        .clone()
        .ok_or_else(|| fail("a leased task without a token".into()))?;
    if t.tokens.contains(&token) || token == BOGUS_TOKEN {
        return Err(fail(format!("lease token {token} was issued before")));
    }
    t.tokens.push(token);
    t.state = StoredState::Leased;
    t.attempt += 1;
    t.fencing += 1;
    t.lease_ms = lease_ms as i64;
    t.expires = Some(now + lease_ms as i64);
    t.outcome = Some(Outcome::Running);
    same!(rec.attempt, t.attempt, "attempt of a new lease of {}", t.id);
    same!(
        rec.fencing_token,
        t.fencing,
        "fencing token of a new lease of {}",
        t.id
    );
    same!(
        rec.checkpoint,
        t.checkpoint,
        "checkpoint handed to the new lease of {}",
        t.id
    );
    Ok(())
}

fn lease_state(t: &MTask) -> LeaseState {
    LeaseState::Live {
        lease_expires_at: at(t.expires.expect("leased")),
        cancel_requested: t.cancel_requested,
    }
}

pub(super) async fn step(s: &dyn Store, m: &mut Model, op: &Op) -> Result<(), TestCaseError> {
    let now = m.now;
    let err = |e: store::StoreError| fail(format!("store error: {e:?}"));
    match op {
        Op::Submit {
            queue,
            priority,
            max_attempts,
            key,
            backoff_s,
            delay_ms,
        } => {
            if m.tasks.len() >= MAX_TASKS {
                return Ok(());
            }
            let seq = m.next_seq;
            m.next_seq += 1;
            let queue = QUEUES[*queue].to_string();
            let key = key.map(|k| format!("k{k}"));
            let id = format!("00000000-0000-7000-8000-{seq:012}");
            let new = NewTask {
                routing: Default::default(),
                id: id.clone(),
                queue: queue.clone(),
                key: key.clone(),
                payload: vec![seq as u8],
                priority: *priority,
                run_at: at(now + *delay_ms as i64),
                deadline: None,
                retry: RetryPolicy {
                    max_attempts: *max_attempts,
                    initial_backoff: Duration::from_secs(*backoff_s),
                    backoff_multiplier: 1.0,
                    max_backoff: Duration::from_secs(3600),
                    jitter: 0.0,
                },
                metadata: BTreeMap::new(),
                concurrency_key: None,
                checkpoint: None,
            };
            let got = s.task_insert_many(&[new], at(now)).await.map_err(err)?;
            let existing = key.as_ref().and_then(|k| {
                m.tasks
                    .iter()
                    .find(|t| t.queue == queue && t.key.as_ref() == Some(k))
            });
            if let Some(t) = existing {
                same!(got[0].task_id, t.id, "deduplicated submit");
                same!(got[0].deduplicated, true, "deduplicated flag");
                return Ok(());
            }
            same!(got[0].task_id, id, "new task id");
            same!(got[0].deduplicated, false, "deduplicated flag");
            m.tasks.push(MTask {
                id,
                queue,
                key,
                priority: *priority,
                seq,
                state: StoredState::Pending,
                run_at: now + *delay_ms as i64,
                attempt: 0,
                attempts_allowed: *max_attempts,
                max_attempts: *max_attempts,
                fencing: 0,
                tokens: Vec::new(),
                lease_ms: 0,
                expires: None,
                checkpoint: None,
                result: None,
                cancel_requested: false,
                outcome: None,
                backoff_ms: *backoff_s as i64 * 1000,
            });
        }
        Op::Lease {
            queues,
            max,
            lease_ms,
        } => {
            let qs = queue_set(*queues);
            let want: Vec<String> = m
                .ready(&qs)
                .into_iter()
                .take(*max as usize)
                .map(|i| m.tasks[i].id.clone())
                .collect();
            let got = s
                .task_lease_available(&lease_params(qs, *max, *lease_ms, now))
                .await
                .map_err(err)?;
            let ids: Vec<String> = got.iter().map(|r| r.id.clone()).collect();
            same!(ids, want, "leased tasks, in lease order");
            for rec in &got {
                take_lease(m, rec, *lease_ms)?;
            }
        }
        Op::LeaseMany {
            queues,
            wanted,
            lease_ms,
        } => {
            let qs = queue_set(*queues);
            let ready: Vec<String> = m
                .ready(&qs)
                .into_iter()
                .map(|i| m.tasks[i].id.clone())
                .collect();
            // Shared one at a time in request order: slot k of every request
            // before slot k + 1 of any.
            let mut shares = vec![0u32; wanted.len()];
            let mut left = ready.len();
            'rounds: for k in 0..*wanted.iter().max().unwrap_or(&0) {
                for (i, w) in wanted.iter().enumerate() {
                    if left == 0 {
                        break 'rounds;
                    }
                    if *w > k {
                        shares[i] += 1;
                        left -= 1;
                    }
                }
            }
            let ps: Vec<LeaseParams> = wanted
                .iter()
                .map(|w| lease_params(qs.clone(), *w, *lease_ms, now))
                .collect();
            let got = s.task_lease_many(&ps).await.map_err(err)?;
            same!(got.len(), wanted.len(), "one answer per lease request");
            let counts: Vec<u32> = got.iter().map(|g| g.len() as u32).collect();
            same!(counts, shares, "tasks per request of {wanted:?}");
            let total: usize = counts.iter().map(|&c| c as usize).sum();
            let mut all: Vec<String> = got.iter().flatten().map(|r| r.id.clone()).collect();
            all.sort();
            let mut first: Vec<String> = ready[..total].to_vec();
            first.sort();
            same!(all, first, "the tasks leased are the first ready ones");
            for answer in &got {
                let order: Vec<usize> = answer
                    .iter()
                    .map(|r| {
                        ready
                            .iter()
                            .position(|id| *id == r.id)
                            .unwrap_or(usize::MAX)
                    })
                    .collect();
                if !order.is_sorted() {
                    return Err(fail(format!(
                        "one request's tasks out of lease order: {order:?}"
                    )));
                }
                for rec in answer {
                    take_lease(m, rec, *lease_ms)?;
                }
            }
        }
        Op::Heartbeat {
            task,
            tok,
            extend_ms,
        } => {
            let Some(i) = m.pick(task) else { return Ok(()) };
            let token = m.tasks[i].token(*tok);
            let refs = [LeaseRef {
                task_id: m.tasks[i].id.clone(),
                lease_token: token.clone(),
            }];
            let ext = extend_ms.map(Duration::from_millis);
            let got = s.lease_extend(&refs, ext, at(now)).await.map_err(err)?;
            let t = &mut m.tasks[i];
            let want = if t.live(&token, now) {
                t.expires = Some(now + extend_ms.map_or(t.lease_ms, |e| e as i64));
                lease_state(t)
            } else {
                LeaseState::Lost
            };
            same!(got, vec![want], "heartbeat of {} with {tok:?}", t.id);
        }
        Op::Checkpoint {
            task,
            tok,
            data,
            extend_ms,
        } => {
            let Some(i) = m.pick(task) else { return Ok(()) };
            let token = m.tasks[i].token(*tok);
            let p = CheckpointParams {
                task_id: m.tasks[i].id.clone(),
                lease_token: token.clone(),
                checkpoint: vec![*data; 3],
                extend_by: extend_ms.map(Duration::from_millis),
                now: at(now),
            };
            let got = s.task_checkpoint(&p).await.map_err(err)?;
            let t = &mut m.tasks[i];
            let want = if t.live(&token, now) {
                t.checkpoint = Some(vec![*data; 3]);
                if let Some(e) = extend_ms {
                    t.expires = Some(now + *e as i64);
                }
                Settled::Applied(lease_state(t))
            } else {
                Settled::LeaseLost
            };
            same!(got, want, "checkpoint of {} with {tok:?}", t.id);
        }
        Op::Complete { task, tok } => {
            let Some(i) = m.pick(task) else { return Ok(()) };
            let token = m.tasks[i].token(*tok);
            let p = complete_params(&m.tasks[i], &token, now);
            let got = s.task_complete(&p).await.map_err(err)?;
            let want = model_complete(m, i, &token);
            same!(
                settled_kind(&got),
                want,
                "complete of {} with {tok:?}",
                m.tasks[i].id
            );
        }
        Op::CompleteMany { items, distinct } => {
            if m.tasks.is_empty() {
                return Ok(());
            }
            let mut ps = Vec::new();
            let mut picked = Vec::new();
            let mut seen = HashSet::new();
            for (idx, tok) in items {
                let i = idx.index(m.tasks.len());
                if *distinct && !seen.insert(i) {
                    continue;
                }
                let token = m.tasks[i].token(*tok);
                ps.push(complete_params(&m.tasks[i], &token, now));
                picked.push((i, token, *tok));
            }
            let got = s.task_complete_many(&ps).await.map_err(err)?;
            same!(got.len(), ps.len(), "one outcome per item");
            // In order, each as a single Complete would be.
            for (n, (i, token, tok)) in picked.iter().enumerate() {
                let want = model_complete(m, *i, token);
                same!(
                    settled_kind(&got[n]),
                    want,
                    "item {n} of a CompleteMany: {} with {tok:?} (items {:?})",
                    m.tasks[*i].id,
                    picked.iter().map(|p| (p.0, p.2)).collect::<Vec<_>>()
                );
            }
        }
        Op::Fail {
            task,
            tok,
            non_retryable,
            retry_after_ms,
        } => {
            let Some(i) = m.pick(task) else { return Ok(()) };
            let token = m.tasks[i].token(*tok);
            let p = FailParams {
                prefer_same_worker: false,
                task_id: m.tasks[i].id.clone(),
                lease_token: token.clone(),
                error: "boom".into(),
                non_retryable: *non_retryable,
                retry_after: retry_after_ms.map(Duration::from_millis),
                now: at(now),
                jitter_unit: 0.5,
            };
            let got = s.task_fail(&p).await.map_err(err)?;
            let t = &mut m.tasks[i];
            let kind = match check(t, &token, now, Outcome::Failed) {
                Check::LeaseLost => "lease_lost",
                Check::AlreadySettled => "already_settled",
                Check::Proceed => {
                    t.fail(
                        now,
                        *non_retryable,
                        retry_after_ms.map(|r| r as i64),
                        Outcome::Failed,
                    );
                    "applied"
                }
            };
            same!(settled_kind(&got), kind, "fail of {} with {tok:?}", t.id);
            if let Settled::Applied(r) | Settled::AlreadySettled(r) = &got {
                let visible = TaskState::of(t.state, at(t.run_at), at(now));
                same!(r.state, visible, "state answered to a Fail of {}", t.id);
                let next = (t.state == StoredState::Pending).then(|| at(t.run_at));
                same!(
                    r.next_run_at,
                    next,
                    "next run answered to a Fail of {}",
                    t.id
                );
            }
        }
        Op::Advance { ms } => m.now += *ms as i64,
        Op::Reap => {
            let got = s
                .lease_reclaim_expired(at(now), 10_000)
                .await
                .map_err(err)?;
            let mut reclaimed = 0u64;
            let mut woken: Vec<String> = Vec::new();
            for t in m.tasks.iter_mut() {
                if t.state == StoredState::Leased && t.expires.is_some_and(|e| e <= now) {
                    t.fail(now, false, None, Outcome::LeaseExpired);
                    reclaimed += 1;
                    if t.state == StoredState::Pending && !woken.contains(&t.queue) {
                        woken.push(t.queue.clone());
                    }
                }
            }
            same!(got.reclaimed, reclaimed, "leases reclaimed");
            same!(
                got.deadline_exceeded,
                0,
                "deadline kills (no deadlines here)"
            );
            let mut q = got.queues.clone();
            q.sort();
            woken.sort();
            same!(q, woken, "queues woken by the reaper");
        }
        Op::Cancel { task } => {
            let Some(i) = m.pick(task) else { return Ok(()) };
            let got = s.task_cancel(&m.tasks[i].id, at(now)).await.map_err(err)?;
            let t = &mut m.tasks[i];
            let want = match t.state {
                StoredState::Pending => {
                    t.state = StoredState::Cancelled;
                    "done"
                }
                StoredState::Leased => {
                    t.cancel_requested = true;
                    "done"
                }
                StoredState::Cancelled => "done",
                _ => "wrong_state",
            };
            same!(
                changed_kind(&got),
                want,
                "cancel of {} in {:?}",
                t.id,
                t.state
            );
        }
        Op::Requeue { task } => {
            let Some(i) = m.pick(task) else { return Ok(()) };
            let got = s.task_requeue(&m.tasks[i].id, at(now)).await.map_err(err)?;
            let t = &mut m.tasks[i];
            let want = match t.state {
                StoredState::Dead | StoredState::Cancelled => {
                    t.state = StoredState::Pending;
                    t.run_at = now;
                    t.attempts_allowed = t.attempt + t.max_attempts;
                    t.cancel_requested = false;
                    "done"
                }
                _ => "wrong_state",
            };
            same!(
                changed_kind(&got),
                want,
                "requeue of {} in {:?}",
                t.id,
                t.state
            );
        }
        Op::UnknownTask => {
            let id = "00000000-0000-7000-8000-999999999999";
            let p = CompleteParams {
                task_id: id.into(),
                lease_token: BOGUS_TOKEN.into(),
                result: vec![],
                now: at(now),
            };
            let got = s.task_complete(&p).await.map_err(err)?;
            same!(
                settled_kind(&got),
                "not_found",
                "complete of an unknown task"
            );
            let got = s.task_cancel(id, at(now)).await.map_err(err)?;
            same!(changed_kind(&got), "not_found", "cancel of an unknown task");
        }
    }
    Ok(())
}
