//! HTTP/JSON on the gRPC port (the Connect protocol): every method of every
//! service answers a Connect request (walked from the served descriptors, so a
//! new RPC is covered without a change here), JSON answers decode to the same
//! messages as the gRPC answers, errors carry Connect's codes, HTTP statuses and
//! details, and hostile bodies get a clear error and change nothing. The broker
//! is real and reached over loopback with plain HTTP/1.1.

mod common;

use std::time::Duration;

use common::*;

use prost::Message;

use prost_reflect::DynamicMessage;

use serde_json::{Value, json};

use taskbroker_client::pb;

use taskbroker_server::api::auth::parse_token_file;

use taskbroker_server::api::connect::codec::{METHODS, POOL};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use tokio::net::TcpStream;

const ADMIN: &str = "admin-token-0000001";

const PRODUCER: &str = "producer-token-0001";

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&self.body)))
    }
}

/// Sends one HTTP/1.1 request and reads the reply head, and the body unless
/// `head_only`.
async fn http(
    addr: std::net::SocketAddr,
    path: &str,
    content_type: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    head_only: bool,
) -> Reply {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (n, v) in headers {
        req += &format!("{n}: {v}\r\n");
    }
    req += "\r\n";
    s.write_all(req.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "connection closed before the reply's head");
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8(raw[..head_end].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut rest = raw[head_end + 4..].to_vec();
    if head_only {
        return Reply {
            status,
            headers,
            body: rest,
        };
    }
    s.read_to_end(&mut rest).await.unwrap();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked { dechunk(&rest) } else { rest };
    Reply {
        status,
        headers,
        body,
    }
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(i) = raw.windows(2).position(|w| w == b"\r\n") {
        let size =
            usize::from_str_radix(std::str::from_utf8(&raw[..i]).unwrap().trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.extend_from_slice(&raw[i + 2..i + 2 + size]);
        raw = &raw[i + 2 + size + 2..];
    }
    out
}

async fn post(app: &TestApp, method: &str, body: Value, token: Option<&str>) -> Reply {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("connect-protocol-version", "1")];
    if let Some(a) = &auth {
        headers.push(("authorization", a.as_str()));
    }
    http(
        app.addr,
        &format!("/taskbroker.v1.{method}"),
        "application/json",
        &headers,
        body.to_string().as_bytes(),
        false,
    )
    .await
}

/// A JSON reply decoded as the named message and re-encoded, to compare with
/// the gRPC answer.
fn as_message<M: Message + Default>(name: &str, v: &Value) -> M {
    let desc = POOL.get_message_by_name(name).expect("known message");
    let dm = DynamicMessage::deserialize(desc, v).expect("the reply decodes as its message");
    M::decode(dm.encode_to_vec().as_slice()).unwrap()
}

const CODES: &[&str] = &[
    "canceled",
    "unknown",
    "invalid_argument",
    "deadline_exceeded",
    "not_found",
    "already_exists",
    "permission_denied",
    "resource_exhausted",
    "failed_precondition",
    "aborted",
    "out_of_range",
    "unimplemented",
    "internal",
    "unavailable",
    "data_loss",
    "unauthenticated",
];

fn envelope(flags: u8, msg: &[u8]) -> Vec<u8> {
    let mut v = vec![flags];
    v.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    v.extend_from_slice(msg);
    v
}

/// Reads a whole reply to a raw request (sent with `connection: close`).
async fn raw(addr: std::net::SocketAddr, request: &[u8]) -> Reply {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).await.unwrap();
    let end = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head");
    let head = String::from_utf8(all[..end].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let rest = all[end + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    Reply {
        status,
        body: if chunked { dechunk(&rest) } else { rest },
        headers,
    }
}

// Connect calls: every method, JSON messages, codes and error details.
#[path = "connect/calls.rs"]
mod calls;
// Refusals: tokens as for gRPC, and hostile bodies that change nothing.
#[path = "connect/refusals.rs"]
mod refusals;
// Streams, gRPC-Web, CORS and the RPC metrics.
#[path = "connect/transports.rs"]
mod transports;
