package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/worker"
)

// Metrics of the long-conversation cases (toolgate only). A call's time runs
// from the previous run's pause to its own run's pause (RunRecord.EndedAt):
// the whole cycle of one call; its bytes are the orchestrator's
// Counts.StateBytes written in that time. "first" and "last" are the first
// and last LongWindow calls (the first call, which creates the
// conversation, left out); times are medians, bytes means, of the
// conversation whose time ratio is the median of longRepeats.
const (
	MetricBytesFirst  = "state_bytes_per_call_first"
	MetricBytesLast   = "state_bytes_per_call_last"
	MetricBytesGrowth = "state_bytes_per_call_last_over_first"
	MetricTimeFirst   = "ms_per_call_first"
	MetricTimeLast    = "ms_per_call_last"
	MetricTimeGrowth  = "ms_per_call_last_over_first"
	// MetricSeconds is a whole conversation's time, from its start to its
	// end, MetricStateBytes the bytes of records it wrote, and
	// MetricHistoryBytes its history's size in JSON at the end (the large
	// case's).
	MetricSeconds      = "seconds"
	MetricStateBytes   = "state_bytes"
	MetricHistoryBytes = "history_bytes"
)

// LongWindow is the number of calls at either end of a long conversation
// whose figures are compared.
const LongWindow = 50

// LongCase is one conversation of Calls sequential deferred calls: its
// script calls one tool, pauses until the reply, calls again in the
// follow-up, and so on, then answers. With ResultBytes 0 the tool is noop
// with the sample arguments; otherwise it is read_file of a file of
// ResultBytes bytes, so that each result adds that much to the history.
type LongCase struct {
	Calls       int `json:"calls"`
	ResultBytes int `json:"result_bytes,omitempty"`
}

// Name identifies the case in results.
func (c LongCase) Name() string {
	if c.ResultBytes > 0 {
		return fmt.Sprintf("large/calls=%d/result_kib=%d", c.Calls, c.ResultBytes>>10)
	}
	return "long/calls=" + strconv.Itoa(c.Calls)
}

// LargeCase is the conversation of results of resultBytes each whose
// history reaches at least history bytes.
func LargeCase(history, resultBytes int) LongCase {
	return LongCase{Calls: (history+resultBytes-1)/resultBytes + 1, ResultBytes: resultBytes}
}

// LongTarget runs long-conversation cases.
type LongTarget interface {
	Name() string
	RunLong(ctx context.Context, c LongCase) (LongMeasurement, error)
}

// LongMeasurement holds a long case's figures by metric name.
type LongMeasurement struct {
	Figures map[string]float64 `json:"figures"`
}

// longFile is the file read_file returns in the large case.
const longFile = "bench-large-result.txt"

