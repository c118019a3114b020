//! Connecting: `ClientBuilder` (address, timeouts, token, TLS) and the channel it
//! makes, `Client`'s constructors and stubs, and each request's deadline and token.

use std::time::Duration;

use tonic::Request;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use super::{Client, ClientBuilder};
use crate::Error;
use crate::pb::admin_service_client::AdminServiceClient;
use crate::pb::broker_service_client::BrokerServiceClient;
use crate::pb::schedule_service_client::ScheduleServiceClient;

/// `host:port` becomes `http://host:port` (`https://` with `tls`); URLs are kept as
/// they are, except that TLS settings turn `http://` into `https://`.
pub(crate) fn normalize_addr(addr: &str, tls: bool) -> String {
    let scheme = if tls { "https" } else { "http" };
    match addr.strip_prefix("http://") {
        Some(rest) if tls => format!("https://{rest}"),
        _ if addr.contains("://") => addr.to_string(),
        _ => format!("{scheme}://{addr}"),
    }
}

impl ClientBuilder {
    /// How long establishing the TCP connection may take. Default 5 s.
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }

    /// The deadline of every call except Lease. Default 10 s: the broker answers in
    /// milliseconds, so a call that takes longer is stuck and is better retried.
    pub fn call_timeout(mut self, d: Duration) -> Self {
        self.call_timeout = d;
        self
    }

    /// Added to a long-poll Lease's `wait` to make its deadline, so the broker's empty
    /// answer arrives before the deadline does. Default 5 s.
    pub fn lease_margin(mut self, d: Duration) -> Self {
        self.lease_margin = d;
        self
    }

    /// A bearer token for a broker with authentication on; sent on every call.
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// TLS settings: the CA to trust (default: the root stores of the `tls-webpki-roots`
    /// / `tls-native-roots` features), a client identity for mTLS, the server name. Turns
    /// TLS on even for a bare `host:port` address. An `https://` address without this
    /// uses the enabled root stores.
    ///
    /// ```no_run
    /// # async fn demo(ca: Vec<u8>, cert: Vec<u8>, key: Vec<u8>) -> Result<(), taskbroker_client::Error> {
    /// use taskbroker_client::{Client, tls::{Certificate, ClientTlsConfig, Identity}};
    /// let tls = ClientTlsConfig::new()
    ///     .ca_certificate(Certificate::from_pem(ca))
    ///     .identity(Identity::from_pem(cert, key));
    /// let client = Client::builder("broker.internal:50051")
    ///     .tls_config(tls)
    ///     .bearer_token(std::env::var("TASKBROKER_TOKEN").unwrap_or_default())
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn tls_config(mut self, tls: ClientTlsConfig) -> Self {
        self.tls = Some(tls);
        self
    }

    /// TLS with the enabled root stores only (webpki and/or native roots), for a broker
    /// whose certificate a public CA signed.
    pub fn tls_with_enabled_roots(self) -> Self {
        self.tls_config(ClientTlsConfig::new().with_enabled_roots())
    }

    /// Applies the standard environment variables, when set (docs/client-spec.md, point 8):
    /// `TASKBROKER_TOKEN` (bearer token), `TASKBROKER_CA` (PEM file of the CA to trust; turns
    /// TLS on), `TASKBROKER_CLIENT_CERT` and `TASKBROKER_CLIENT_KEY` (PEM files, mTLS).
    pub fn env_settings(mut self) -> Result<Self, Error> {
        fn var(name: &str) -> Option<String> {
            std::env::var(name).ok().filter(|v| !v.is_empty())
        }
        fn read(name: &str, path: &str) -> Result<Vec<u8>, Error> {
            std::fs::read(path).map_err(|e| Error::Config(format!("{name} {path}: {e}")))
        }
        if let Some(token) = var("TASKBROKER_TOKEN") {
            self = self.bearer_token(token);
        }
        let ca = var("TASKBROKER_CA");
        let identity = match (var("TASKBROKER_CLIENT_CERT"), var("TASKBROKER_CLIENT_KEY")) {
            (Some(cert), Some(key)) => Some(tonic::transport::Identity::from_pem(
                read("TASKBROKER_CLIENT_CERT", &cert)?,
                read("TASKBROKER_CLIENT_KEY", &key)?,
            )),
            (None, None) => None,
            _ => {
                return Err(Error::Config(
                    "set both TASKBROKER_CLIENT_CERT and TASKBROKER_CLIENT_KEY, or neither".into(),
                ));
            }
        };
        if ca.is_some() || identity.is_some() {
            let mut tls = self.tls.take().unwrap_or_default();
            tls = match ca {
                Some(ca) => tls.ca_certificate(tonic::transport::Certificate::from_pem(read(
                    "TASKBROKER_CA",
                    &ca,
                )?)),
                None => tls.with_enabled_roots(),
            };
            if let Some(identity) = identity {
                tls = tls.identity(identity);
            }
            self.tls = Some(tls);
        }
        Ok(self)
    }

    fn authorization(&self) -> Result<Option<MetadataValue<Ascii>>, Error> {
        let Some(token) = &self.token else {
            return Ok(None);
        };
        let value = format!("Bearer {token}")
            .parse()
            .map_err(|_| Error::Config("the bearer token is not a valid header value".into()))?;
        Ok(Some(value))
    }

    fn endpoint(&self) -> Result<Endpoint, Error> {
        let addr = normalize_addr(&self.addr, self.tls.is_some());
        let mut endpoint = Endpoint::from_shared(addr.clone())
            .map_err(|source| Error::InvalidAddress { addr, source })?;
        let tls = match &self.tls {
            Some(tls) => Some(tls.clone()),
            None if endpoint.uri().scheme_str() == Some("https") => {
                Some(ClientTlsConfig::new().with_enabled_roots())
            }
            None => None,
        };
        if let Some(tls) = tls {
            endpoint = endpoint.tls_config(tls).map_err(Error::Tls)?;
        }
        Ok(endpoint
            .connect_timeout(self.connect_timeout)
            .tcp_nodelay(true)
            // Notices a dead broker on an idle connection (a worker waiting in a long poll).
            .http2_keep_alive_interval(Duration::from_secs(30))
            .keep_alive_while_idle(true))
    }

    /// Connects now; fails if the broker cannot be reached within the connect timeout.
    pub async fn connect(self) -> Result<Client, Error> {
        let authorization = self.authorization()?;
        let channel = self
            .endpoint()?
            .connect()
            .await
            .map_err(|source| Error::Connect {
                addr: self.addr.clone(),
                source,
            })?;
        Ok(self.with_channel(channel, authorization))
    }

    /// Connects on the first call instead (and reconnects as needed).
    pub fn connect_lazy(self) -> Result<Client, Error> {
        let authorization = self.authorization()?;
        let channel = self.endpoint()?.connect_lazy();
        Ok(self.with_channel(channel, authorization))
    }

    /// A client on a channel the caller built (its own connector, tower layers, load
    /// balancing), with this builder's token and timeouts. The address, connect timeout
    /// and TLS settings of the builder are not used: the channel has its own.
    pub fn build_on(self, channel: Channel) -> Result<Client, Error> {
        let authorization = self.authorization()?;
        Ok(self.with_channel(channel, authorization))
    }

    fn with_channel(self, channel: Channel, authorization: Option<MetadataValue<Ascii>>) -> Client {
        Client {
            broker: BrokerServiceClient::new(channel.clone()),
            admin: AdminServiceClient::new(channel.clone()),
            schedule: ScheduleServiceClient::new(channel),
            call_timeout: self.call_timeout,
            lease_margin: self.lease_margin,
            authorization,
            retry_defaults: Default::default(),
        }
    }
}

