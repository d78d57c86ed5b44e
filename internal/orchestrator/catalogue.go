package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/deferred"
)

// AdvertisedTool is a tool a worker advertises in toolgate_tools, with the
// digest of its args schema.
type AdvertisedTool struct {
	Advert bus.ToolAdvert
	// Digest is SchemaDigest of Advert.Parameters: what a call made against
	// this version of the tool records.
	Digest string
}

// SchemaDigest is the SHA-256 (hex) of the canonical JSON of an args
// schema; an absent schema counts as {}.
func SchemaDigest(params json.RawMessage) (string, error) {
	return deferred.ArgsDigest(orEmpty(params))
}

// orEmpty is r, or {} when it is absent.
func orEmpty(r json.RawMessage) json.RawMessage {
	if len(r) == 0 {
		return json.RawMessage("{}")
	}
	return r
}

// Catalogue is what workers advertise, kept in memory from a watch of KV
// toolgate_tools. It knows nothing of agents: each agent takes a Snapshot at
// the start of a run and picks from it what its discover: entries match, so
// a tool that appears or disappears is seen by the next run, never in the
// middle of one.
type Catalogue struct {
	log *slog.Logger
	// changed is told of every tool whose advert appeared, changed or went
	// away (nil: went away), and of every tool at once when the first
	// catch-up is done (known: nil for each).
	changed func(name string, t *AdvertisedTool, caughtUp bool)

	mu       sync.RWMutex
	tools    map[string]AdvertisedTool
	caughtUp chan struct{}
	once     sync.Once
}

// newCatalogue makes an empty catalogue; run fills it.
func newCatalogue(log *slog.Logger, changed func(name string, t *AdvertisedTool, caughtUp bool)) *Catalogue {
	return &Catalogue{log: log, changed: changed, tools: map[string]AdvertisedTool{}, caughtUp: make(chan struct{})}
}

// Snapshot is a copy of the tools advertised now.
func (c *Catalogue) Snapshot() map[string]AdvertisedTool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return maps.Clone(c.tools)
}

// Lookup returns the advertised tool named name.
func (c *Catalogue) Lookup(name string) (AdvertisedTool, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	t, ok := c.tools[name]
	return t, ok
}

// CaughtUp is closed once the catalogue holds every advert that existed
// when its watch began.
func (c *Catalogue) CaughtUp() <-chan struct{} { return c.caughtUp }

