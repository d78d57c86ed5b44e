package orchestrator

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/internal/bus"
)

// core is what the Orchestrator and the parts not yet handed their own
// collaborators (the reply pipeline, the replica link) share: its config,
// logger, connection, store and its write path (fx), clock, tracer, event
// publisher and observer, its life cycle (loops, stop). It points to no
// part: a part that uses another is handed it when the orchestrator is
// wired (New), and no two parts use each other. The roster, the runner,
// the publisher and the reconciler are handed what they use (their
// params) and see nothing else of it. What one part alone uses is a field
// of that part.
type core struct {
	cfg     Config
	log     *slog.Logger
	bus     *bus.Bus
	storage storageState
	streams streamWatch
	store   *store
	// fx is the one write path of the conversations' changes, which
	// carries out what each asks for (effector.go).
	fx    *effector
	clock func() time.Time
	// tracer makes the spans of runs and replies.
	tracer trace.Tracer

	loops  sync.WaitGroup
	runCtx context.Context // parent of every run; cancelled when Stop gives up waiting
	// loopCtx is the periodic loops' (reconcile, expiry, adverts,
	// retention, nudges): cancelled as Stop begins, so that no read of
	// theirs keeps Stop waiting.
	loopCtx   context.Context
	stopLoops context.CancelFunc
	cancel    context.CancelFunc
	stopping  chan struct{}
	stopOnce  sync.Once
	started   atomic.Bool
	stopped   atomic.Bool

	// starting holds the new conversations whose first run goes on
	// before they are stored, by id (tentative.go).
	starting sync.Map

	deadlines *deadlineIndex
	events    *eventPublisher
	observer  observer

	// discovery knows the tools workers advertise and what each run
	// offers of them.
	discovery discovery
	// once logs a warning once per key.
	once onceLog
	// grantCache holds the grants bucket as its watch sees it (grants.go).
	grantCache grantCache
}

// replicaLink is this replica among the others: its advert, the nudges
// it sends and takes, the hand-over of conversations it does not run
// (replicas.go).
type replicaLink struct {
	*core
	roster *roster
	// reconcileEntries reconciles the conversations of a replica that is
	// gone (the reconciler's).
	reconcileEntries func(ctx context.Context, entries []dueEntry)
	kv               *bus.KV
	// advertised is set once this process put its advert.
	advertised bool
	// dead holds the adverts of replicas that are gone, by key, until
	// adoptOrphans takes them.
	deadMu sync.Mutex
	dead   map[string]deadAdvert
	// nudged carries the conversations other replicas handed over.
	nudged    chan string
	nudgeSubs []*nats.Subscription
}

// replyPipeline takes replies and decisions from the bus, verifies them,
// records them in groups and settles each delivery (replies.go,
// replygroup.go, verify.go, audit.go).
type replyPipeline struct {
	*core
	// slots bounds the replies handled at once by all the pipeline's
	// consumers (the shared durable and each owned partition's).
	slots      chan struct{}
	roster     *roster
	pub        *publisher
	replies    *bus.Subscription
	maxDeliver *bus.Subscription
	commits    groupCommit

	// owned is this replica's share of the reply partitions (ownership.go),
	// set once Start has taken it.
	owned atomic.Pointer[replyOwnership]
}

// reconciler does what nobody else will: the periodic pass over the due
// conversations, expiry at deadlines, retention (reconcile.go, expiry.go,
// lifecycle.go).
type reconciler struct {
	reconcilerParams
}

// reconcilerParams are the reconciler's collaborators.
type reconcilerParams struct {
	cfg       Config
	log       *slog.Logger
	clock     func() time.Time
	bus       *bus.Bus
	observer  observer
	deadlines *deadlineIndex
	events    *eventPublisher
	discovery *discovery
	storage   *storageState
	roster    *roster
	pub       *publisher
	// store and fx, the conversations and their write path, are handed
	// over when the orchestrator starts (Start).
	store *store
	fx    *effector
	// remove deletes a conversation, its events and its calls.
	remove func(ctx context.Context, id string) error
	// loopCtx ends, stopping is closed and stopped set as Stop begins.
	loopCtx  context.Context
	stopping <-chan struct{}
	stopped  *atomic.Bool
}
