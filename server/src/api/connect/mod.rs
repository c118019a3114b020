//! HTTP/JSON on the gRPC port: the Connect protocol (connectrpc.com/docs/protocol).
//!
//! A tower layer in front of the guard recognises a Connect request by its
//! content type (`application/json`, `application/proto`, and for server streaming
//! `application/connect+json`, `application/connect+proto`), turns its body into
//! the method's protobuf message (`codec`), and calls the same tonic router as a
//! gRPC request: authentication, load shedding, timeouts, size limits, metrics
//! and every handler run once, for both. The gRPC reply or status comes back as
//! Connect's: the message as JSON (or protobuf), or an error
//! `{"code": "invalid_argument", "message": ..., "details": [...]}` with the
//! protocol's HTTP status. Any other request (gRPC, gRPC-Web) passes through.

pub mod codec;
pub mod cors;
mod stream;

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::future::BoxFuture;
use http::{HeaderMap, HeaderValue, StatusCode};
use http_body_util::BodyExt;
use prost_reflect::MethodDescriptor;
use tonic::body::Body;
use tonic::{Code, Status};
use tower::{Layer, Service};

use self::codec::Codec;
use super::auth::Authenticator;
use crate::metrics::Metrics;

/// What the content types of Connect are, for `Accept-Post`.
const ACCEPTED: &str =
    "application/json, application/proto, application/connect+json, application/connect+proto";

#[derive(Clone)]
pub struct ConnectLayer {
    state: Arc<State>,
}

struct State {
    /// Largest request body read: twice the largest message (JSON spells bytes
    /// in base64 and names every field); the message itself is then held to the
    /// gRPC limit by the same check as a gRPC call's.
    max_body: usize,
    /// The guard's own check, asked again only to answer a request the layer
    /// refuses itself (a body that does not parse) as a gRPC call would be:
    /// without a valid token, "unauthenticated" comes first.
    auth: Option<Authenticator>,
    metrics: Arc<Metrics>,
}

impl ConnectLayer {
    pub fn new(max_message: usize, auth: Option<Authenticator>, metrics: Arc<Metrics>) -> Self {
        ConnectLayer {
            state: Arc::new(State {
                max_body: max_message.saturating_mul(2),
                auth,
                metrics,
            }),
        }
    }
}

impl<S> Layer<S> for ConnectLayer {
    type Service = Connect<S>;