// run watches the bucket until ctx ends; a watch that breaks is started
// again after a pause (it yields the current adverts first, so nothing is
// missed).
func (c *Catalogue) run(ctx context.Context, kv *bus.KV) {
	for ctx.Err() == nil {
		for e, err := range kv.Watch(ctx, "") {
			if err != nil {
				c.log.WarnContext(ctx, "watch tool adverts", slog.String("error", err.Error()))
				break
			}
			c.apply(e)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// apply takes one entry of the watch. An advert that does not decode, or
// that sits under another tool's name, counts as absent and is logged.
func (c *Catalogue) apply(e bus.Entry) {
	if e.Op == bus.OpCaughtUp {
		c.once.Do(func() {
			close(c.caughtUp)
			if c.changed != nil {
				c.changed("", nil, true)
			}
		})
		return
	}
	var t *AdvertisedTool
	if e.Op == bus.OpPut {
		if a, err := c.decode(e); err != nil {
			c.log.Warn("tool advert ignored", slog.String("key", e.Key), slog.Uint64("revision", e.Revision), slog.String("error", err.Error()))
		} else {
			t = &a
		}
	}
	c.mu.Lock()
	old, had := c.tools[e.Key]
	if t != nil {
		c.tools[e.Key] = *t
	} else {
		delete(c.tools, e.Key)
	}
	c.mu.Unlock()
	same := had && t != nil && old.Digest == t.Digest && old.Advert.Description == t.Advert.Description && old.Advert.MCPServer == t.Advert.MCPServer
	if (had || t != nil) && !same && c.changed != nil {
		c.changed(e.Key, t, false)
	}
}

func (c *Catalogue) decode(e bus.Entry) (AdvertisedTool, error) {
	a, err := bus.DecodeToolAdvert(e.Value)
	if err != nil {
		return AdvertisedTool{}, err
	}
	if a.Name != e.Key {
		return AdvertisedTool{}, fmt.Errorf("advert of %s stored under %s", a.Name, e.Key)
	}
	d, err := SchemaDigest(a.Parameters)
	if err != nil {
		return AdvertisedTool{}, fmt.Errorf("parameters: %w", err)
	}
	return AdvertisedTool{Advert: a, Digest: d}, nil
}

// advertWarnings logs, once per tool and change, that no worker advertises
// a tool an agent uses: such a tool's calls wait until a worker serves it
// or their deadline passes. The tools missing when the orchestrator starts
// are given a grace before the warning: workers are started after the
// orchestrator (the documented order) and advertise their tools as they
// start, so a warning at once would be about every tool, every time. A
// call that waits for a tool no worker takes is told at once, by
// unservedCalls. Safe for concurrent use.
type advertWarnings struct {
	log *slog.Logger
	// grace is how long the tools missing at start-up have to be
	// advertised; 0 is advertGrace.
	grace time.Duration
	// afterFunc runs f after d and returns what stops it (time.AfterFunc);
	// a seam for tests.
	afterFunc func(d time.Duration, f func()) (stop func() bool)

	mu      sync.Mutex
	missing map[string]bool
	// early are the tools missing at start-up not warned about yet, with
	// how the agent uses them.
	early     map[string]string
	stopTimer func() bool
	stopped   bool
}

// advertGrace is how long the tools missing at start-up have to be
// advertised before a warning: a worker advertises as it starts, and
// renews its adverts every 30 s.
const advertGrace = 30 * time.Second

// checkAtStart is check for the tools the catalogue's first catch-up
// finds: a missing one is warned about after the grace, if it is still
// missing then.
func (w *advertWarnings) checkAtStart(tool string, advertised bool, what string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if advertised || w.missing[tool] {
		return
	}
	if w.missing == nil {
		w.missing = map[string]bool{}
	}
	w.missing[tool] = true
	if w.early == nil {
		w.early = map[string]string{}
	}
	w.early[tool] = what
	if w.stopTimer != nil || w.stopped {
		return
	}
	after := w.afterFunc
	if after == nil {
		after = func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
	}
	w.stopTimer = after(w.graceOrDefault(), w.graceOver)
}

func (w *advertWarnings) graceOrDefault() time.Duration {
	if w.grace > 0 {
		return w.grace
	}
	return advertGrace
}

// graceOver warns about the tools still missing since start-up.
func (w *advertWarnings) graceOver() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	for _, tool := range slices.Sorted(maps.Keys(w.early)) {
		w.log.Warn("no worker has advertised tool since the orchestrator started; its calls wait for one until their deadline",
			slog.String("tool", tool), slog.String("use", w.early[tool]), slog.Duration("waited", w.graceOrDefault()))
	}
	w.early = nil
}

// stop ends the grace without its warnings (the orchestrator stops).
func (w *advertWarnings) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	if w.stopTimer != nil {
		w.stopTimer()
	}
}

// check records whether tool is advertised and warns when it is not and
// was (or was not yet known to be) before; what says how the agent uses it
// ("configured", "discovered").
func (w *advertWarnings) check(tool string, advertised bool, what string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if advertised {
		delete(w.missing, tool)
		delete(w.early, tool)
		return
	}
	if w.missing[tool] {
		return
	}
	if w.missing == nil {
		w.missing = map[string]bool{}
	}
	w.missing[tool] = true
	w.log.Warn("no worker advertises tool; its calls wait for one until their deadline",
		slog.String("tool", tool), slog.String("use", what))
}
