//! The Connect side of a call: the methods served (read from the broker's own
//! descriptors), JSON and binary messages to and from protobuf with `prost-reflect`
//! (the canonical proto3 JSON mapping), and a gRPC status as a Connect error.

use std::collections::HashMap;
use std::sync::LazyLock;

use base64::Engine;
use bytes::Bytes;
use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, MethodDescriptor};
use tonic::{Code, Status};

/// How a message is written on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    Json,
    Proto,
}

impl Codec {
    pub fn name(self) -> &'static str {
        match self {
            Codec::Json => "json",
            Codec::Proto => "proto",
        }
    }
}

/// Every message and method this port serves, plus `google.rpc`'s error details
/// (so a detail's `debug` field shows its content as JSON).
pub static POOL: LazyLock<DescriptorPool> = LazyLock::new(|| {
    let mut pool = DescriptorPool::new();
    for set in [
        super::super::DESCRIPTOR,
        super::super::KEDA_DESCRIPTOR,
        super::super::RPC_DESCRIPTOR,
        tonic_health::pb::FILE_DESCRIPTOR_SET,
    ] {
        pool.decode_file_descriptor_set(set)
            .expect("the embedded descriptors are valid");
    }
    pool
});

/// The methods by path, `/taskbroker.v1.BrokerService/Submit`.
pub static METHODS: LazyLock<HashMap<String, MethodDescriptor>> = LazyLock::new(|| {
    POOL.services()
        .flat_map(|s| s.methods().collect::<Vec<_>>())
        .map(|m| (path_of(&m), m))
        .collect()
});

/// A method's request path.
pub fn path_of(m: &MethodDescriptor) -> String {
    format!("/{}/{}", m.parent_service().full_name(), m.name())
}

/// A request body (one message) as protobuf bytes, checked against the method's
/// input type. A JSON error names where in the message it is.
pub fn decode_request(
    codec: Codec,
    desc: &MessageDescriptor,
    body: &[u8],
) -> Result<Vec<u8>, Status> {
    let bad = |what: String| Status::invalid_argument(format!("{what} ({})", desc.full_name()));
    match codec {
        Codec::Proto => DynamicMessage::decode(desc.clone(), body)
            .map(|_| body.to_vec())
            .map_err(|e| bad(format!("invalid protobuf: {e}"))),
        Codec::Json => {
            // An empty body is the empty message (as curl -d '' sends).
            let body = if body.iter().all(u8::is_ascii_whitespace) {
                b"{}".as_slice()
            } else {
                body
            };
            let mut de = serde_json::Deserializer::from_slice(body);
            let mut track = serde_path_to_error::Track::new();
            let tracked = serde_path_to_error::Deserializer::new(&mut de, &mut track);
            let msg = serde::de::DeserializeSeed::deserialize(Seed(desc.clone()), tracked)
                .map_err(|e| {
                    let path = track.path().to_string();
                    if path.is_empty() || path == "." || path == "?" {
                        bad(format!("invalid JSON: {e}"))
                    } else {
                        bad(format!("invalid JSON in field {path}: {e}"))
                    }
                })?;
            de.end().map_err(|e| bad(format!("invalid JSON: {e}")))?;
            Ok(msg.encode_to_vec())
        }
    }
}

/// `DynamicMessage::deserialize` as a seed, so `serde_path_to_error` can track
/// the field path.
struct Seed(MessageDescriptor);

impl<'de> serde::de::DeserializeSeed<'de> for Seed {
    type Value = DynamicMessage;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<DynamicMessage, D::Error> {
        DynamicMessage::deserialize(self.0, d)
    }
}

/// A reply message (protobuf bytes) in the codec the caller asked for.
pub fn encode_reply(codec: Codec, desc: &MessageDescriptor, msg: Bytes) -> Result<Bytes, Status> {
    match codec {
        Codec::Proto => Ok(msg),
        Codec::Json => {
            let m = DynamicMessage::decode(desc.clone(), msg)
                .map_err(|e| Status::internal(format!("reply does not decode: {e}")))?;
            serde_json::to_vec(&m)
                .map(Bytes::from)
                .map_err(|e| Status::internal(format!("reply does not encode as JSON: {e}")))
        }
    }
}

/// The Connect name of a code.
pub fn code_name(code: Code) -> &'static str {
    use Code::*;
    match code {
        Ok => "ok",
        Cancelled => "canceled",
        Unknown => "unknown",
        InvalidArgument => "invalid_argument",
        DeadlineExceeded => "deadline_exceeded",
        NotFound => "not_found",
        AlreadyExists => "already_exists",
        PermissionDenied => "permission_denied",
        ResourceExhausted => "resource_exhausted",
        FailedPrecondition => "failed_precondition",
        Aborted => "aborted",
        OutOfRange => "out_of_range",
        Unimplemented => "unimplemented",
        Internal => "internal",
        Unavailable => "unavailable",
        DataLoss => "data_loss",
        Unauthenticated => "unauthenticated",
    }
}

