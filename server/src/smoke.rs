//! `taskbroker smoke`: checks a running broker end to end, as `helm test` does.
//! Health (liveness and readiness), then Submit of one task to a fresh queue, Lease
//! of that task and Complete. Tokens come from a flag or from the broker's own token
//! file (a producer-capable one for Submit, a worker-capable one for Lease), so the
//! chart's test pod needs no secret of its own. TLS takes a CA and, for brokers that
//! verify clients, a client certificate.
//!
//! This module is the command only; it talks to the broker over gRPC like any client.

use std::path::PathBuf;
use std::time::Duration;

use taskbroker_client::pb;
use taskbroker_client::pb::broker_service_client::BrokerServiceClient;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::domain::token::{Role, parse_token_file};

#[derive(Debug, clap::Args)]
pub struct SmokeArgs {
    /// The broker's address: http://HOST:PORT, https://HOST:PORT or HOST:PORT.
    #[arg(
        long,
        env = "TASKBROKER_ADDR",
        default_value = "http://127.0.0.1:50051"
    )]
    pub addr: String,
    /// Bearer token for every call (a producer+worker pair is read from
    /// --tokens-file instead when that is given).
    #[arg(long, env = "TASKBROKER_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The broker's token file (`ROLE TOKEN [NAME]` lines): Submit uses a producer
    /// (or admin) token, Lease and Complete a worker (or admin) token.
    #[arg(long, env = "TASKBROKER_AUTH_TOKENS_FILE")]
    pub tokens_file: Option<PathBuf>,
    /// CA certificate (PEM) that signed the broker's certificate; turns TLS on.
    #[arg(long)]
    pub tls_ca: Option<PathBuf>,
    /// Client certificate and key (PEM), for a broker that verifies clients.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// The name the broker's certificate is checked against. Default: the host of --addr.
    #[arg(long)]
    pub tls_domain: Option<String>,
    /// Prefix of the queue the test task goes to (a random suffix keeps runs apart).
    #[arg(long, default_value = "smoke-test")]
    pub queue_prefix: String,
    /// How long the whole check may take.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

/// Why the check failed; one line for the operator.
#[derive(Debug, thiserror::Error)]
pub enum SmokeError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Config(String),
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: String,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("{step}: {code}: {message}")]
    Rpc {
        step: &'static str,
        code: &'static str,
        message: String,
    },
    #[error("{0}")]
    Check(String),
    #[error("the check did not finish within {0:?}")]
    Timeout(Duration),
}

fn read(path: &PathBuf) -> Result<Vec<u8>, SmokeError> {
    std::fs::read(path).map_err(|source| SmokeError::Read {
        path: path.clone(),
        source,
    })
}

fn rpc(step: &'static str) -> impl FnOnce(tonic::Status) -> SmokeError {
    move |s| SmokeError::Rpc {
        step,
        code: taskbroker_client::code_name(s.code()),
        message: s.message().to_string(),
    }
}

/// The tokens for Submit and for the worker calls.
fn tokens(args: &SmokeArgs) -> Result<(Option<String>, Option<String>), SmokeError> {
    let Some(path) = &args.tokens_file else {
        return Ok((args.token.clone(), args.token.clone()));
    };
    let text = String::from_utf8(read(path)?)
        .map_err(|_| SmokeError::Config(format!("{} is not UTF-8", path.display())))?;
    let entries = parse_token_file(&text)
        .map_err(|e| SmokeError::Config(format!("{}: {e}", path.display())))?;
    // The narrowest role that may make the call, admin only when nothing narrower exists;
    // not a worker token bound to worker ids or queues (the smoke test leases as
    // `smoke-...` from a queue of its own).
    let pick = |role: Role| {
        entries
            .iter()
            .find(|e| e.role == role && e.workers.is_none() && e.queues.is_none())
            .or_else(|| entries.iter().find(|e| e.role == Role::Admin))
            .map(|e| e.token.clone())
    };
    match (pick(Role::Producer), pick(Role::Worker)) {
        (Some(p), Some(w)) => Ok((Some(p), Some(w))),
        _ => Err(SmokeError::Config(format!(
            "{} has no producer (or admin) and worker (or admin) token",
            path.display()
        ))),
    }
}

