/**
 * Which call failures are wrong for good: a configuration that retrying cannot fix (the
 * worker's `failFast`). Pure: no I/O.
 */
import { Code, ConnectError } from "@connectrpc/connect";

/** Node's codes for a TLS handshake or certificate failure. */
const TLS_CODES = new Set([
  "EPROTO",
  "ERR_SSL_WRONG_VERSION_NUMBER",
  "ERR_SSL_PACKET_LENGTH_TOO_LONG",
  "ERR_SSL_TLSV1_ALERT_UNKNOWN_CA",
  "ERR_SSL_SSLV3_ALERT_BAD_CERTIFICATE",
  "ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED",
  "ERR_TLS_CERT_ALTNAME_INVALID",
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "CERT_HAS_EXPIRED",
  "CERT_NOT_YET_VALID",
]);

/** Node's codes for an HTTP/2 connection to something that does not speak it (a plaintext port asked for TLS's ALPN, an HTTP/1 server). */
const PROTOCOL_CODES = new Set(["ERR_HTTP2_ERROR", "ERR_HTTP2_SESSION_ERROR", "ERR_HTTP2_STREAM_ERROR", "ERR_HTTP2_INVALID_SESSION"]);

/**
 * Why `err` is a configuration error retrying cannot fix, in one plain line; undefined when it
 * may pass (an unreachable or restarting broker, a timeout). `first`: no call of this worker
 * has been answered yet, so a connection closed before any answer is the TLS server refusing a
 * plaintext client rather than a broker going away.
 */
export function wrongForGood(err: unknown, first = false): string | undefined {
  if (!(err instanceof ConnectError)) return undefined;
  if (first && err.code === Code.Canceled && err.cause === undefined) {
    return `the connection closed before any answer: is the broker serving TLS (give tls or an https:// address)? ${oneLine(err)}`;
  }
  if (err.code === Code.Unauthenticated || err.code === Code.PermissionDenied) {
    return `${Code[err.code]}: ${err.rawMessage}`;
  }
  const cause = causeCode(err);
  if (cause !== undefined && TLS_CODES.has(cause)) {
    return `TLS handshake failed (${cause}): is the broker serving TLS, and is its certificate trusted? ${oneLine(err)}`;
  }
  if (cause !== undefined && PROTOCOL_CODES.has(cause)) {
    return `the address does not speak gRPC over HTTP/2 (${cause}): is it the broker's gRPC port, with TLS as it expects? ${oneLine(err)}`;
  }
  // A response without a grpc-status: something answered, but not a gRPC server.
  if ((err.code === Code.Internal || err.code === Code.Unknown) && /HTTP|grpc-status|content-type/i.test(err.rawMessage)) {
    return `the address does not answer as a gRPC server: ${oneLine(err)}`;
  }
  return undefined;
}

function causeCode(err: ConnectError): string | undefined {
  for (let c: unknown = err.cause, depth = 0; c instanceof Error && depth < 4; c = c.cause, depth++) {
    const code = (c as { code?: unknown }).code;
    if (typeof code === "string") return code;
  }
  return undefined;
}

function oneLine(err: ConnectError): string {
  const cause = err.cause instanceof Error ? ` (${err.cause.message})` : "";
  return `${Code[err.code]}: ${err.rawMessage}${cause}`.replace(/\s+/g, " ").trim();
}