// RunLong drives conversations of c.Calls calls with one worker, one at a
// time, and measures each call from the OnRunEnd of its pause.
func (t *ToolgateTarget) RunLong(ctx context.Context, c LongCase) (LongMeasurement, error) {
	if c.Calls < 2 {
		return LongMeasurement{}, errors.New("toolgate long: calls must be at least 2")
	}
	a, tool, err := t.longAgent(c)
	if err != nil {
		return LongMeasurement{}, err
	}
	r, err := t.setUpWith(ctx, rigConfig{agent: a})
	if err != nil {
		return LongMeasurement{}, err
	}
	defer r.tearDown(ctx)
	r.measureHistory = true
	var (
		mu      sync.Mutex
		pauses  = map[string][]runEnd{}
		changed = make(chan struct{}, 1)
	)
	r.paused = func(e runEnd) {
		mu.Lock()
		pauses[e.id] = append(pauses[e.id], e)
		mu.Unlock()
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if err := r.startWorkers(ctx, 1, tool); err != nil {
		return LongMeasurement{}, err
	}
	// A call among the first or last window is a fraction of a
	// millisecond, and a window a few tens of them: work the process or
	// the server does meanwhile for an earlier case (a purged stream's
	// files removed, a collection of its garbage) doubled the last
	// window's median once in a full run. The sequential case runs
	// longRepeats conversations and keeps the one whose growth is the
	// median; the large one, seconds long, runs once.
	repeats := longRepeats
	if c.ResultBytes > 0 {
		repeats = 1
	}
	var runs []map[string]float64
	for range repeats {
		figs, err := r.longConversation(ctx, c, func(id string) []runEnd {
			for {
				mu.Lock()
				got := slices.Clone(pauses[id])
				mu.Unlock()
				if len(got) >= c.Calls {
					return got
				}
				select {
				case <-changed:
				case <-time.After(conversationTimeout):
					return got
				}
			}
		})
		if err != nil {
			return LongMeasurement{}, err
		}
		runs = append(runs, figs)
	}
	slices.SortFunc(runs, func(a, b map[string]float64) int { return cmp.Compare(a[MetricTimeGrowth], b[MetricTimeGrowth]) })
	return LongMeasurement{Figures: runs[len(runs)/2]}, nil
}

// longRepeats is how many conversations the sequential long case runs.
const longRepeats = 3

// longConversation runs one conversation of the long case c and returns
// its figures; pausesOf waits for the ends of the pauses of a conversation
// (one per call) and returns them.
func (r *rig) longConversation(ctx context.Context, c LongCase, pausesOf func(id string) []runEnd) (map[string]float64, error) {
	bytes0 := r.stats.StateBytes.Load()
	start := time.Now()
	info, err := r.start(ctx)
	if err != nil {
		return nil, fmt.Errorf("toolgate %s: %w", c.Name(), err)
	}
	end, err := r.awaitFor(ctx, info.ConversationID, conversationTimeout+time.Duration(c.Calls)*time.Second)
	if err != nil {
		return nil, fmt.Errorf("toolgate %s: %w", c.Name(), err)
	}
	total := time.Since(start)
	if end.status != conversation.StatusCompleted {
		return nil, fmt.Errorf("toolgate %s: conversation %s %s: %s", c.Name(), end.id, end.status, end.err)
	}
	// The last pause's end may be told after the follow-up's.
	pauses := pausesOf(info.ConversationID)
	if len(pauses) != c.Calls {
		return nil, fmt.Errorf("toolgate %s: %d pauses, want one per call", c.Name(), len(pauses))
	}
	sizes, err := r.callBytes(ctx, info.ConversationID)
	if err != nil {
		return nil, fmt.Errorf("toolgate %s: %w", c.Name(), err)
	}
	if len(sizes) != c.Calls+1 {
		return nil, fmt.Errorf("toolgate %s: the log holds %d calls' records and an end, want %d", c.Name(), len(sizes)-1, c.Calls)
	}
	figs := longFigures(c, pauses, start, sizes)
	figs[MetricSeconds] = total.Seconds()
	figs[MetricStateBytes] = float64(r.stats.StateBytes.Load() - bytes0)
	figs[MetricHistoryBytes] = float64(end.historyBytes)
	return figs, nil
}

// longAgent is the long case's agent: a script that calls its tool once
// per call, then answers; with ResultBytes, the tool reads a file of that
// size from the workers' sandbox, written here.
func (t *ToolgateTarget) longAgent(c LongCase) (*orchestrator.AgentConfig, string, error) {
	tool, args := sampleTool, json.RawMessage(sampleArgs)
	if c.ResultBytes > 0 {
		tool, args = worker.ToolReadFile, json.RawMessage(`{"path":"`+longFile+`"}`)
		// Text without anything JSON escapes, so the result is as large
		// as the file.
		const line = "All work and no play makes a long history. "
		content := strings.Repeat(line, c.ResultBytes/len(line)+1)[:c.ResultBytes]
		if err := os.WriteFile(filepath.Join(t.env.sandbox(), longFile), []byte(content), 0o644); err != nil {
			return nil, "", fmt.Errorf("toolgate long: %w", err)
		}
	}
	script := make([]agent.ScriptResponse, 0, c.Calls+1)
	for i := range c.Calls {
		script = append(script, agent.ScriptResponse{Calls: []agent.ScriptCall{{Tool: tool, ID: fmt.Sprintf("call_%04d", i), Args: args}}})
	}
	script = append(script, agent.ScriptResponse{Text: "Done."})
	a, err := scriptAgent(script, tool)
	return a, tool, err
}

// callBytes is the bytes of the records of conversation id by call, read
// from its log once it finished: a call's records run up to the one that
// leaves the conversation paused (the last, finished). Read from the log
// rather than from the orchestrator's byte counter at each pause's
// OnRunEnd: that is told once the calls' publication is acknowledged, by
// when a quick worker's reply may have had the next call's records
// written, and a loaded machine counted a call's bytes for the one before.
func (r *rig) callBytes(ctx context.Context, id string) ([]float64, error) {
	var (
		out []float64
		cur float64
	)
	_, err := r.bus.ReadLog(ctx, bus.StreamConversations, bus.ConversationSubject(id), 0, func(m bus.LogMsg) error {
		cur += float64(len(m.Data))
		switch conversation.Status(m.Header.Get(orchestrator.RecordStatusHeader)) {
		case conversation.StatusPaused, conversation.StatusCompleted, conversation.StatusFailed:
			out, cur = append(out, cur), 0
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the log of %s: %w", id, err)
	}
	return out, nil
}

// longFigures are the per-call figures of the long case from its pauses
// and the bytes of each call's records: the time and state bytes of each
// call, compared between the first and the last LongWindow calls (the
// first call, which starts the conversation, left out).
func longFigures(c LongCase, pauses []runEnd, start time.Time, sizes []float64) map[string]float64 {
	// Ends of different runs may be seen out of order.
	slices.SortFunc(pauses, func(a, b runEnd) int { return a.runs - b.runs })
	times := make([]time.Duration, c.Calls)
	prevAt := start
	for i, p := range pauses {
		times[i] = p.endedAt.Sub(prevAt)
		prevAt = p.endedAt
	}
	figs := map[string]float64{}
	if c.ResultBytes == 0 {
		k := min(LongWindow, (c.Calls-1)/2)
		first, last := 1, c.Calls-k
		figs[MetricBytesFirst] = mean(sizes[first : first+k])
		figs[MetricBytesLast] = mean(sizes[last:])
		figs[MetricBytesGrowth] = figs[MetricBytesLast] / figs[MetricBytesFirst]
		figs[MetricTimeFirst] = ms(Summarize(slices.Clone(times[first : first+k])).P50)
		figs[MetricTimeLast] = ms(Summarize(slices.Clone(times[last:])).P50)
		figs[MetricTimeGrowth] = figs[MetricTimeLast] / figs[MetricTimeFirst]
	}
	return figs
}

func mean(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// longMetrics are the rows of a long case, in order.
func longMetrics(c LongCase) []string {
	if c.ResultBytes > 0 {
		return []string{MetricHistoryBytes, MetricSeconds, MetricStateBytes}
	}
	return []string{MetricBytesFirst, MetricBytesLast, MetricBytesGrowth, MetricTimeFirst, MetricTimeLast, MetricTimeGrowth,
		MetricSeconds, MetricStateBytes}
}

func longRows(c LongCase, m *LongMeasurement) []Row {
	var rows []Row
	for _, metric := range longMetrics(c) {
		row := Row{Name: c.Name(), Metric: metric, Workers: 1, Batch: 1}
		if m != nil {
			if v, ok := m.Figures[metric]; ok {
				row.Toolgate = num(v)
			}
		}
		rows = append(rows, row)
	}
	return rows
}
