// Package deferred names, for the packages that import it by this path, the
// vocabulary of deferred tool calls, which lives in the public package
// github.com/toolgate/toolgate/deferred: the types are that package's, so a
// value made here is the one a program outside the module sees. New code
// imports the public package.
package deferred

import (
	"encoding/json"

	"github.com/toolgate/toolgate/deferred"
)

type (
	Call                = deferred.Call
	Requests            = deferred.Requests
	Results             = deferred.Results
	Decision            = deferred.Decision
	Approved            = deferred.Approved
	Denied              = deferred.Denied
	Result              = deferred.Result
	Value               = deferred.Value
	Return              = deferred.Return
	Retry               = deferred.Retry
	Failed              = deferred.Failed
	Deferral            = deferred.Deferral
	Kind                = deferred.Kind
	CategoryError       = deferred.CategoryError
	InvalidAnswerError  = deferred.InvalidAnswerError
	NotPendingError     = deferred.NotPendingError
	MissingResultsError = deferred.MissingResultsError
)

const (
	DefaultDenyMessage = deferred.DefaultDenyMessage
	KindApproval       = deferred.KindApproval
	KindCall           = deferred.KindCall
)

// ApprovalRequired is deferred.ApprovalRequired.
func ApprovalRequired(meta any) error { return deferred.ApprovalRequired(meta) }

// CallDeferred is deferred.CallDeferred.
func CallDeferred(meta any) error { return deferred.CallDeferred(meta) }

// ValueOf is deferred.ValueOf.
func ValueOf(v any) (Value, error) { return deferred.ValueOf(v) }

// Approve is deferred.Approve.
func Approve(overrideArgs any) (Approved, error) { return deferred.Approve(overrideArgs) }

// ArgsDigest is deferred.ArgsDigest.
func ArgsDigest(args json.RawMessage) (string, error) { return deferred.ArgsDigest(args) }

// CanonicalJSON is deferred.CanonicalJSON.
func CanonicalJSON(raw []byte) ([]byte, error) { return deferred.CanonicalJSON(raw) }
