//! Test harness: a real broker on 127.0.0.1:0 over a fresh database of either
//! backend, real gRPC clients, and a manual clock for time-dependent rules.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use taskbroker_client::pb;
use taskbroker_client::pb::admin_service_client::AdminServiceClient;
use taskbroker_client::pb::broker_service_client::BrokerServiceClient;
use taskbroker_server::app::{self, App, AppConfig};
use taskbroker_server::service::{Clock, ManualClock, Settings, SystemClock};
use taskbroker_server::store::Reaped;
use tonic::transport::Channel;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
    Mysql,
}

/// A fresh database: a temp file, or a new Postgres database on the test cluster.
pub struct TestDb {
    pub url: String,
    _dir: Option<tempfile::TempDir>,
}

/// The test cluster's admin URL. Without one, Postgres tests are skipped, unless
/// TASKBROKER_REQUIRE_POSTGRES is set (as scripts/test.sh does), when they fail.
pub fn postgres_admin_url() -> Option<String> {
    match std::env::var("TASKBROKER_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var("TASKBROKER_REQUIRE_POSTGRES").is_err(),
                "TASKBROKER_TEST_POSTGRES_URL is not set but Postgres tests are required"
            );
            eprintln!("skipped: TASKBROKER_TEST_POSTGRES_URL is not set");
            None
        }
    }
}

/// The MySQL/MariaDB test server's URL (scripts/mysql.sh). Without one, MySQL
/// tests are skipped, unless TASKBROKER_REQUIRE_MYSQL is set, when they fail.
pub fn mysql_admin_url() -> Option<String> {
    match std::env::var("TASKBROKER_TEST_MYSQL_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var("TASKBROKER_REQUIRE_MYSQL").is_err(),
                "TASKBROKER_TEST_MYSQL_URL is not set but MySQL tests are required"
            );
            eprintln!("skipped: TASKBROKER_TEST_MYSQL_URL is not set");
            None
        }
    }
}

impl TestDb {
    /// An existing database, owned elsewhere.
    pub fn from_url(url: String) -> Self {
        TestDb { url, _dir: None }
    }
}

pub async fn test_db(backend: Backend) -> Option<TestDb> {
    match backend {
        Backend::Sqlite => {
            let dir = tempfile::tempdir().expect("tempdir");
            let url = format!("sqlite://{}/tb.db", dir.path().display());
            Some(TestDb {
                url,
                _dir: Some(dir),
            })
        }
        Backend::Postgres => {
            let admin = postgres_admin_url()?;
            let name = format!("tb_{}", uuid_simple());
            let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin)
                .await
                .expect("connect to the test cluster");
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                .execute(&mut conn)
                .await
                .expect("create test database");
            let base = admin.rsplit_once('/').expect("url has a path").0;
            Some(TestDb {
                url: format!("{base}/{name}"),
                _dir: None,
            })
        }
        Backend::Mysql => {
            let admin = mysql_admin_url()?;
            let name = format!("tb_{}", uuid_simple());
            let mut conn = <sqlx::MySqlConnection as sqlx::Connection>::connect(&admin)
                .await
                .expect("connect to the MySQL test server");
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                .execute(&mut conn)
                .await
                .expect("create test database");
            let base = admin.rsplit_once('/').expect("url has a path").0;
            Some(TestDb {
                url: format!("{base}/{name}"),
                _dir: None,
            })
        }
    }
}

fn uuid_simple() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "{}_{}_{}",
        std::process::id(),
        t,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub struct TestApp {
    pub addr: std::net::SocketAddr,
    pub metrics_addr: Option<std::net::SocketAddr>,
    pub app: Option<App>,
    pub clock: Arc<ManualClock>,
    pub db: Arc<TestDb>,
}

