/**
 * failFast: a worker whose Lease fails for a reason of configuration (TLS or plaintext
 * mismatch, an untrusted certificate, a port that does not speak HTTP/2) stops at once with
 * one plain line; without failFast the same is retried.
 */
import assert from "node:assert/strict";
import { createSecureServer } from "node:http2";
import { createServer } from "node:net";
import type { AddressInfo } from "node:net";
import { afterEach, beforeEach, test } from "node:test";
import { Worker, WorkerStoppedError, connect } from "../src/index.js";
import { FakeBroker, until } from "./fake-broker.js";

let fake: FakeBroker;
let addr: string;

beforeEach(async () => {
  fake = new FakeBroker();
  addr = await fake.start();
});

afterEach(async () => {
  await fake.close();
});

const quiet = { workerId: "w1", pollWaitMs: 1_000, onError: () => {}, logger: { warn() {}, error() {} } };

test("failFast: a TLS worker pointed at a plaintext port stops at once with one plain line", async () => {
  const w = new Worker(connect(addr, { tls: true }), async () => {}, { ...quiet, queues: ["q"], failFast: true });
  const err = await w.run({ handleSignals: false }).then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.ok(err instanceof WorkerStoppedError, `run() ended with ${String(err)}`);
  assert.match(err.message, /^lease failed for good \(failFast\): TLS handshake failed/);
  assert.ok(!err.message.includes("\n"), "one line");
});

test("failFast: a port that does not speak HTTP/2 stops the worker; without failFast it is retried", async () => {
  const server = createServer((s) => s.end("HTTP/1.1 400 Bad Request\r\n\r\n"));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const http = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  try {
    const fast = new Worker(connect(http), async () => {}, { ...quiet, queues: ["q"], failFast: true });
    await assert.rejects(fast.run({ handleSignals: false }), /failFast\): the address does not speak gRPC over HTTP\/2/);

    let errors = 0;
    const patient = new Worker(connect(http), async () => {}, { ...quiet, queues: ["q"], onError: () => void errors++ });
    const run = patient.run({ handleSignals: false });
    await until(() => errors >= 2);
    await patient.stop();
    await run; // resolves: it was still retrying, not stopped
  } finally {
    server.close();
  }
});

/** A self-signed certificate for 127.0.0.1 (valid for 100 years), only for the TLS server below. */
const TEST_KEY = `-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgI2ux1H9CExm9+6dr
nXKaaGALKWVIeWUS7k2ZZospFQWhRANCAARM7UDriSjMFL3Brdd1USW8mnvZmEbS
gjjUteUpkOe3VbDqz9qGmwUujcy7+sUKMgR6JrBY7TFgVhi6KNJLAuHT
-----END PRIVATE KEY-----
`;
const TEST_CERT = `-----BEGIN CERTIFICATE-----
MIIBkDCCATagAwIBAgIUBjtOuPGMhtOY6pLqhaTPtDXVe04wCgYIKoZIzj0EAwIw
FDESMBAGA1UEAwwJbG9jYWxob3N0MCAXDTI2MTEyNzAyMzkwM1oYDzIxMjYxMTAz
MDIzOTAzWjAUMRIwEAYDVQQDDAlsb2NhbGhvc3QwWTATBgcqhkjOPQIBBggqhkjO
PQMBBwNCAARM7UDriSjMFL3Brdd1USW8mnvZmEbSgjjUteUpkOe3VbDqz9qGmwUu
jcy7+sUKMgR6JrBY7TFgVhi6KNJLAuHTo2QwYjAdBgNVHQ4EFgQUkVm6TZvKHsEr
nkh4h2CD3bTgL/wwHwYDVR0jBBgwFoAUkVm6TZvKHsErnkh4h2CD3bTgL/wwDwYD
VR0TAQH/BAUwAwEB/zAPBgNVHREECDAGhwR/AAABMAoGCCqGSM49BAMCA0gAMEUC
IAC3qm9AWlDr9f8ABps7ds/s0Yw6WeS0O28rTaNnrJaFAiEA8XK4nzuZ+60jnlv3
nAlVSDmqPn2mU+ioQHoAJczY1tI=
-----END CERTIFICATE-----
`;

test("failFast: a plaintext worker pointed at a TLS port, and a TLS one that does not trust its certificate, stop at once", async () => {
  const server = createSecureServer({ key: TEST_KEY, cert: TEST_CERT });
  server.on("stream", (s) => s.respond({ ":status": 200, "content-type": "application/grpc", "grpc-status": "0" }, { endStream: true }));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const tlsAddr = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  try {
    const plain = new Worker(connect(tlsAddr), async () => {}, { ...quiet, queues: ["q"], failFast: true });
    await assert.rejects(plain.run({ handleSignals: false }), /failFast\): the connection closed before any answer: is the broker serving TLS/);
    const untrusted = new Worker(connect(tlsAddr, { tls: true }), async () => {}, { ...quiet, queues: ["q"], failFast: true });
    await assert.rejects(untrusted.run({ handleSignals: false }), /failFast\): TLS handshake failed \(DEPTH_ZERO_SELF_SIGNED_CERT\)/);
  } finally {
    server.close();
  }
});
