//! Bearer-token authentication with roles. Tokens come from configuration or a
//! secret file; they are compared in constant time and never logged.

use tonic::Status;

pub use crate::domain::token::{
    Binding, Bound, QueueNames, Role, TokenEntry, WorkerIds, check_unique_names, parse_token_file,
};

/// Who made a call (in the request extensions once authenticated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The token's name; see [`TokenEntry::identity`].
    pub name: String,
    pub role: Role,
    /// The worker ids a bound worker token may use (`None`: any).
    pub workers: Option<WorkerIds>,
    /// The queues a bound worker token may use (`None`: any).
    pub queues: Option<QueueNames>,
}

impl Principal {
    /// Whether this caller may lease, heartbeat and settle as `worker_id`.
    pub fn may_use_worker_id(&self, worker_id: &str) -> bool {
        self.workers.as_ref().is_none_or(|w| w.allows(worker_id))
    }

    /// Whether this caller may lease from `queue`, and heartbeat and settle its leases.
    pub fn may_use_queue(&self, queue: &str) -> bool {
        self.queues.as_ref().is_none_or(|q| q.allows(queue))
    }

    /// Whether the token is bound at all (its lease calls are checked).
    pub fn is_bound(&self) -> bool {
        self.workers.is_some() || self.queues.is_some()
    }
}

pub struct Authenticator {
    tokens: Vec<(Vec<u8>, Principal)>,
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// KEDA's external scaler service.
pub const SCALER_PATH: &str = "/externalscaler.ExternalScaler/";

/// The roles whose tokens may read backlogs through the scaler service: a worker
/// token (KEDA resolves `tokenFromEnv` from the worker's own environment), a
/// scaler-only token, or admin.
pub const SCALER_ROLES: &[Role] = &[Role::Worker, Role::Scaler, Role::Admin];

/// The roles allowed to call a gRPC method path; `None` means no token needed here.
fn allowed(path: &str) -> Option<&'static [Role]> {
    const WORKER: &[Role] = &[Role::Worker, Role::Admin];
    const PRODUCER: &[Role] = &[Role::Producer, Role::Admin];
    const READ: &[Role] = &[Role::Producer, Role::Admin];
    const ADMIN: &[Role] = &[Role::Admin];
    if path.starts_with("/grpc.health.") || path.starts_with("/grpc.reflection.") {
        return None;
    }
    // KEDA sends no headers: the scaler service reads its token from the trigger
    // metadata and checks it itself (api/scaler.rs, roles SCALER_ROLES).
    if path.starts_with(SCALER_PATH) {
        return None;
    }
    let method = path.rsplit('/').next().unwrap_or_default();
    // Producers manage the schedules they created (the service checks ownership).
    if path.starts_with("/taskbroker.v1.ScheduleService/") {
        return Some(PRODUCER);
    }
    Some(
        match (path.starts_with("/taskbroker.v1.BrokerService/"), method) {
            (true, "Submit") => PRODUCER,
            (true, _) => WORKER,
            (false, "GetTask" | "ListAttempts") => READ,
            // Flow: the service checks ownership (api/flow.rs).
            (false, "ListTaskEvents" | "WatchTasks") => READ,
            _ => ADMIN,
        },
    )
}

impl Authenticator {
    pub fn new(entries: &[TokenEntry]) -> Self {
        Authenticator {
            tokens: entries
                .iter()
                .map(|e| {
                    let name = e.identity();
                    // Checked when the configuration is read (check_unique_names); a
                    // malformed binding here allows nothing rather than anything. An
                    // admin token is never restricted.
                    let bind = |kind: Bound, list: &Option<Vec<String>>| {
                        list.as_deref()
                            .filter(|_| e.role == Role::Worker)
                            .map(|l| Binding::new(kind, l).unwrap_or_else(|_| Binding::deny_all()))
                    };
                    (
                        e.token.as_bytes().to_vec(),
                        Principal {
                            name,
                            role: e.role,
                            workers: bind(Bound::Workers, &e.workers),
                            queues: bind(Bound::Queues, &e.queues),
                        },
                    )
                })
                .collect(),
        }
    }

