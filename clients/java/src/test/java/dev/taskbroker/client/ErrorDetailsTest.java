package dev.taskbroker.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import org.junit.jupiter.api.Test;

/** Errors in plain words: one line, and which ones are configuration errors. */
class ErrorDetailsTest {
  @Test
  void aNonGrpcAnswerIsDescribedOnOneLineWithoutItsHeadersAndBody() {
    var e =
        Status.PERMISSION_DENIED
            .withDescription(
                "HTTP status code 403\ninvalid content-type: text/html\nheaders: Metadata(:status=403)\n"
                    + "DATA-----\n<!DOCTYPE html><html>\n<body>Refused</body></html>")
            .asRuntimeException();
    assertEquals("PERMISSION_DENIED: HTTP status code 403; invalid content-type: text/html", ErrorDetails.plain(e));
    assertTrue(ErrorDetails.isConfigurationError(e));
  }

  @Test
  void anUnreachableBrokerIsNotAConfigurationError() {
    var e =
        Status.UNAVAILABLE
            .withDescription("io exception")
            .withCause(new java.net.ConnectException("Connection refused"))
            .asRuntimeException();
    assertEquals("UNAVAILABLE: Connection refused", ErrorDetails.plain(e));
    assertFalse(ErrorDetails.isConfigurationError(e));
    var tls =
        Status.UNAVAILABLE
            .withDescription("io exception")
            .withCause(new javax.net.ssl.SSLHandshakeException("not an SSL/TLS record"))
            .asRuntimeException();
    assertTrue(ErrorDetails.isConfigurationError(tls));
  }
}
