package inbox

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/wire"
)

// keyOf identifies a request: a tool_call_id is unique within its run.
func keyOf(runID, toolCallID string) string { return runID + "/" + toolCallID }

// entry is a held request and its held delivery (bus.Delivery.Hold).
type entry struct {
	req      wire.ApprovalRequest
	msg      *bus.Delivery[wire.ApprovalRequest]
	seq      uint64
	received time.Time
	// mcpServer is the MCP server the tool comes from, as its advert
	// says; empty for other tools or when no worker advertises it.
	mcpServer string
	gen       uint64 // store generation when it was put
	// sent is the decision made here on it whose outcome has not come
	// (the orchestrator neither applied nor refused it in time): the
	// request is held but not shown until its status tells.
	sent *sentDecision
	// note tells the approver why the request is shown again.
	note string
}

// sentDecision is a decision published at at whose outcome is unknown.
type sentDecision struct {
	d  wire.Decision
	at time.Time
}

func (e *entry) key() string { return keyOf(e.req.RunID, e.req.ToolCallID) }

// Item is a pending request as the page and the JSON API show it.
type Item struct {
	Key             string `json:"key"`
	RunID           string `json:"run_id"`
	ConversationID  string `json:"conversation_id"`
	ToolCallID      string `json:"tool_call_id"`
	ToolName        string `json:"tool_name"`
	ToolDescription string `json:"tool_description,omitempty"`
	// MCPServer names the MCP server the tool comes from (its advert's
	// mcp_server), so that the approver knows what will act.
	MCPServer      string          `json:"mcp_server,omitempty"`
	Args           json.RawMessage `json:"args"`
	ArgsText       string          `json:"args_text"` // args, indented
	Metadata       json.RawMessage `json:"metadata,omitempty"`
	MetadataText   string          `json:"metadata_text,omitempty"`
	Reason         string          `json:"reason,omitempty"` // metadata's "reason", when it is a string
	Parameters     json.RawMessage `json:"parameters,omitempty"`
	ParametersText string          `json:"parameters_text,omitempty"`
	// CallerID is the "id" of the run's caller object, which a grant for
	// this caller names; empty when it has none.
	CallerID string `json:"caller_id,omitempty"`
	// Note says why a request is shown again: a decision made here was
	// not applied.
	Note     string    `json:"note,omitempty"`
	Received time.Time `json:"received"`
	Deadline time.Time `json:"deadline,omitzero"`
	Attempt  int       `json:"attempt"`
}

func itemOf(e *entry) Item {
	r := e.req
	it := Item{
		Key:             e.key(),
		RunID:           r.RunID,
		ConversationID:  r.ConversationID,
		ToolCallID:      r.ToolCallID,
		ToolName:        r.ToolName,
		ToolDescription: r.ToolDescription,
		MCPServer:       e.mcpServer,
		Args:            r.Args,
		ArgsText:        indent(r.Args),
		Metadata:        r.Metadata,
		MetadataText:    indent(r.Metadata),
		Parameters:      r.Parameters,
		ParametersText:  indent(r.Parameters),
		CallerID:        callerID(r.Caller),
		Note:            e.note,
		Received:        e.received.UTC(),
		Deadline:        r.Deadline.UTC(),
		Attempt:         r.Attempt,
	}
	if r.Deadline.IsZero() {
		it.Deadline = time.Time{}
	}
	var meta struct {
		Reason any `json:"reason"`
	}
	if json.Unmarshal(r.Metadata, &meta) == nil {
		if s, ok := meta.Reason.(string); ok {
			it.Reason = s
		}
	}
	return it
}

// indent pretty-prints JSON for people; text that is not JSON is shown as
// it is.
func indent(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var b strings.Builder
	var v any
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return string(raw)
	}
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if enc.Encode(v) != nil {
		return string(raw)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// store holds the pending requests. Every change closes the current watch
// channel, so that any number of page streams learn of it without queues
// that could fill up.
type store struct {
	mu      sync.Mutex
	byKey   map[string]*entry
	gen     uint64
	changed chan struct{}
	reasons map[string]string // why recently removed keys went
	order   []string          // of reasons, oldest first
	// refused are the requests lately not shown because this approver
	// may not decide them, with why (approver.NotAdmittedError).
	refused map[string]error
	rorder  []string // of refused, oldest first
}

func newStore() *store {
	return &store{byKey: make(map[string]*entry), changed: make(chan struct{}), reasons: make(map[string]string), refused: make(map[string]error)}
}

func (s *store) notifyLocked() {
	s.gen++
	close(s.changed)
	s.changed = make(chan struct{})
}

// put holds e and returns the entry it replaced, if any.
func (s *store) put(e *entry) *entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.byKey[e.key()]
	// Shown now (an escalation made its approver one who may decide it).
	delete(s.refused, e.key())
	s.notifyLocked()
	e.gen = s.gen
	s.byKey[e.key()] = e
	return old
}

func (s *store) get(key string) (*entry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.byKey[key]
	return e, ok
}