impl Client {
    /// Connects to `addr` (`http://host:port`, or just `host:port`) with the default
    /// timeouts.
    pub async fn connect(addr: impl Into<String>) -> Result<Client, Error> {
        Client::builder(addr).connect().await
    }

    /// Connection settings for `addr`, for timeouts other than the defaults.
    pub fn builder(addr: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            addr: addr.into(),
            connect_timeout: Duration::from_secs(5),
            call_timeout: Duration::from_secs(10),
            lease_margin: Duration::from_secs(5),
            token: None,
            tls: None,
        }
    }

    /// A client on a channel the caller built (for example with
    /// `Endpoint::connect_with_connector` or a balanced channel), with the default
    /// timeouts and no token; see [`ClientBuilder::build_on`] for those.
    pub fn from_channel(channel: Channel) -> Client {
        ClientBuilder {
            addr: String::new(),
            connect_timeout: Duration::from_secs(5),
            call_timeout: Duration::from_secs(10),
            lease_margin: Duration::from_secs(5),
            token: None,
            tls: None,
        }
        .with_channel(channel, None)
    }

    /// A request with the default call deadline.
    pub(crate) fn request<T>(&self, message: T) -> Request<T> {
        self.request_within(message, self.call_timeout)
    }

    pub(super) fn request_within<T>(&self, message: T, timeout: Duration) -> Request<T> {
        let mut request = Request::new(message);
        request.set_timeout(timeout);
        if let Some(auth) = &self.authorization {
            request.metadata_mut().insert("authorization", auth.clone());
        }
        // The broker's spans join the caller's trace.
        if let Some(tp) = crate::trace::current_traceparent()
            && let Ok(v) = tp.parse()
        {
            request.metadata_mut().insert(crate::trace::TRACEPARENT, v);
        }
        request
    }

    /// The generated BrokerService stub on this client's channel, for calls this
    /// crate does not wrap. It carries no deadline and no bearer token of its own.
    pub fn broker_stub(&self) -> BrokerServiceClient<Channel> {
        self.broker.clone()
    }

    /// The generated AdminService stub on this client's channel.
    pub fn admin_stub(&self) -> AdminServiceClient<Channel> {
        self.admin.clone()
    }

    /// The generated ScheduleService stub on this client's channel (see [`Client::schedules`]).
    pub fn schedule_stub(&self) -> ScheduleServiceClient<Channel> {
        self.schedule.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_host_port_gets_a_scheme() {
        assert_eq!(
            normalize_addr("127.0.0.1:50051", false),
            "http://127.0.0.1:50051"
        );
        assert_eq!(
            normalize_addr("https://broker:443", false),
            "https://broker:443"
        );
        assert_eq!(normalize_addr("broker:443", true), "https://broker:443");
        assert_eq!(
            normalize_addr("http://broker:443", true),
            "https://broker:443"
        );
    }

    #[tokio::test]
    async fn bad_addresses_and_tokens_are_reported_not_panicked() {
        let e = Client::builder("http://bad host")
            .connect_lazy()
            .unwrap_err();
        assert!(matches!(e, Error::InvalidAddress { .. }), "{e}");
        let e = Client::builder("http://127.0.0.1:1")
            .bearer_token("a\nb")
            .connect_lazy()
            .unwrap_err();
        assert!(matches!(e, Error::Config(_)), "{e}");
    }

    #[tokio::test]
    async fn every_call_carries_the_deadline_and_the_token() {
        let c = Client::builder("http://127.0.0.1:1")
            .bearer_token("s3cret")
            .connect_lazy()
            .unwrap();
        let r = c.request(());
        assert_eq!(r.metadata().get("authorization").unwrap(), "Bearer s3cret");
        assert_eq!(r.metadata().get("grpc-timeout").unwrap(), "10000000u");
        let plain = Client::builder("http://127.0.0.1:1")
            .connect_lazy()
            .unwrap();
        assert!(plain.request(()).metadata().get("authorization").is_none());
    }

    #[tokio::test]
    async fn a_channel_from_the_caller_keeps_the_builders_token() {
        let channel = Endpoint::from_static("http://127.0.0.1:1").connect_lazy();
        let c = Client::builder("ignored")
            .bearer_token("s3cret")
            .build_on(channel.clone())
            .unwrap();
        assert_eq!(
            c.request(()).metadata().get("authorization").unwrap(),
            "Bearer s3cret"
        );
        let bare = Client::from_channel(channel);
        assert!(bare.request(()).metadata().get("authorization").is_none());
    }
}
