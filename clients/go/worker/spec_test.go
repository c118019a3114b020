package worker

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestBackoffStaysUnderItsCeilingAndAboveATenth(t *testing.T) {
	for failures := range 40 {
		ceiling := BackoffCeiling(failures)
		if ceiling > BackoffMax || ceiling < BackoffBase {
			t.Fatalf("BackoffCeiling(%d) = %v", failures, ceiling)
		}
		for range 20 {
			if d := Backoff(failures); d > ceiling || d < ceiling/10-time.Millisecond {
				t.Fatalf("Backoff(%d) = %v, ceiling %v", failures, d, ceiling)
			}
		}
	}
}

func TestOnlyTheFourUnfixableCodesStopAWorker(t *testing.T) {
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		want := c == codes.Unauthenticated || c == codes.PermissionDenied || c == codes.InvalidArgument || c == codes.Unimplemented
		if got := StopsWorker(status.Error(c, "x")); got != want {
			t.Errorf("StopsWorker(%v) = %v, want %v", c, got, want)
		}
	}
}