    /// Checks the `authorization: Bearer TOKEN` header against the method's roles.
    pub fn check(
        &self,
        path: &str,
        headers: &http::HeaderMap,
    ) -> Result<Option<Principal>, Status> {
        let Some(roles) = allowed(path) else {
            return Ok(None);
        };
        let token = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| Status::unauthenticated("missing bearer token"))?;
        let method = path.rsplit('/').next().unwrap_or(path);
        self.check_token(token, roles, method).map(Some)
    }

    /// Checks one token against the roles that may call `method`.
    pub fn check_token(
        &self,
        token: &str,
        roles: &[Role],
        method: &str,
    ) -> Result<Principal, Status> {
        // Compare against every token so timing does not tell which one was close.
        let mut found = None;
        for (t, p) in &self.tokens {
            if constant_time_eq(t, token.as_bytes()) {
                found = Some(p);
            }
        }
        let principal = found.ok_or_else(|| Status::unauthenticated("invalid bearer token"))?;
        if !roles.contains(&principal.role) {
            return Err(Status::permission_denied(format!(
                "role {:?} may not call {method}",
                principal.role
            )));
        }
        Ok(principal.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_files_parse_and_errors_name_the_line_not_the_token() {
        let t = parse_token_file("# ops\nadmin s3cret ops\n\nworker w0rk\n").unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].role, Role::Admin);
        assert_eq!(t[0].name.as_deref(), Some("ops"));
        let e = parse_token_file("root s3cret").unwrap_err();
        assert!(e.starts_with("line 1"));
        assert!(!e.contains("s3cret"));
        assert!(!format!("{:?}", t[0]).contains("s3cret"));
    }

    #[test]
    fn worker_tokens_bind_to_ids_and_prefixes() {
        let t = parse_token_file(
            "worker w0rkw0rkw0rkw0rk per-user workers=uid_5,gpu-*\nworker fr33fr33fr33 fleet\n",
        )
        .unwrap();
        assert_eq!(
            t[0].workers.as_deref(),
            Some(&["uid_5".to_string(), "gpu-*".to_string()][..])
        );
        assert_eq!(t[1].workers, None);
        assert!(check_unique_names(&t).is_ok());
        let auth = Authenticator::new(&t);
        let bound = auth
            .check_token("w0rkw0rkw0rkw0rk", &[Role::Worker], "Lease")
            .unwrap();
        for ok in ["uid_5", "gpu-", "gpu-a100-7"] {
            assert!(bound.may_use_worker_id(ok), "{ok}");
        }
        for no in ["uid_55", "uid_", "uid_6", "gpu", "", "xgpu-1"] {
            assert!(!bound.may_use_worker_id(no), "{no}");
        }
        let free = auth
            .check_token("fr33fr33fr33", &[Role::Worker], "Lease")
            .unwrap();
        assert!(free.may_use_worker_id("uid_5") && free.may_use_worker_id("anything"));
    }

    #[test]
    fn worker_tokens_bind_to_queues_beside_worker_ids() {
        let t = parse_token_file(
            "worker q0q0q0q0q0q0 team-a queues=billing,reports-*\n\
             worker b0b0b0b0b0b0 team-b queues=billing workers=uid_5\n\
             worker c0c0c0c0c0c0 team-c workers=gpu-* queues=*\n",
        )
        .unwrap();
        assert_eq!(
            t[0].queues.as_deref(),
            Some(&["billing".to_string(), "reports-*".to_string()][..])
        );
        assert_eq!(t[0].workers, None);
        assert!(t[1].queues.is_some() && t[1].workers.is_some());
        assert!(check_unique_names(&t).is_ok());
        let auth = Authenticator::new(&t);
        let a = auth
            .check_token("q0q0q0q0q0q0", &[Role::Worker], "Lease")
            .unwrap();
        assert!(a.is_bound());
        for ok in ["billing", "reports-", "reports-eu"] {
            assert!(a.may_use_queue(ok), "{ok}");
        }
        for no in [
            "billing-eu",
            "billin",
            "reports",
            "Billing",
            "",
            "xreports-1",
        ] {
            assert!(!a.may_use_queue(no), "{no}");
        }
        assert!(a.may_use_worker_id("anyone"));
        let b = auth
            .check_token("b0b0b0b0b0b0", &[Role::Worker], "Lease")
            .unwrap();
        assert!(b.may_use_queue("billing") && !b.may_use_worker_id("uid_6"));
        let c = auth
            .check_token("c0c0c0c0c0c0", &[Role::Worker], "Lease")
            .unwrap();
        assert!(c.may_use_queue("anything") && !c.may_use_worker_id("cpu-1"));
    }

    #[test]
    fn bad_queue_bindings_are_refused_naming_the_line() {
        for (text, says) in [
            (
                "admin s3cretS3cret ops queues=billing",
                "worker tokens only",
            ),
            (
                "producer s3cretS3cret shop queues=billing",
                "worker tokens only",
            ),
            ("worker s3cretS3cret w queues=", "\"\""),
            ("worker s3cretS3cret w queues=a,,b", "\"\""),
            ("worker s3cretS3cret w queues=a*b", "\"a*b\""),
            ("worker s3cretS3cret queues=billing", "NAME before queues="),
            ("worker s3cretS3cret w queues=a queues=b", "given twice"),
            ("worker s3cretS3cret w queue=a", "expected"),
            ("worker s3cretS3cret w queues=a workers=b extra", "expected"),
        ] {
            let e = parse_token_file(&format!("# c\n{text}\n")).unwrap_err();
            assert!(e.starts_with("line 2:"), "{text}: {e}");
            assert!(e.contains(says), "{text}: {e}");
            assert!(!e.contains("s3cret") && !e.contains('\n'), "{text}: {e}");
        }
        // Inline tokens: an empty list is refused, not read as every queue.
        let inline = TokenEntry {
            role: Role::Worker,
            token: "s3cretS3cret0000".into(),
            name: Some("w".into()),
            workers: None,
            queues: Some(Vec::new()),
        };
        let e = check_unique_names(std::slice::from_ref(&inline)).unwrap_err();
        assert!(e.contains("queues= needs at least one queue"), "{e}");
        let p = Authenticator::new(&[inline])
            .check_token("s3cretS3cret0000", &[Role::Worker], "Lease")
            .unwrap();
        assert!(!p.may_use_queue("billing"));
        // An admin is never restricted, even when built with a binding.
        let admin = TokenEntry {
            role: Role::Admin,
            queues: Some(vec!["billing".into()]),
            name: None,
            ..p_entry()
        };
        let p = Authenticator::new(&[admin])
            .check_token("s3cretS3cret0000", &[Role::Admin], "Lease")
            .unwrap();
        assert!(p.may_use_queue("reports") && !p.is_bound());
    }

    fn p_entry() -> TokenEntry {
        TokenEntry {
            role: Role::Worker,
            token: "s3cretS3cret0000".into(),
            name: None,
            workers: None,
            queues: None,
        }
    }

    #[test]
    fn bad_bindings_are_refused_naming_the_line() {
        for (text, says) in [
            ("admin s3cretS3cret ops workers=uid_5", "worker tokens only"),
            (
                "producer s3cretS3cret shop workers=uid_5",
                "worker tokens only",
            ),
            ("worker s3cretS3cret w workers=", "\"\""),
            ("worker s3cretS3cret w workers=a,,b", "\"\""),
            ("worker s3cretS3cret w workers=a*b", "\"a*b\""),
            ("worker s3cretS3cret w workers=**", "\"**\""),
            ("worker s3cretS3cret workers=uid_5", "NAME before workers="),
            ("worker s3cretS3cret w worker=uid_5", "expected"),
            ("worker s3cretS3cret w workers=a extra", "expected"),
        ] {
            let e = parse_token_file(&format!("# c\n{text}\n")).unwrap_err();
            assert!(e.starts_with("line 2:"), "{text}: {e}");
            assert!(e.contains(says), "{text}: {e}");
            assert!(!e.contains("s3cret") && !e.contains('\n'), "{text}: {e}");
        }
        // Inline tokens (the configuration file) are checked the same way.
        let admin = TokenEntry {
            role: Role::Admin,
            token: "s3cretS3cret0000".into(),
            name: None,
            workers: Some(vec!["uid_5".into()]),
            queues: None,
        };
        let e = check_unique_names(std::slice::from_ref(&admin)).unwrap_err();
        assert!(
            e.contains("worker tokens only") && !e.contains("s3cret"),
            "{e}"
        );
        // An admin is never restricted, even when built with a binding.
        let p = Authenticator::new(&[admin])
            .check_token("s3cretS3cret0000", &[Role::Admin], "Lease")
            .unwrap();
        assert!(p.may_use_worker_id("uid_6"));
    }

    #[test]
    fn a_token_is_the_same_producer_wherever_it_stands_in_the_file() {
        let a = parse_token_file("producer aaaaaaaaaaaaaaaa\nproducer bbbbbbbbbbbbbbbb shop\n")
            .unwrap();
        let b = parse_token_file("producer bbbbbbbbbbbbbbbb shop\nproducer aaaaaaaaaaaaaaaa\n")
            .unwrap();
        assert_eq!(a[0].identity(), b[1].identity());
        assert!(a[0].identity().starts_with("token-"));
        assert!(!a[0].identity().contains("aaaa"));
        assert_eq!(a[1].identity(), "shop");
        let dup =
            parse_token_file("producer aaaaaaaaaaaaaaaa shop\nworker cccccccccccccccc shop\n")
                .unwrap();
        assert!(check_unique_names(&dup).unwrap_err().contains("\"shop\""));
        assert!(check_unique_names(&a).is_ok());
    }

    #[test]
    fn roles_map_to_methods() {
        assert_eq!(allowed("/grpc.health.v1.Health/Check"), None);
        assert!(
            allowed("/taskbroker.v1.BrokerService/Submit")
                .unwrap()
                .contains(&Role::Producer)
        );
        assert!(
            !allowed("/taskbroker.v1.BrokerService/Lease")
                .unwrap()
                .contains(&Role::Producer)
        );
        assert!(
            !allowed("/taskbroker.v1.AdminService/CancelTask")
                .unwrap()
                .contains(&Role::Worker)
        );
        let schedules = allowed("/taskbroker.v1.ScheduleService/CreateSchedule").unwrap();
        assert!(schedules.contains(&Role::Producer) && schedules.contains(&Role::Admin));
        assert!(!schedules.contains(&Role::Worker));
    }
}
