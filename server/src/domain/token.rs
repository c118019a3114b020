//! The tokens the broker accepts: their roles, one configured entry, the
//! worker ids and queues a worker token may use, and the token file
//! (`ROLE TOKEN [NAME [workers=ID,PREFIX*,...] [queues=QUEUE,PREFIX*,...]]` per line). Configuration reads
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

/// What a worker token is bound to: worker ids (`workers=`) or queues
/// (`queues=`), each an exact name or a prefix written with a trailing `*`
/// (`gpu-*` allows `gpu-1` and `gpu-`; `*` alone allows every name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding(Vec<String>);

/// The worker ids a worker token may lease, heartbeat and settle under.
pub type WorkerIds = Binding;
/// The queues a worker token may lease from, and whose leases it may heartbeat and settle.
pub type QueueNames = Binding;

/// The two kinds of binding: the token-file word, and what one entry names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    Workers,
    Queues,
}

impl Bound {
    /// The word of the token file and the key of the inline configuration.
    pub fn key(self) -> &'static str {
        match self {
            Bound::Workers => "workers",
            Bound::Queues => "queues",
        }
    }

    fn names(self) -> &'static str {
        match self {
            Bound::Workers => "worker id",
            Bound::Queues => "queue",
        }
    }
}

impl Binding {
    /// Checks a list of patterns: at least one, each non-empty, without
    /// whitespace, `*` only as the last character.
    pub fn new(kind: Bound, patterns: &[String]) -> Result<Binding, String> {
        let (key, names) = (kind.key(), kind.names());
        if patterns.is_empty() {
            return Err(format!("{key}= needs at least one {names}"));
        }
        for p in patterns {
            let exact = p.strip_suffix('*').unwrap_or(p);
            if p.is_empty() || exact.contains('*') || p.chars().any(char::is_whitespace) {
                return Err(format!(
                    "{key}= entry {p:?} must be a {names} or a prefix ending in `*`"
                ));
            }
        }
        Ok(Binding(patterns.to_vec()))
    }

    /// A binding that allows nothing (what a malformed one becomes).
    pub fn deny_all() -> Binding {
        Binding(Vec::new())
    }

    /// Whether `name` is one of the exact names or starts with one of the prefixes.
    pub fn allows(&self, name: &str) -> bool {
        self.0.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == p,
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
    /// For a worker token: the queues it may lease from, and whose leases it may
    /// heartbeat, checkpoint and settle (exact names or prefixes ending in `*`);
    /// `None` allows any.
    #[serde(default)]
    pub queues: Option<Vec<String>>,
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
/// worker-id and queue bindings (worker tokens only, well-formed patterns).
pub fn check_unique_names(entries: &[TokenEntry]) -> Result<(), String> {
    let mut seen = std::collections::HashSet::new();
    for e in entries {
        for (kind, list) in [(Bound::Workers, &e.workers), (Bound::Queues, &e.queues)] {
            if let Some(list) = list {
                check_binding(e.role, kind, list).map_err(|m| format!("auth tokens: {m}"))?;
            }
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

/// A binding is for worker tokens (an admin may use any worker id and queue).
fn check_binding(role: Role, kind: Bound, patterns: &[String]) -> Result<Binding, String> {
    if role != Role::Worker {
        return Err(format!("{}= binds worker tokens only", kind.key()));
    }
    Binding::new(kind, patterns)
}

impl std::fmt::Debug for TokenEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenEntry")
            .field("role", &self.role)
            .field("name", &self.name)
            .field("workers", &self.workers)
            .field("queues", &self.queues)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// Parses a token file: one `ROLE TOKEN [NAME [workers=ID,PREFIX*,...]
/// [queues=QUEUE,PREFIX*,...]]` per line (the two bindings in either order, each at
/// most once); `#` comments and blank lines are skipped. The error names the
/// line, never the token.
pub fn parse_token_file(text: &str) -> Result<Vec<TokenEntry>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut parts = line.split_whitespace();
        const FORM: &str = "ROLE TOKEN [NAME [workers=ID,...] [queues=QUEUE,...]]";
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
        for kind in [Bound::Workers, Bound::Queues] {
            if name.is_some_and(|n| n.starts_with(&format!("{}=", kind.key()))) {
                return Err(format!(
                    "line {}: give the token a NAME before {}=",
                    i + 1,
                    kind.key()
                ));
            }
        }
        let (mut workers, mut queues) = (None, None);
        for field in parts {
            let (kind, slot, list) = match (
                field.strip_prefix("workers="),
                field.strip_prefix("queues="),
            ) {
                (Some(list), _) => (Bound::Workers, &mut workers, list),
                (_, Some(list)) => (Bound::Queues, &mut queues, list),
                _ => return Err(format!("line {}: expected `{FORM}`", i + 1)),
            };
            if slot.is_some() {
                return Err(format!("line {}: {}= is given twice", i + 1, kind.key()));
            }
            let list: Vec<String> = list.split(',').map(str::to_string).collect();
            check_binding(role, kind, &list).map_err(|m| format!("line {}: {m}", i + 1))?;
            *slot = Some(list);
        }
        out.push(TokenEntry {
            role,
            token: token.to_string(),
            name: name.map(str::to_string),
            workers,
            queues,
        });
    }
    Ok(out)
}