async fn connect(args: &SmokeArgs) -> Result<Channel, SmokeError> {
    let tls = args.tls_ca.is_some() || args.addr.starts_with("https://");
    let addr = if args.addr.contains("://") {
        args.addr.clone()
    } else if tls {
        format!("https://{}", args.addr)
    } else {
        format!("http://{}", args.addr)
    };
    let mut endpoint = Endpoint::from_shared(addr.clone())
        .map_err(|_| SmokeError::Config(format!("--addr {addr:?} is not a URL")))?
        .connect_timeout(Duration::from_secs(5));
    if tls {
        let mut config = ClientTlsConfig::new();
        if let Some(ca) = &args.tls_ca {
            config = config.ca_certificate(Certificate::from_pem(read(ca)?));
        }
        if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
            config = config.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        if let Some(domain) = &args.tls_domain {
            config = config.domain_name(domain.clone());
        }
        endpoint = endpoint
            .tls_config(config)
            .map_err(|source| SmokeError::Connect {
                addr: addr.clone(),
                source,
            })?;
    }
    endpoint
        .connect()
        .await
        .map_err(|source| SmokeError::Connect { addr, source })
}

fn authorized<T>(msg: T, token: &Option<String>) -> Result<tonic::Request<T>, SmokeError> {
    let mut req = tonic::Request::new(msg);
    if let Some(t) = token {
        let value = format!("Bearer {t}")
            .parse()
            .map_err(|_| SmokeError::Config("the token is not a valid header value".into()))?;
        req.metadata_mut().insert("authorization", value);
    }
    Ok(req)
}

fn random_suffix() -> String {
    format!("{:08x}", rand::random::<u32>())
}

/// Runs the check; returns the report printed on success.
pub async fn run(args: SmokeArgs) -> Result<String, SmokeError> {
    let timeout = args.timeout;
    tokio::time::timeout(timeout, check(args))
        .await
        .map_err(|_| SmokeError::Timeout(timeout))?
}

// `..Default::default()` on requests whose fields are all set today: fields the
// contract adds later keep their defaults here without an edit.
#[allow(clippy::needless_update)]
async fn check(args: SmokeArgs) -> Result<String, SmokeError> {
    let (producer, worker) = tokens(&args)?;
    let channel = connect(&args).await?;
    let mut out = String::new();

    let mut health = HealthClient::new(channel.clone());
    for (service, label) in [("", "liveness"), (crate::app::READINESS, "readiness")] {
        let status = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .map_err(rpc("health"))?
            .into_inner()
            .status();
        if status != ServingStatus::Serving {
            return Err(SmokeError::Check(format!(
                "{label}: the broker answers {}",
                status.as_str_name()
            )));
        }
        out.push_str(&format!("{label}: SERVING\n"));
    }

    let queue = format!("{}-{}", args.queue_prefix, random_suffix());
    let mut broker = BrokerServiceClient::new(channel);
    let submitted = broker
        .submit(authorized(
            pb::SubmitRequest {
                tasks: vec![pb::TaskSpec {
                    queue: queue.clone(),
                    payload: b"smoke".to_vec(),
                    ..Default::default()
                }],
            },
            &producer,
        )?)
        .await
        .map_err(rpc("submit"))?
        .into_inner();
    let task_id = submitted
        .results
        .first()
        .map(|r| r.task_id.clone())
        .ok_or_else(|| SmokeError::Check("submit: the broker returned no task".into()))?;
    out.push_str(&format!("submit: task {task_id} on queue {queue}\n"));

    let lease = pb::LeaseRequest {
        worker_id: format!("smoke-{}", random_suffix()),
        queues: vec![queue.clone()],
        max_tasks: 1,
        lease_duration: Some(prost_types::Duration {
            seconds: 30,
            nanos: 0,
        }),
        wait: Some(prost_types::Duration {
            seconds: 10,
            nanos: 0,
        }),
        ..Default::default()
    };
    let leased = broker
        .lease(authorized(lease, &worker)?)
        .await
        .map_err(rpc("lease"))?
        .into_inner();
    let Some(task) = leased.tasks.into_iter().find(|t| t.task_id == task_id) else {
        return Err(SmokeError::Check(format!(
            "lease: task {task_id} was not leased from {queue}"
        )));
    };
    out.push_str(&format!("lease: task {task_id}\n"));

    let complete = pb::CompleteRequest {
        task_id: task.task_id,
        lease_token: task.lease_token,
        result: b"ok".to_vec(),
        ..Default::default()
    };
    broker
        .complete(authorized(complete, &worker)?)
        .await
        .map_err(rpc("complete"))?;
    out.push_str(&format!("complete: task {task_id}\nsmoke test passed\n"));
    Ok(out)
}
