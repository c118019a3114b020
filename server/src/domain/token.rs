//! The tokens the broker accepts: their roles, one configured entry, the
//! worker ids a worker token may use, and the token file
//! (`ROLE TOKEN [NAME [workers=ID,PREFIX*,...]]` per line). Configuration reads
//! them; the gRPC and console guards check calls against them.

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
    /// Reads queue backlogs through KEDA's external scaler service, nothing else.
    Scaler,
}

impl Role {
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "producer" => Some(Role::Producer),
            "worker" => Some(Role::Worker),
            "admin" => Some(Role::Admin),
            "scaler" => Some(Role::Scaler),
            _ => None,
        }
    }
}

/// The worker ids a worker token is bound to: exact ids, or prefixes written
/// with a trailing `*` (`gpu-*` allows `gpu-1` and `gpu-`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerIds(Vec<String>);

impl WorkerIds {
    /// Checks a list of patterns: each non-empty, `*` only as the last character.
    pub fn new(patterns: &[String]) -> Result<WorkerIds, String> {
        if patterns.is_empty() {
            return Err("workers= needs at least one worker id".into());
        }
        for p in patterns {
            let exact = p.strip_suffix('*').unwrap_or(p);
            if p.is_empty() || exact.contains('*') || p.chars().any(char::is_whitespace) {
                return Err(format!(
                    "workers= entry {p:?} must be a worker id or a prefix ending in `*`"
                ));
            }
        }
        Ok(WorkerIds(patterns.to_vec()))
    }

    /// A binding that allows no worker id (what a malformed one becomes).
    pub fn deny_all() -> WorkerIds {
        WorkerIds(Vec::new())
    }

    pub fn allows(&self, worker_id: &str) -> bool {
        self.0.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => worker_id.starts_with(prefix),
            None => worker_id == p,
        })
    }
}

/// One configured token.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub struct TokenEntry {
    pub role: Role,
    pub token: String,
    #[serde(default)]
    pub name: Option<String>,
    /// For a worker token: the worker ids it may lease, heartbeat and settle
    /// under (exact ids or prefixes ending in `*`); `None` allows any.
    #[serde(default)]
    pub workers: Option<Vec<String>>,
}

impl TokenEntry {
    /// Who the token is: its NAME, or for an unnamed token `token-` and the first
    /// 16 hex digits of the token's SHA-256, so the identity (which owns a
    /// producer's tasks) never depends on where the token stands in the file.
    pub fn identity(&self) -> String {
        match &self.name {
            Some(name) => name.clone(),
            None => {
                use sha2::Digest;
                let digest = sha2::Sha256::digest(self.token.as_bytes());
                let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
                format!("token-{hex}")
            }
        }
    }
}

/// Checks that no two tokens share a name (explicit or derived): two producers
/// with one name would see and own each other's tasks. Also checks each token's
/// worker-id binding (worker tokens only, well-formed patterns).
pub fn check_unique_names(entries: &[TokenEntry]) -> Result<(), String> {
    let mut seen = std::collections::HashSet::new();
    for e in entries {
        if let Some(w) = &e.workers {
            check_binding(e.role, w).map_err(|m| format!("auth tokens: {m}"))?;
        }
        let name = e.identity();
        if !seen.insert(name.clone()) {
            return Err(format!(
                "auth tokens: the name {name:?} is given to more than one token; every token needs a name of its own"
            ));
        }
    }
    Ok(())
}

/// A binding is for worker tokens (an admin may use any worker id).
fn check_binding(role: Role, patterns: &[String]) -> Result<WorkerIds, String> {
    if role != Role::Worker {
        return Err("workers= binds worker tokens only".into());
    }
    WorkerIds::new(patterns)
}

impl std::fmt::Debug for TokenEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenEntry")
            .field("role", &self.role)
            .field("name", &self.name)
            .field("workers", &self.workers)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// Parses a token file: one `ROLE TOKEN [NAME [workers=ID,PREFIX*,...]]` per line;
/// `#` comments and blank lines are skipped. The error names the line, never the token.
pub fn parse_token_file(text: &str) -> Result<Vec<TokenEntry>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut parts = line.split_whitespace();
        const FORM: &str = "ROLE TOKEN [NAME [workers=ID,...]]";
        let (Some(role), Some(token)) = (parts.next(), parts.next()) else {
            return Err(format!("line {}: expected `{FORM}`", i + 1));
        };
        let role = Role::parse(role).ok_or_else(|| {
            format!(
                "line {}: role must be producer, worker, scaler or admin",
                i + 1
            )
        })?;
        let name = parts.next();
        if name.is_some_and(|n| n.starts_with("workers=")) {
            return Err(format!(
                "line {}: give the token a NAME before workers=",
                i + 1
            ));
        }
        let workers = match parts.next() {
            None => None,
            Some(field) => {
                let Some(list) = field.strip_prefix("workers=") else {
                    return Err(format!("line {}: expected `{FORM}`", i + 1));
                };
                let list: Vec<String> = list.split(',').map(str::to_string).collect();
                check_binding(role, &list).map_err(|m| format!("line {}: {m}", i + 1))?;
                Some(list)
            }
        };
        if parts.next().is_some() {
            return Err(format!("line {}: expected `{FORM}`", i + 1));
        }
        out.push(TokenEntry {
            role,
            token: token.to_string(),
            name: name.map(str::to_string),
            workers,
        });
    }
    Ok(out)
}