    fn layer(&self, inner: S) -> Connect<S> {
        Connect {
            inner,
            state: self.state.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Connect<S> {
    inner: S,
    state: Arc<State>,
}

/// What a request is.
enum Route {
    /// Not Connect: gRPC, gRPC-Web, or a path this port does not serve.
    Pass,
    Unary(Codec, MethodDescriptor),
    Stream(Codec, MethodDescriptor),
    /// A Connect request this port refuses before reading it.
    Refuse(Response),
}

type Response = http::Response<Body>;

fn route(req: &http::Request<Body>) -> Route {
    let ct = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let (mime, params) = ct.split_once(';').unwrap_or((&ct, ""));
    let mime = mime.trim();
    if mime.starts_with("application/grpc") || req.method() != http::Method::POST {
        return Route::Pass;
    }
    let method = codec::METHODS.get(req.uri().path());
    let (streaming, codec) = match mime {
        "application/json" => (false, Codec::Json),
        "application/proto" => (false, Codec::Proto),
        "application/connect+json" => (true, Codec::Json),
        "application/connect+proto" => (true, Codec::Proto),
        _ if method.is_some() => return Route::Refuse(unsupported(mime)),
        _ => return Route::Pass,
    };
    let charset = params
        .split(';')
        .filter_map(|p| p.trim().strip_prefix("charset="))
        .next();
    if charset.is_some_and(|c| c.trim_matches('"') != "utf-8") {
        return Route::Refuse(unsupported(&ct));
    }
    let Some(method) = method else {
        let status = Status::unimplemented(format!("no method {}", req.uri().path()));
        return Route::Refuse(error_response(&status, StatusCode::NOT_FOUND, None));
    };
    if method.is_client_streaming() {
        let status = Status::unimplemented(format!(
            "{} is a client-streaming method: call it over gRPC",
            method.full_name()
        ));
        return Route::Refuse(error_response(&status, StatusCode::NOT_IMPLEMENTED, None));
    }
    match (streaming, method.is_server_streaming()) {
        (false, false) => Route::Unary(codec, method.clone()),
        (true, true) => Route::Stream(codec, method.clone()),
        (false, true) => Route::Refuse(unsupported_for(
            method,
            "is server-streaming: send application/connect+json",
        )),
        (true, false) => Route::Refuse(unsupported_for(method, "is unary: send application/json")),
    }
}

fn unsupported(ct: &str) -> Response {
    let status = Status::unimplemented(format!(
        "content type {ct:?} is not served here; send one of {ACCEPTED}"
    ));
    with_accept_post(error_response(
        &status,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        None,
    ))
}

fn unsupported_for(method: &MethodDescriptor, what: &str) -> Response {
    let status = Status::unimplemented(format!("{} {what}", method.full_name()));
    with_accept_post(error_response(
        &status,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        None,
    ))
}

fn with_accept_post(mut resp: Response) -> Response {
    resp.headers_mut()
        .insert("accept-post", HeaderValue::from_static(ACCEPTED));
    resp
}

impl<S> Service<http::Request<Body>> for Connect<S>
where
    S: Service<http::Request<Body>, Response = Response> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let route = route(&req);
        if let Route::Refuse(resp) = route {
            return Box::pin(async move { Ok(resp) });
        }
        // The clone is ready only if polled; swap so the polled one serves this call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let state = self.state.clone();
        match route {
            Route::Unary(codec, method) => Box::pin(unary(inner, state, req, codec, method)),
            Route::Stream(codec, method) => {
                Box::pin(stream::call(inner, state, req, codec, method))
            }
            Route::Pass | Route::Refuse(_) => Box::pin(inner.call(req)),
        }
    }
}

/// A Connect request ready to go to the router as gRPC, and its deadline.
struct Prepared {
    request: http::Request<Body>,
    timeout: Option<Duration>,
}

/// Checks the Connect headers, reads the body (at most `max_body`), turns it into
/// the method's message and builds the gRPC request. `enveloped`: the body is one
/// length-prefixed message (streaming), else the message itself (unary). A refusal
/// keeps the request's head for `refuse`.
async fn prepare(
    state: &State,
    req: http::Request<Body>,
    codec: Codec,
    method: &MethodDescriptor,
    enveloped: bool,
) -> Result<Prepared, (Status, http::request::Parts)> {
    let (mut parts, body) = req.into_parts();
    let checked = check_headers(&parts.headers, enveloped);
    let timeout = match checked {
        Ok(t) => t,
        Err(s) => return Err((s, parts)),
    };
    let body = match http_body_util::Limited::new(body, state.max_body)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            let s = Status::resource_exhausted(format!(
                "request body is larger than the broker accepts ({} bytes)",
                state.max_body
            ));
            return Err((s, parts));
        }
        Err(e) => {
            let s = Status::invalid_argument(format!("request body could not be read: {e}"));
            return Err((s, parts));
        }
    };
    let message = if enveloped {
        match stream::single_message(body) {
            Ok(m) => m,
            Err(s) => return Err((s, parts)),
        }
    } else {
        body
    };
    let message = match codec::decode_request(codec, &method.input(), &message) {
        Ok(m) => m,
        Err(s) => return Err((s, parts)),
    };
    let h = &mut parts.headers;
    for name in [
        "content-type",
        "content-length",
        "content-encoding",
        "accept-encoding",
        "connect-protocol-version",
        "connect-timeout-ms",
        "connect-content-encoding",
        "connect-accept-encoding",
        "transfer-encoding",
        "connection",
    ] {
        h.remove(name);
    }
    h.insert("content-type", HeaderValue::from_static("application/grpc"));
    h.insert("te", HeaderValue::from_static("trailers"));
    if let Some(t) = timeout {
        // The guard reads the caller's deadline from here (writes commit before it).
        if let Ok(v) = HeaderValue::from_str(&format!("{}m", t.as_millis())) {
            h.insert("grpc-timeout", v);
        }
    }
    parts.version = http::Version::HTTP_2;
    let body = Body::new(http_body_util::Full::new(codec::envelope(0, &message)));
    Ok(Prepared {
        request: http::Request::from_parts(parts, body),
        timeout,
    })
}

/// The Connect headers of a request: the protocol version (1, or absent, as
/// from curl), no compression, and the deadline `Connect-Timeout-Ms`.
fn check_headers(h: &HeaderMap, enveloped: bool) -> Result<Option<Duration>, Status> {
    let text = |name: &str| h.get(name).map(|v| v.to_str().unwrap_or("\u{fffd}"));
    if let Some(v) = text("connect-protocol-version")
        && v != "1"
    {
        return Err(Status::invalid_argument(format!(
            "connect-protocol-version must be 1, not {v:?}"
        )));
    }
    let encoding = if enveloped {
        "connect-content-encoding"
    } else {
        "content-encoding"
    };
    if let Some(v) = text(encoding)
        && v != "identity"
    {
        return Err(Status::unimplemented(format!(
            "{encoding} {v:?} is not supported: send the body uncompressed"
        )));
    }
    match text("connect-timeout-ms") {
        None => Ok(None),
        Some(v) if (1..=10).contains(&v.len()) && v.bytes().all(|b| b.is_ascii_digit()) => {
            Ok(v.parse().ok().map(Duration::from_millis))
        }
        Some(v) => Err(Status::invalid_argument(format!(
            "connect-timeout-ms must be 1 to 10 digits, not {v:?}"
        ))),
    }
}

