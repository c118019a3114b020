//! Bearer-token authentication with roles. Tokens come from configuration or a
//! secret file; they are compared in constant time and never logged.

use tonic::Status;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Submit, and read the tasks it submitted.
    Producer,
    /// Lease and the lease calls.
    Worker,
    /// Everything.
    Admin,
}

impl Role {
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "producer" => Some(Role::Producer),
            "worker" => Some(Role::Worker),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }
}

/// Who made a call (in the request extensions once authenticated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The token's name, or "token-N" when it has none.
    pub name: String,
    pub role: Role,
}

/// One configured token.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub struct TokenEntry {
    pub role: Role,
    pub token: String,
    #[serde(default)]
    pub name: Option<String>,
}

impl std::fmt::Debug for TokenEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenEntry")
            .field("role", &self.role)
            .field("name", &self.name)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// Parses a token file: one `ROLE TOKEN [NAME]` per line; `#` comments and blank
/// lines are skipped. The error names the line, never the token.
pub fn parse_token_file(text: &str) -> Result<Vec<TokenEntry>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut parts = line.split_whitespace();
        let (Some(role), Some(token)) = (parts.next(), parts.next()) else {
            return Err(format!("line {}: expected `ROLE TOKEN [NAME]`", i + 1));
        };
        let role = Role::parse(role)
            .ok_or_else(|| format!("line {}: role must be producer, worker or admin", i + 1))?;
        out.push(TokenEntry {
            role,
            token: token.to_string(),
            name: parts.next().map(str::to_string),
        });
    }
    Ok(out)
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

/// The roles allowed to call a gRPC method path; `None` means no token needed.
fn allowed(path: &str) -> Option<&'static [Role]> {
    const WORKER: &[Role] = &[Role::Worker, Role::Admin];
    const PRODUCER: &[Role] = &[Role::Producer, Role::Admin];
    const READ: &[Role] = &[Role::Producer, Role::Admin];
    const ADMIN: &[Role] = &[Role::Admin];
    if path.starts_with("/grpc.health.") || path.starts_with("/grpc.reflection.") {
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
            _ => ADMIN,
        },
    )
}

impl Authenticator {
    pub fn new(entries: &[TokenEntry]) -> Self {
        Authenticator {
            tokens: entries
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    let name = e.name.clone().unwrap_or_else(|| format!("token-{}", i + 1));
                    (
                        e.token.as_bytes().to_vec(),
                        Principal { name, role: e.role },
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
        // Compare against every token so timing does not tell which one was close.
        let mut found = None;
        for (t, p) in &self.tokens {
            if constant_time_eq(t, token.as_bytes()) {
                found = Some(p);
            }
        }
        let principal = found.ok_or_else(|| Status::unauthenticated("invalid bearer token"))?;
        if !roles.contains(&principal.role) {
            let method = path.rsplit('/').next().unwrap_or(path);
            return Err(Status::permission_denied(format!(
                "role {:?} may not call {method}",
                principal.role
            )));
        }
        Ok(Some(principal.clone()))
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
