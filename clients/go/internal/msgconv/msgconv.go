// Package msgconv holds what the client's and the worker's spans and instruments share from
// the OpenTelemetry messaging semantic conventions: the attributes and the error.type.
package msgconv

import (
	"fmt"
	"strings"
	"unicode"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/status"
)

// System is the messaging.system attribute of every span and instrument.
const System = "taskbroker"

// FailSpan sets span's status to ERROR with err's message, its error.type and the error event.
func FailSpan(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(otelcodes.Error, err.Error())
	span.SetAttributes(attribute.String("error.type", ErrorType(err)))
}

// Attributes are the attributes of the messaging instruments: messaging.system,
// messaging.destination.name and messaging.operation.name, and error.type when err is set.
func Attributes(queue, operation string, err error) []attribute.KeyValue {
	attrs := []attribute.KeyValue{
		attribute.String("messaging.system", System),
		attribute.String("messaging.destination.name", queue),
		attribute.String("messaging.operation.name", operation),
	}
	if err != nil {
		attrs = append(attrs, attribute.String("error.type", ErrorType(err)))
	}
	return attrs
}

// ErrorType is the error.type of err: the gRPC code of a status error (UNAVAILABLE), else
// the error's Go type (*worker.PermanentError).
func ErrorType(err error) string {
	if st, ok := status.FromError(err); ok && st.Code() != 0 {
		return upperSnake(st.Code().String())
	}
	return fmt.Sprintf("%T", err)
}

// upperSnake turns a Go code name (DeadlineExceeded) into the proto's (DEADLINE_EXCEEDED).
func upperSnake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 && unicode.IsUpper(r) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}
