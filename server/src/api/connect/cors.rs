//! CORS on the gRPC port, for browser pages (the console, behind its own origin)
//! calling HTTP/JSON or gRPC-Web: only the configured origins, each exact, never a
//! wildcard, and no credentials (calls carry a bearer token, not cookies). A request
//! from any other origin passes without CORS headers, so the browser keeps its
//! answer from the page; a preflight from one is refused with 403.

use std::collections::HashSet;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use http::{HeaderValue, Method, StatusCode};
use tonic::body::Body;
use tower::{Layer, Service};

/// The request headers a page may send.
const ALLOW_HEADERS: &str = "authorization, content-type, connect-protocol-version, \
     connect-timeout-ms, grpc-timeout, x-grpc-web, x-user-agent, traceparent";
/// The response headers a page may read (gRPC-Web carries its status in them).
const EXPOSE_HEADERS: &str = "grpc-status, grpc-message, grpc-status-details-bin";

#[derive(Clone)]
pub struct CorsLayer {
    origins: Arc<HashSet<String>>,
}

impl CorsLayer {
    /// `origins`: exact origins such as `https://console.example` (checked when
    /// the configuration is read).
    pub fn new(origins: &[String]) -> Self {
        CorsLayer {
            origins: Arc::new(origins.iter().map(|o| o.to_ascii_lowercase()).collect()),
        }
    }
}

impl<S> Layer<S> for CorsLayer {
    type Service = Cors<S>;

    fn layer(&self, inner: S) -> Cors<S> {
        Cors {
            inner,
            origins: self.origins.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Cors<S> {
    inner: S,
    origins: Arc<HashSet<String>>,
}

impl<S> Service<http::Request<Body>> for Cors<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>> + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let origin = req.headers().get(http::header::ORIGIN).cloned();
        let allowed = origin.as_ref().filter(|o| {
            o.to_str()
                .is_ok_and(|o| self.origins.contains(&o.to_ascii_lowercase()))
        });
        let preflight = req.method() == Method::OPTIONS
            && req
                .headers()
                .contains_key(http::header::ACCESS_CONTROL_REQUEST_METHOD);
        if preflight {
            let mut resp = http::Response::new(Body::empty());
            match allowed {
                Some(o) => {
                    *resp.status_mut() = StatusCode::NO_CONTENT;
                    let h = resp.headers_mut();
                    h.insert(http::header::ACCESS_CONTROL_ALLOW_ORIGIN, o.clone());
                    h.insert(
                        http::header::ACCESS_CONTROL_ALLOW_METHODS,
                        HeaderValue::from_static("POST"),
                    );
                    h.insert(
                        http::header::ACCESS_CONTROL_ALLOW_HEADERS,
                        HeaderValue::from_static(ALLOW_HEADERS),
                    );
                    h.insert(
                        http::header::ACCESS_CONTROL_MAX_AGE,
                        HeaderValue::from_static("7200"),
                    );
                    h.insert(http::header::VARY, HeaderValue::from_static("origin"));
                }
                None => *resp.status_mut() = StatusCode::FORBIDDEN,
            }
            return Box::pin(async move { Ok(resp) });
        }
        let allowed = allowed.cloned();
        let call = self.inner.call(req);
        Box::pin(async move {
            let mut resp = call.await?;
            if let Some(o) = allowed {
                let h = resp.headers_mut();
                h.insert(http::header::ACCESS_CONTROL_ALLOW_ORIGIN, o);
                h.insert(
                    http::header::ACCESS_CONTROL_EXPOSE_HEADERS,
                    HeaderValue::from_static(EXPOSE_HEADERS),
                );
                h.append(http::header::VARY, HeaderValue::from_static("origin"));
            }
            Ok(resp)
        })
    }
}

/// Whether `o` is an origin as a browser sends it: `http` or `https`, a host, an
/// optional port, nothing else (no path, no wildcard).
pub fn is_origin(o: &str) -> bool {
    let Some(rest) = o
        .strip_prefix("https://")
        .or_else(|| o.strip_prefix("http://"))
    else {
        return false;
    };
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || rest.starts_with('[') => (h, Some(p)),
        _ => (rest, None),
    };
    !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '[' | ']' | ':'))
        && port
            .is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::is_origin;

    #[test]
    fn only_exact_origins_are_origins() {
        for ok in [
            "https://console.example",
            "http://127.0.0.1:9090",
            "http://[::1]:9090",
        ] {
            assert!(is_origin(ok), "{ok}");
        }
        for bad in [
            "*",
            "https://*.example",
            "https://console.example/",
            "console.example",
            "ftp://x",
            "https://",
            "http://x:",
            "http://x:port",
        ] {
            assert!(!is_origin(bad), "{bad}");
        }
    }
}