// remove takes key out, if it is still there, and says why.
func (s *store) remove(key, reason string) (*entry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.byKey[key]
	if !ok {
		return nil, false
	}
	delete(s.byKey, key)
	s.noteLocked(key, reason)
	s.notifyLocked()
	return e, true
}

// removeIf takes out every entry f picks and returns them.
func (s *store) removeIf(f func(*entry) (reason string, ok bool)) []*entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*entry
	for k, e := range s.byKey {
		if reason, ok := f(e); ok {
			delete(s.byKey, k)
			s.noteLocked(k, reason)
			out = append(out, e)
		}
	}
	if len(out) > 0 {
		s.notifyLocked()
	}
	return out
}

func (s *store) noteLocked(key, reason string) {
	if _, ok := s.reasons[key]; !ok {
		s.order = append(s.order, key)
	}
	s.reasons[key] = reason
	if len(s.order) > 1024 {
		delete(s.reasons, s.order[0])
		s.order = s.order[1:]
	}
}

// refuse notes that the request key is not shown because err, bounded as
// the reasons are.
func (s *store) refuse(key string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.refused[key]; !ok {
		s.rorder = append(s.rorder, key)
	}
	s.refused[key] = err
	if len(s.rorder) > 1024 {
		delete(s.refused, s.rorder[0])
		s.rorder = s.rorder[1:]
	}
}

// refusal is why the request key is not shown here, if it lately came
// and this approver may not decide it; nil otherwise.
func (s *store) refusal(key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused[key]
}

// markSent hides the held request key, on which d was published at at
// with no outcome yet.
func (s *store) markSent(key string, d wire.Decision, at time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.byKey[key]
	if !ok {
		return false
	}
	e.sent, e.note = &sentDecision{d: d, at: at}, ""
	s.notifyLocked()
	return true
}

// held lists the calls of every held request, shown or not.
func (s *store) held() []wire.ApprovalRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]wire.ApprovalRequest, 0, len(s.byKey))
	for _, e := range s.byKey {
		out = append(out, wire.ApprovalRequest{RunID: e.req.RunID, ToolCallID: e.req.ToolCallID})
	}
	return out
}

// sentKeys are the keys of the requests held awaiting the outcome of a
// decision made here.
func (s *store) sentKeys() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]bool{}
	for k, e := range s.byKey {
		if e.sent != nil {
			out[k] = true
		}
	}
	return out
}

// isSent reports whether key is held awaiting the outcome of a decision
// made here.
func (s *store) isSent(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.byKey[key]
	return ok && e.sent != nil
}

// unsend shows the hidden requests f picks again, each with the note f
// gives, and returns their decisions.
func (s *store) unsend(f func(*entry) (note string, ok bool)) []wire.Decision {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []wire.Decision
	for _, e := range s.byKey {
		if e.sent == nil {
			continue
		}
		if note, ok := f(e); ok {
			out = append(out, e.sent.d)
			e.sent, e.note = nil, note
			e.gen = s.gen + 1
		}
	}
	if len(out) > 0 {
		s.notifyLocked()
	}
	return out
}

// reason is why key was removed, if it was lately.
func (s *store) reason(key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reasons[key]
}

// drain takes out everything.
func (s *store) drain() []*entry {
	return s.removeIf(func(*entry) (string, bool) { return "inbox stopped", true })
}

// snapshot lists the items, oldest first, with the channel that closes
// at the next change.
func (s *store) snapshot() ([]Item, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	items := make([]Item, 0, len(s.byKey))
	for _, e := range s.byKey {
		if e.sent == nil {
			items = append(items, itemOf(e))
		}
	}
	slices.SortFunc(items, func(a, b Item) int {
		if c := a.Received.Compare(b.Received); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	return items, s.changed
}

func (s *store) generation() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen
}

// decidedLog remembers what was decided here, bounded (oldest forgotten
// first): a redelivered request already decided is not shown again, and
// the conversation view can say who decided.
type decidedLog struct {
	mu    sync.Mutex
	max   int
	byKey map[string]wire.Decision
	order []string
}

func newDecidedLog(max int) *decidedLog {
	return &decidedLog{max: max, byKey: make(map[string]wire.Decision)}
}

func (l *decidedLog) add(d wire.Decision) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := keyOf(d.RunID, d.ToolCallID)
	if _, ok := l.byKey[k]; !ok {
		l.order = append(l.order, k)
	}
	l.byKey[k] = d
	if len(l.order) > l.max {
		delete(l.byKey, l.order[0])
		l.order = l.order[1:]
	}
}

// forget drops key: the decision made on it was not applied.
func (l *decidedLog) forget(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.byKey[key]; !ok {
		return
	}
	delete(l.byKey, key)
	l.order = slices.DeleteFunc(l.order, func(k string) bool { return k == key })
}

func (l *decidedLog) has(key string) bool {
	_, ok := l.get(key)
	return ok
}

func (l *decidedLog) get(key string) (wire.Decision, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d, ok := l.byKey[key]
	return d, ok
}
