// Package rpcerr reads the broker's rich error details from gRPC errors.
//
// The broker attaches a google.rpc.ErrorInfo (domain "taskbroker.dev") to the errors a
// client is expected to act on, such as ABORTED with reason LEASE_LOST when a lease token
// is stale. The detail travels in the grpc-status-details-bin trailer.
package rpcerr

import (
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Domain is the ErrorInfo domain of every error reason the broker defines.
const Domain = "taskbroker.dev"

// ReasonLeaseLost is the ErrorInfo reason for a lease token that no longer holds the task.
const ReasonLeaseLost = "LEASE_LOST"

// Info returns the first google.rpc.ErrorInfo detail of err, or nil when there is none.
func Info(err error) *errdetails.ErrorInfo {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

// IsLeaseLost reports whether err is the broker's ABORTED/LEASE_LOST answer: the caller's
// lease is gone (expired and reclaimed, or settled) and it must stop working on the task.
func IsLeaseLost(err error) bool {
	if status.Code(err) != codes.Aborted {
		return false
	}
	info := Info(err)
	return info != nil && info.GetDomain() == Domain && info.GetReason() == ReasonLeaseLost
}
