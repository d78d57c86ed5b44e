package bus

import "github.com/toolgate/toolgate/wire"

// The wire contract lives in package wire (see its doc for why it moved).
// These aliases keep the transport's callers compiling unchanged: a
// bus.CallRequest is a wire.CallRequest.

type (
	CallRequest     = wire.CallRequest
	ApprovalRequest = wire.ApprovalRequest
	CallReply       = wire.CallReply
	Decision        = wire.Decision
	Event           = wire.Event
	EventBatch      = wire.EventBatch
	Outcome         = wire.Outcome
	ValidationError = wire.ValidationError
	Validator       = wire.Validator
	DecodeError     = wire.DecodeError
)

const (
	OutcomeReturn = wire.OutcomeReturn
	OutcomeRetry  = wire.OutcomeRetry
	OutcomeFailed = wire.OutcomeFailed
	MaxEventBatch = wire.MaxEventBatch
	MaxReplyBytes = wire.MaxReplyBytes

	ContentTypeMsgpack = wire.ContentTypeMsgpack
	ContentTypeJSON    = wire.ContentTypeJSON

	StreamCalls      = wire.StreamCalls
	StreamApprovals  = wire.StreamApprovals
	StreamReplies    = wire.StreamReplies
	StreamEvents     = wire.StreamEvents
	StreamDLQ        = wire.StreamDLQ
	StreamAudit      = wire.StreamAudit
	StreamAdvisories = wire.StreamAdvisories
	BucketRuns       = wire.BucketRuns
	BucketTools      = wire.BucketTools
	BucketGrants     = wire.BucketGrants
	GrantKeyAPI      = wire.GrantKeyAPI
	GrantKeyBus      = wire.GrantKeyBus

	ReplyKindCall     = wire.ReplyKindCall
	ReplyKindApproval = wire.ReplyKindApproval
	AllEvents         = wire.AllEvents
	AllApprovals      = wire.AllApprovals
	AllReplies        = wire.AllReplies

	HeaderMsgID        = wire.HeaderMsgID
	HeaderRun          = wire.HeaderRun
	HeaderConversation = wire.HeaderConversation
	HeaderCall         = wire.HeaderCall
	HeaderContentType  = wire.HeaderContentType
	HeaderTraceParent  = wire.HeaderTraceParent
	HeaderEventBatch   = wire.HeaderEventBatch
	HeaderDLQReason    = wire.HeaderDLQReason
	HeaderDLQSubject   = wire.HeaderDLQSubject
	HeaderDLQStream    = wire.HeaderDLQStream
	HeaderDLQSeq       = wire.HeaderDLQSeq
	HeaderDLQConsumer  = wire.HeaderDLQConsumer
	HeaderDLQTruncated = wire.HeaderDLQTruncated

	KindCall     = wire.KindCall
	KindApproval = wire.KindApproval
	KindResult   = wire.KindResult
	KindDecision = wire.KindDecision

	subjectCall     = wire.PrefixCall
	subjectApproval = wire.PrefixApproval
	subjectReply    = wire.PrefixReply
	subjectEvent    = wire.PrefixEvent
	subjectDLQ      = wire.PrefixDLQ
	subjectAudit    = wire.PrefixAudit

	// advisoryMaxDeliveries is followed by <stream>.<consumer>.
	advisoryMaxDeliveries = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES"
)

var (
	ErrUnsupportedContentType = wire.ErrUnsupportedContentType
	ErrBadSignature           = wire.ErrBadSignature
)

// Functions of the contract, under their old names.
var (
	Encode            = wire.Encode
	Decode            = wire.Decode
	CanonicalJSON     = wire.CanonicalJSON
	DigestArgs        = wire.DigestArgs
	MsgID             = wire.MsgID
	ValidateToken     = wire.ValidateToken
	CallSubject       = wire.CallSubject
	ApprovalSubject   = wire.ApprovalSubject
	CallReplySubject  = wire.CallReplySubject
	DecisionSubject   = wire.DecisionSubject
	EventSubject      = wire.EventSubject
	DLQSubject        = wire.DLQSubject
	AuditSubject      = wire.AuditSubject
	CallConsumerName  = wire.CallConsumerName
	ParseReplySubject = wire.ParseReplySubject

	normalizeContentType = wire.NormalizeContentType
)
