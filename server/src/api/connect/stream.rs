//! Connect server streaming (`application/connect+json`, `application/connect+proto`):
//! the request is one enveloped message; the reply is HTTP 200 and a stream of
//! enveloped messages, each gRPC message as it arrives, closed by an end-stream
//! envelope (flags 0x02) holding `{}` or `{"error": {...}}` and the trailers as
//! `"metadata"`. WatchTasks is served this way.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http::HeaderValue;
use http_body::Frame;
use http_body_util::BodyExt;
use prost_reflect::MethodDescriptor;
use tonic::body::Body;
use tonic::{Code, Status};
use tower::Service;

use super::codec::{self, Codec};
use super::{Response, State, prepare, refused_status};

/// Flags of the envelope that ends a stream.
const END_STREAM: u8 = 0x02;

/// The one message of a streaming request body.
pub(super) fn single_message(body: Bytes) -> Result<Bytes, Status> {
    let mut buf = BytesMut::from(body);
    match codec::split_envelope(&mut buf) {
        Some((0, m)) if buf.is_empty() => Ok(m),
        Some((flags, _)) if flags & 1 != 0 => Err(Status::unimplemented(
            "compressed messages are not supported: send them uncompressed",
        )),
        _ => Err(Status::invalid_argument(
            "the request body must be exactly one enveloped message",
        )),
    }
}

pub(super) async fn call<S>(
    mut inner: S,
    state: Arc<State>,
    req: http::Request<Body>,
    codec: Codec,
    method: MethodDescriptor,
) -> Result<Response, S::Error>
where
    S: Service<http::Request<Body>, Response = Response>,
{
    let prepared = match prepare(&state, req, codec, &method, true).await {
        Ok(p) => p,
        Err((status, parts)) => {
            let status = refused_status(&state, &parts, status);
            return Ok(respond(codec, Body::new(ended(Err(&status), None))));
        }
    };
    let resp = inner.call(prepared.request).await?;
    let (parts, body) = resp.into_parts();
    if let Some(s) = codec::status_of(&parts.headers)
        && s.code() != Code::Ok
    {
        return Ok(respond(
            codec,
            Body::new(ended(Err(&s), Some(&parts.headers))),
        ));
    }
    let output = method.output();
    let frames = futures::stream::unfold(Some((body, BytesMut::new())), move |state| {
        let output = output.clone();
        async move {
            let (mut body, mut buf) = state?;
            loop {
                if let Some((flags, msg)) = codec::split_envelope(&mut buf) {
                    let out = if flags & 1 != 0 {
                        Err(Status::internal("the reply was compressed"))
                    } else {
                        codec::encode_reply(codec, &output, msg)
                    };
                    return Some(match out {
                        Ok(m) => (Ok(Frame::data(codec::envelope(0, &m))), Some((body, buf))),
                        Err(s) => (Ok(Frame::data(end_envelope(Err(&s), None))), None),
                    });
                }
                match body.frame().await {
                    Some(Ok(f)) => match f.into_data() {
                        Ok(d) => buf.extend_from_slice(&d),
                        Err(f) => {
                            let trailers = f.into_trailers().unwrap_or_default();
                            let status = codec::status_of(&trailers).unwrap_or_else(|| {
                                Status::unknown("the reply ended without a status")
                            });
                            let end = if status.code() == Code::Ok {
                                end_envelope(Ok(()), Some(&trailers))
                            } else {
                                end_envelope(Err(&status), Some(&trailers))
                            };
                            return Some((Ok::<_, Status>(Frame::data(end)), None));
                        }
                    },
                    Some(Err(s)) => {
                        return Some((Ok(Frame::data(end_envelope(Err(&s), None))), None));
                    }
                    None => {
                        let s = Status::unknown("the reply ended without a status");
                        return Some((Ok(Frame::data(end_envelope(Err(&s), None))), None));
                    }
                }
            }
        }
    });
    Ok(respond(
        codec,
        Body::new(http_body_util::StreamBody::new(frames)),
    ))
}

/// A stream that is only its end.
fn ended(
    result: Result<(), &Status>,
    metadata: Option<&http::HeaderMap>,
) -> http_body_util::Full<Bytes> {
    http_body_util::Full::new(end_envelope(result, metadata))
}

fn respond(codec: Codec, body: Body) -> Response {
    let mut out = http::Response::new(body);
    out.headers_mut().insert(
        "content-type",
        HeaderValue::from_static(match codec {
            Codec::Json => "application/connect+json",
            Codec::Proto => "application/connect+proto",
        }),
    );
    out
}

/// The end-stream envelope: the error if any, and the custom trailers.
fn end_envelope(result: Result<(), &Status>, metadata: Option<&http::HeaderMap>) -> Bytes {
    let mut end = serde_json::json!({});
    if let Err(s) = result {
        end["error"] = codec::error_json(s);
    }
    let mut meta = serde_json::Map::new();
    for (name, value) in metadata.into_iter().flatten() {
        let n = name.as_str();
        if n.starts_with("grpc-") || n == "content-type" {
            continue;
        }
        if let Ok(v) = value.to_str() {
            let entry = meta
                .entry(n.to_string())
                .or_insert_with(|| serde_json::Value::Array(Vec::new()));
            if let serde_json::Value::Array(a) = entry {
                a.push(v.into());
            }
        }
    }
    if !meta.is_empty() {
        end["metadata"] = meta.into();
    }
    codec::envelope(END_STREAM, &serde_json::to_vec(&end).unwrap_or_default())
}