/// A request refused here, answered as the guard would have: a missing or bad
/// token first, counted in the RPC metrics under the method's label.
fn refused_status(state: &State, parts: &http::request::Parts, status: Status) -> Status {
    let path = parts.uri.path();
    let status = match state.auth.as_ref().map(|a| a.check(path, &parts.headers)) {
        Some(Err(auth)) => auth,
        _ => status,
    };
    state.metrics.rpc(
        super::guard::method_label(path),
        super::guard::code_name(status.code()),
        Duration::ZERO,
    );
    status
}

async fn unary<S>(
    mut inner: S,
    state: Arc<State>,
    req: http::Request<Body>,
    codec: Codec,
    method: MethodDescriptor,
) -> Result<Response, S::Error>
where
    S: Service<http::Request<Body>, Response = Response>,
{
    let prepared = match prepare(&state, req, codec, &method, false).await {
        Ok(p) => p,
        Err((status, parts)) => {
            let status = refused_status(&state, &parts, status);
            return Ok(error_response(
                &status,
                codec::http_status(status.code()),
                None,
            ));
        }
    };
    let call = inner.call(prepared.request);
    let resp = match prepared.timeout {
        Some(t) => match tokio::time::timeout(t, call).await {
            Ok(r) => r?,
            Err(_) => {
                let status = Status::deadline_exceeded("the call's connect-timeout-ms passed");
                return Ok(error_response(&status, StatusCode::GATEWAY_TIMEOUT, None));
            }
        },
        None => call.await?,
    };
    Ok(unary_reply(resp, codec, &method).await)
}

/// A gRPC reply as a unary Connect response: its message, with the reply's
/// metadata as headers and its trailers as `trailer-` headers; or its status as
/// a Connect error.
async fn unary_reply(resp: Response, codec: Codec, method: &MethodDescriptor) -> Response {
    let (parts, body) = resp.into_parts();
    let fail = |s: &Status| error_response(s, codec::http_status(s.code()), Some(&parts.headers));
    if let Some(s) = codec::status_of(&parts.headers)
        && s.code() != Code::Ok
    {
        return fail(&s);
    }
    let collected = match body.collect().await {
        Ok(c) => c,
        Err(s) => return fail(&s),
    };
    let trailers = collected.trailers().cloned().unwrap_or_default();
    let mut buf = BytesMut::from(collected.to_bytes());
    let status = codec::status_of(&trailers)
        .unwrap_or_else(|| Status::unknown("the reply ended without a status"));
    if status.code() != Code::Ok {
        return fail(&status);
    }
    let message = match codec::split_envelope(&mut buf) {
        Some((0, m)) => m,
        _ => return fail(&Status::internal("the reply carried no message")),
    };
    let body = match codec::encode_reply(codec, &method.output(), message) {
        Ok(b) => b,
        Err(s) => return fail(&s),
    };
    let mut out = http::Response::new(Body::new(http_body_util::Full::new(body)));
    let headers = out.headers_mut();
    copy_metadata(&parts.headers, headers, "");
    copy_metadata(&trailers, headers, "trailer-");
    headers.insert(
        "content-type",
        HeaderValue::from_static(match codec {
            Codec::Json => "application/json",
            Codec::Proto => "application/proto",
        }),
    );
    out
}

/// Copies a gRPC reply's custom metadata, not its protocol headers.
fn copy_metadata(from: &HeaderMap, to: &mut HeaderMap, prefix: &str) {
    for (name, value) in from {
        let n = name.as_str();
        if n.starts_with("grpc-")
            || matches!(
                n,
                "content-type" | "content-length" | "te" | "trailer" | "transfer-encoding"
            )
        {
            continue;
        }
        if let Ok(name) = http::HeaderName::from_bytes(format!("{prefix}{n}").as_bytes()) {
            to.append(name, value.clone());
        }
    }
}

/// A unary Connect error: the HTTP status, `application/json`, the error JSON.
fn error_response(status: &Status, http: StatusCode, metadata: Option<&HeaderMap>) -> Response {
    let body = serde_json::to_vec(&codec::error_json(status)).unwrap_or_default();
    let mut out = http::Response::new(Body::new(http_body_util::Full::new(Bytes::from(body))));
    *out.status_mut() = http;
    if let Some(m) = metadata {
        copy_metadata(m, out.headers_mut(), "");
    }
    out.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    out
}
