package orchestrator

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/deferred"
)

// core is what the parts of an orchestrator share: its config, logger,
// connection, store and its write path (fx), clock, tracer, event
// publisher, observer and counters, its life cycle (loops, stop).
// Orchestrator embeds it too. It points to no part: a part that uses
// another is handed it when the orchestrator is wired (New), and no two
// parts use each other. What one part alone uses is a field of that part.
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

	stats Stats
}

// roster knows the agents this replica runs and those the other replicas
// run: which conversations this replica may take (agents.go, agent.go).
type roster struct {
	*core
	// inline is the runner's inline wait, the handler of the agents whose
	// config sets inline_wait.
	inline func(rc *agent.RunContext, req *deferred.Requests, wait time.Duration) (*deferred.Results, error)
	// agents are the agents this replica runs, by name; names in
	// configured order; def the first.
	agents map[string]*agentRuntime
	names  []string
	def    *agentRuntime
	// replicas is the view of the live replicas' adverts (replicaLink
	// keeps it).
	replicas replicaSet
}

// runner executes runs under their leases, one slot each: a start, a
// claimed follow-up, a relaunch (runner.go, inline.go, complete.go).
type runner struct {
	*core
	roster   *roster
	pub      *publisher
	sem      chan struct{}
	ending   chan struct{}   // endSlot's window
	launchMu sync.Mutex      // orders launches before Stop's wait for runs
	inflight map[string]bool // runs queued or executing in this process
	// executing cancels the runs executing in this process, by run id (a
	// cancel notice ends them at once).
	executing map[string]context.CancelFunc
	cancelSub *nats.Subscription
	runs      sync.WaitGroup
}

// publisher turns a paused run's deferred requests into a batch and
// publishes its calls (publish.go).
type publisher struct {
	*core
	roster   *roster
	unserved *unservedCalls
	// stored are the runs whose unmarked calls this replica published and
	// saw stored (publish.go).
	stored storedRuns
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
	roster *roster
	pub    *publisher
	// launchTentative launches a follow-up before its claim is stored
	// (the runner's).
	launchTentative func(c *Conversation, tc *tentativeClaim)
	replies         *bus.Subscription
	maxDeliver      *bus.Subscription
	commits         groupCommit

	// owned is this replica's share of the reply partitions (ownership.go),
	// set once Start has taken it.
	owned atomic.Pointer[replyOwnership]
}

// reconciler does what nobody else will: the periodic pass over the due
// conversations, expiry at deadlines, retention (reconcile.go, expiry.go,
// lifecycle.go).
type reconciler struct {
	*core
	roster *roster
	pub    *publisher
}