/// The HTTP status of a unary Connect error, as the protocol maps codes.
pub fn http_status(code: Code) -> http::StatusCode {
    use Code::*;
    let n = match code {
        Ok => 200,
        Cancelled => 499,
        InvalidArgument | FailedPrecondition | OutOfRange => 400,
        DeadlineExceeded => 504,
        NotFound => 404,
        AlreadyExists | Aborted => 409,
        PermissionDenied => 403,
        ResourceExhausted => 429,
        Unimplemented => 501,
        Unavailable => 503,
        Unauthenticated => 401,
        Unknown | Internal | DataLoss => 500,
    };
    http::StatusCode::from_u16(n).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR)
}

/// `google.rpc.Status`, as tonic carries it in `grpc-status-details-bin`.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<prost_types::Any>,
}

/// A status as Connect's error JSON: `{"code", "message", "details"}`. Each detail
/// has its type name, its protobuf bytes (`value`, unpadded base64) and, for the
/// types this broker sends, `debug`: the same content as JSON.
pub fn error_json(status: &Status) -> serde_json::Value {
    let mut out = serde_json::json!({ "code": code_name(status.code()) });
    if !status.message().is_empty() {
        out["message"] = status.message().into();
    }
    let details: Vec<serde_json::Value> = Message::decode(status.details())
        .map(|s: RpcStatus| s.details)
        .unwrap_or_default()
        .into_iter()
        .map(|any| {
            let name = any
                .type_url
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_string();
            let mut d = serde_json::json!({
                "type": name,
                "value": base64::engine::general_purpose::STANDARD_NO_PAD.encode(&any.value),
            });
            let debug = POOL
                .get_message_by_name(&name)
                .and_then(|desc| DynamicMessage::decode(desc, any.value.as_slice()).ok())
                .and_then(|m| serde_json::to_value(&m).ok());
            if let Some(debug) = debug {
                d["debug"] = debug;
            }
            d
        })
        .collect();
    if !details.is_empty() {
        out["details"] = details.into();
    }
    out
}

/// A status from a gRPC response's headers (trailers-only) or trailers.
pub fn status_of(map: &http::HeaderMap) -> Option<Status> {
    map.get("grpc-status")
        .and(Some(map))
        .and_then(Status::from_header_map)
}

/// One length-prefixed message: a flags byte, a big-endian length, the message.
pub fn envelope(flags: u8, msg: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(5 + msg.len());
    out.push(flags);
    out.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    out.extend_from_slice(msg);
    Bytes::from(out)
}

/// Splits the first whole envelope off `buf`: its flags and message, or `None`
/// while it is incomplete.
pub fn split_envelope(buf: &mut bytes::BytesMut) -> Option<(u8, Bytes)> {
    if buf.len() < 5 {
        return None;
    }
    let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
    if buf.len() < 5 + len {
        return None;
    }
    let mut frame = buf.split_to(5 + len);
    let flags = frame[0];
    Some((flags, frame.split_off(5).freeze()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_method_of_the_broker_is_known() {
        assert!(METHODS.contains_key("/taskbroker.v1.BrokerService/Submit"));
        assert!(METHODS.contains_key("/taskbroker.v1.AdminService/GetTask"));
        assert!(METHODS.contains_key("/grpc.health.v1.Health/Check"));
        assert!(METHODS["/taskbroker.v1.AdminService/WatchTasks"].is_server_streaming());
    }

    #[test]
    fn a_bad_json_field_is_named() {
        let m = &METHODS["/taskbroker.v1.BrokerService/Lease"];
        let e = decode_request(Codec::Json, &m.input(), br#"{"maxTasks": "many"}"#).unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(e.message().contains("maxTasks"), "{}", e.message());
        let e = decode_request(Codec::Json, &m.input(), br#"{"nope": 1}"#).unwrap_err();
        assert!(e.message().contains("nope"), "{}", e.message());
        let e = decode_request(Codec::Json, &m.input(), br#"{"queue": "a"} x"#).unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(decode_request(Codec::Json, &m.input(), b"").is_ok());
    }

    #[test]
    fn envelopes_split_only_when_whole() {
        let mut buf = bytes::BytesMut::new();
        buf.extend_from_slice(&envelope(2, b"abc")[..4]);
        assert!(split_envelope(&mut buf).is_none());
        buf.clear();
        buf.extend_from_slice(&envelope(2, b"abc"));
        buf.extend_from_slice(&envelope(0, b"d"));
        assert_eq!(split_envelope(&mut buf), Some((2, Bytes::from("abc"))));
        assert_eq!(split_envelope(&mut buf), Some((0, Bytes::from("d"))));
        assert!(buf.is_empty());
    }
}
