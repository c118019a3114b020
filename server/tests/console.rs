//! The web console over real HTTP on the broker's side port: pages and their
//! status codes, escaping, CSRF and same-site refusal, sign-in with auth on, and
//! the actions (cancel, requeue, change, bulk requeue of dead tasks).

mod common;

use std::collections::BTreeMap;

use std::net::SocketAddr;

use common::*;

use taskbroker_client::pb;

use taskbroker_server::api::auth::{Role, TokenEntry};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The CSRF token of the first form on the page.
    fn csrf(&self) -> String {
        let at = self
            .body
            .find("name=\"csrf\" value=\"")
            .unwrap_or_else(|| panic!("no csrf field in:\n{}", self.body));
        let rest = &self.body[at + 19..];
        rest[..rest.find('"').unwrap()].to_string()
    }
}

/// A browser with a cookie jar, speaking HTTP/1.1 (one connection per request).
struct Browser {
    addr: SocketAddr,
    cookies: BTreeMap<String, String>,
}

impl Browser {
    fn new(app: &TestApp) -> Self {
        Browser {
            addr: app.metrics_addr.expect("the HTTP port is on"),
            cookies: BTreeMap::new(),
        }
    }

    async fn request(
        &mut self,
        method: &str,
        path: &str,
        extra: &[(&str, &str)],
        body: &str,
    ) -> Resp {
        let mut s = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
            self.addr
        );
        if !self.cookies.is_empty() {
            let c: Vec<String> = self
                .cookies
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            req.push_str(&format!("Cookie: {}\r\n", c.join("; ")));
        }
        for (k, v) in extra {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        if method == "POST" {
            req.push_str("Content-Type: application/x-www-form-urlencoded\r\n");
            req.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        req.push_str("\r\n");
        req.push_str(body);
        s.write_all(req.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.unwrap();
        let raw = String::from_utf8(raw).expect("UTF-8 response");
        let (head, body) = raw.split_once("\r\n\r\n").expect("a full response");
        let mut lines = head.lines();
        let status = lines.next().unwrap()[9..12].parse().unwrap();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(": "))
            .map(|(k, v)| (k.to_lowercase(), v.to_string()))
            .collect();
        for (k, v) in &headers {
            if k == "set-cookie" {
                let pair = v.split(';').next().unwrap();
                let (name, value) = pair.split_once('=').unwrap();
                if value.is_empty() {
                    self.cookies.remove(name);
                } else {
                    self.cookies.insert(name.into(), value.into());
                }
            }
        }
        Resp {
            status,
            headers,
            body: body.to_string(),
        }
    }

    async fn get(&mut self, path: &str) -> Resp {
        self.request("GET", path, &[], "").await
    }

    async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Resp {
        let body: Vec<String> = form
            .iter()
            .map(|(k, v)| format!("{k}={}", encode(v)))
            .collect();
        self.request("POST", path, &[], &body.join("&")).await
    }
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

async fn console_app(auth: Vec<TokenEntry>) -> TestApp {
    spawn_app_with(
        Backend::Sqlite,
        Options {
            metrics: true,
            auth,
            ..Options::default()
        },
    )
    .await
    .expect("sqlite is always available")
}

/// Leases `queue`'s next task and fails it for good with `error`.
async fn kill_one(app: &TestApp, queue: &str, error: &str) -> String {
    let mut c = app.broker().await;
    let t = lease_one(&mut c, queue).await;
    c.fail(pb::FailRequest {
        prefer_same_worker: false,
        task_id: t.task_id.clone(),
        lease_token: t.lease_token,
        error_message: error.into(),
        non_retryable: true,
        retry_after: None,
        lease_next: None,
        cooldown: None,
    })
    .await
    .expect("fail");
    t.task_id
}

fn nightly(id: &str, queue: &str) -> pb::Schedule {
    pb::Schedule {
        schedule_id: id.into(),
        spec: Some(pb::ScheduleSpec {
            kind: Some(pb::schedule_spec::Kind::Cron("0 3 * * *".into())),
            timezone: "Europe/Berlin".into(),
            anchor: None,
        }),
        task: Some(pb::TaskTemplate {
            queue: queue.into(),
            payload: b"{}".to_vec(),
            metadata: [("note".to_string(), "<script>x</script>".to_string())].into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

// ---- A console on a given store ----

async fn console_on(backend: Backend) -> Option<TestApp> {
    spawn_app_with(
        backend,
        Options {
            metrics: true,
            ..Options::default()
        },
    )
    .await
}

async fn get_schedule(app: &TestApp, id: &str) -> Result<pb::Schedule, tonic::Status> {
    Ok(app
        .schedules()
        .await
        .get_schedule(pb::GetScheduleRequest {
            schedule_id: id.into(),
        })
        .await?
        .into_inner()
        .schedule
        .expect("a schedule"))
}

// Read-only pages: the overview, payloads, checkpoints, the task list and a task's event history.
#[path = "console/pages.rs"]
mod pages;
// Task actions: the CSRF guard, then requeue, change and cancel after confirmation.
#[path = "console/task_actions.rs"]
mod task_actions;
// Dead letters: grouped by error, requeued or cancelled by group or one by one.
#[path = "console/dead_letters.rs"]
mod dead_letters;
// Auth: admin tokens, sign-in and where it may redirect.
#[path = "console/auth.rs"]
mod auth;
// Schedules: pause, trigger, resume and delete after confirmation.
#[path = "console/schedule_actions.rs"]
mod schedule_actions;
// Queues, workers, Explain, charts and buckets, on every store.
#[path = "console/queues.rs"]
mod queues;
// The schedule form: creating and editing schedules, keeping what the form does not show.
#[path = "console/schedule_form.rs"]
mod schedule_form;