pub struct Options {
    /// Use the manual clock (time moves only with `advance`) and no background reaper.
    pub manual_clock: bool,
    pub reclaim_interval: Duration,
    pub settings: Settings,
    /// Serve Prometheus metrics on a free port.
    pub metrics: bool,
    pub auth: Vec<taskbroker_server::api::auth::TokenEntry>,
    pub tls: Option<taskbroker_server::app::TlsOptions>,
    pub server: Option<taskbroker_server::app::ServerOptions>,
    /// The database pool's size (8 unless set).
    pub db_max_connections: Option<u32>,
    /// How old `/metrics` queue depths may grow (the app's default unless set).
    pub metrics_depth_max_age: Option<Duration>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            manual_clock: true,
            reclaim_interval: Duration::from_secs(3600),
            settings: Settings::default(),
            metrics: false,
            auth: Vec::new(),
            tls: None,
            server: None,
            db_max_connections: None,
            metrics_depth_max_age: None,
        }
    }
}

/// A broker on a fresh database with the manual clock; `None` when the backend is
/// not available here (Postgres without a test cluster).
pub async fn spawn_app(backend: Backend) -> Option<TestApp> {
    spawn_app_with(backend, Options::default()).await
}

pub async fn spawn_app_with(backend: Backend, opts: Options) -> Option<TestApp> {
    let db = Arc::new(test_db(backend).await?);
    Some(spawn_on(db, opts).await)
}

/// Another broker on an existing database (as a second replica would be).
pub async fn spawn_on(db: Arc<TestDb>, opts: Options) -> TestApp {
    let manual = Arc::new(ManualClock::default());
    let clock: Arc<dyn Clock> = if opts.manual_clock {
        manual.clone()
    } else {
        Arc::new(SystemClock)
    };
    let mut config = AppConfig::new(db.url.clone());
    config.db_max_connections = opts.db_max_connections.unwrap_or(8);
    config.reclaim_interval = opts.reclaim_interval;
    // With the manual clock, tests drive the scheduler with `run_once` themselves.
    if opts.manual_clock {
        config.schedule_interval = Duration::from_secs(3600);
    }
    config.settings = opts.settings;
    config.metrics_listen = opts.metrics.then(|| "127.0.0.1:0".parse().unwrap());
    config.auth = opts.auth;
    config.tls = opts.tls;
    if let Some(server) = opts.server {
        config.server = server;
    }
    if let Some(age) = opts.metrics_depth_max_age {
        config.metrics_depth_max_age = age;
    }
    let app = app::start(config, clock).await.expect("broker starts");
    TestApp {
        addr: app.addr,
        metrics_addr: app.metrics_addr,
        app: Some(app),
        clock: manual,
        db,
    }
}

impl TestApp {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub async fn broker(&self) -> BrokerServiceClient<Channel> {
        BrokerServiceClient::connect(self.url())
            .await
            .expect("connect")
    }

    pub async fn admin(&self) -> AdminServiceClient<Channel> {
        AdminServiceClient::connect(self.url())
            .await
            .expect("connect")
    }

    /// The broker's service layer (below gRPC), for tests that drive it directly.
    pub fn service(&self) -> Arc<taskbroker_server::service::Broker> {
        self.app.as_ref().expect("running").broker.clone()
    }

