//! The tokens the broker accepts: their roles, one configured entry, and the
//! token file (`ROLE TOKEN [NAME]` per line). Configuration reads them; the gRPC
//! and console guards check calls against them.

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

/// One configured token.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub struct TokenEntry {
    pub role: Role,
    pub token: String,
    #[serde(default)]
    pub name: Option<String>,
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
/// with one name would see and own each other's tasks.
pub fn check_unique_names(entries: &[TokenEntry]) -> Result<(), String> {
    let mut seen = std::collections::HashSet::new();
    for e in entries {
        let name = e.identity();
        if !seen.insert(name.clone()) {
            return Err(format!(
                "auth tokens: the name {name:?} is given to more than one token; every token needs a name of its own"
            ));
        }
    }
    Ok(())
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
        let role = Role::parse(role).ok_or_else(|| {
            format!(
                "line {}: role must be producer, worker, scaler or admin",
                i + 1
            )
        })?;
        out.push(TokenEntry {
            role,
            token: token.to_string(),
            name: parts.next().map(str::to_string),
        });
    }
    Ok(out)
}