    /// Returns once `n` long-polls wait on this broker (bounded: panics after 20 s).
    pub async fn until_waiting(&self, n: usize) {
        let broker = self.service();
        let give_up = tokio::time::Instant::now() + Duration::from_secs(20);
        while broker.dispatcher().waiters() < n {
            assert!(
                tokio::time::Instant::now() < give_up,
                "{n} long-polls never waited"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    pub async fn schedules(
        &self,
    ) -> taskbroker_client::pb::schedule_service_client::ScheduleServiceClient<Channel> {
        taskbroker_client::pb::schedule_service_client::ScheduleServiceClient::connect(self.url())
            .await
            .expect("connect")
    }

    /// One scheduler pass at the manual clock's now.
    pub async fn fire_schedules(&self) -> taskbroker_server::maintenance::scheduler::SchedulerPass {
        let app = self.app.as_ref().expect("running");
        taskbroker_server::maintenance::Scheduler::new(app.broker.clone(), Duration::from_secs(1))
            .run_once(app.broker.clock().now())
            .await
            .expect("scheduler pass")
    }

    pub fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    /// One reaper pass at the manual clock's now.
    pub async fn reap(&self) -> Reaped {
        let app = self.app.as_ref().expect("running");
        taskbroker_server::maintenance::Reaper::new(app.broker.clone(), Duration::from_secs(1))
            .run_once(app.broker.clock().now())
            .await
            .expect("reaper pass")
    }

    pub async fn shutdown(mut self) {
        if let Some(app) = self.app.take() {
            app.shutdown(Duration::from_secs(5))
                .await
                .expect("clean shutdown");
        }
    }
}

// ---- request builders ----

pub fn spec(queue: &str) -> pb::TaskSpec {
    pb::TaskSpec {
        queue: queue.to_string(),
        ..Default::default()
    }
}

pub fn dur(d: Duration) -> Option<prost_types::Duration> {
    Some(prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    })
}

pub fn secs(s: u64) -> Option<prost_types::Duration> {
    dur(Duration::from_secs(s))
}

pub fn ts(t: chrono::DateTime<chrono::Utc>) -> Option<prost_types::Timestamp> {
    Some(prost_types::Timestamp {
        seconds: t.timestamp(),
        nanos: t.timestamp_subsec_nanos() as i32,
    })
}

pub fn from_ts(t: &Option<prost_types::Timestamp>) -> chrono::DateTime<chrono::Utc> {
    let t = t.as_ref().expect("timestamp set");
    chrono::DateTime::from_timestamp(t.seconds, t.nanos as u32).unwrap()
}

/// A retry policy that retries at once.
pub fn retry_now(max_attempts: u32) -> Option<pb::RetryPolicy> {
    Some(pb::RetryPolicy {
        max_attempts,
        initial_backoff: secs(0),
        jitter: Some(0.0),
        ..Default::default()
    })
}

pub async fn submit(c: &mut BrokerServiceClient<Channel>, tasks: Vec<pb::TaskSpec>) -> Vec<String> {
    c.submit(pb::SubmitRequest { tasks })
        .await
        .expect("submit")
        .into_inner()
        .results
        .into_iter()
        .map(|r| r.task_id)
        .collect()
}

pub async fn submit_one(c: &mut BrokerServiceClient<Channel>, t: pb::TaskSpec) -> String {
    submit(c, vec![t]).await.remove(0)
}

pub fn lease_req(queue: &str, max_tasks: u32) -> pb::LeaseRequest {
    pb::LeaseRequest {
        worker_id: "w1".into(),
        queues: vec![queue.into()],
        max_tasks,
        lease_duration: secs(30),
        wait: None,
        labels: Default::default(),
    }
}

pub async fn lease(
    c: &mut BrokerServiceClient<Channel>,
    queue: &str,
    max_tasks: u32,
) -> Vec<pb::LeasedTask> {
    c.lease(lease_req(queue, max_tasks))
        .await
        .expect("lease")
        .into_inner()
        .tasks
}

pub async fn lease_one(c: &mut BrokerServiceClient<Channel>, queue: &str) -> pb::LeasedTask {
    let mut t = lease(c, queue, 1).await;
    assert_eq!(t.len(), 1, "expected one leased task");
    t.remove(0)
}

pub async fn get(c: &mut AdminServiceClient<Channel>, id: &str) -> pb::Task {
    c.get_task(pb::GetTaskRequest { task_id: id.into() })
        .await
        .expect("get task")
        .into_inner()
        .task
        .expect("task")
}

pub fn state(t: &pb::Task) -> pb::TaskState {
    pb::TaskState::try_from(t.state).expect("known state")
}

/// The ErrorInfo reason of a status, if it carries one.
pub fn error_reason(s: &tonic::Status) -> Option<String> {
    use tonic_types::StatusExt;
    s.get_details_error_info().map(|i| i.reason)
}

/// The field named by a BadRequest detail.
pub fn bad_field(s: &tonic::Status) -> Option<String> {
    use tonic_types::StatusExt;
    s.get_details_bad_request()
        .and_then(|b| b.field_violations.first().map(|v| v.field.clone()))
}

/// Generates one `#[tokio::test]` per backend for each listed async fn(Backend).
#[macro_export]
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::Backend::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::Backend::Postgres).await
                }
            )*
        }
    };
}

/// As [`both_backends`], and on MySQL too (the store conformance suites).
#[macro_export]
macro_rules! all_backends {
    ($($name:ident),* $(,)?) => {
        $crate::both_backends!($($name),*);
        mod mysql {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::Backend::Mysql).await
                }
            )*
        }
    };
}
