package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// Target runs round-trip cases. Run sets up what the case needs, runs
// c.Warmup calls and then c.Calls measured calls, and tears its set-up
// down again before returning.
type Target interface {
	Name() string
	Run(ctx context.Context, c Case) (Measurement, error)
}

// Measurement is what a Target measured for one case.
type Measurement struct {
	// Calls is the number of measured calls that completed.
	Calls int `json:"calls"`
	// Elapsed runs from the first measured publish to the completion of
	// the last measured batch.
	Elapsed time.Duration `json:"elapsed_ns"`
	// Latency of each call from its publish to its batch being complete,
	// the moment a follow-up run can start ("the agent continues").
	Latency Summary `json:"latency"`
	// Reply latency of each call from its publish to its own reply being
	// consumed; zero when the target cannot see individual replies.
	Reply Summary `json:"reply"`
	// Redelivered counts messages JetStream delivered more than once
	// during the case (an AckWait expiry or a nak); each one is a latency
	// outlier worth explaining.
	Redelivered int64 `json:"redelivered"`
	// Stalls counts pulls the client library gave up on after missed
	// heartbeats during the case: each may leave a consumer with nothing
	// delivered for up to two heartbeats (10 s), which makes the case's
	// figures meaningless.
	Stalls int64 `json:"stalled_pulls,omitempty"`
	// Gap is the longest time during the case in which no batch
	// completed: a stall the client did not report shows here (see
	// StallGap).
	Gap time.Duration `json:"longest_gap_ns,omitempty"`
	// AllocBytes is the bytes the process allocated per measured call
	// (allocated): the garbage a call costs, whatever the machine's speed.
	AllocBytes float64 `json:"alloc_bytes_per_call,omitempty"`
	// CPU is the CPU time (user and system) the whole process spent per
	// measured call, in milliseconds (cpuUsed): the side, the embedded
	// server and the harness, as AllocBytes.
	CPU float64 `json:"cpu_ms_per_call,omitempty"`
	// StateWrites and StateBytes are the orchestrator's appends to
	// conversation logs per measured call, and their bytes: where its
	// overhead over the baseline goes. Zero for the baseline.
	StateWrites float64 `json:"state_writes_per_call,omitempty"`
	StateBytes  float64 `json:"state_bytes_per_call,omitempty"`
	// RoundTrips is the synchronous round trips to JetStream per
	// conversation: appends and reads of its log that a next step waits
	// for, that is all but the windowed appends of a run's end
	// (orchestrator Counts). Zero for the baseline.
	RoundTrips float64 `json:"sync_round_trips_per_conversation,omitempty"`
	// Stored is the messages stored per measured call, by stream (a
	// bucket's stream is KV_<bucket>).
	Stored map[string]float64 `json:"stored_per_call,omitempty"`
	// StoredBytes is the bytes stored per measured call, by stream, in the
	// streams that keep what they store (not a work queue, whose messages
	// go once acknowledged), as the streams count them: payload, subject
	// and headers.
	StoredBytes map[string]float64 `json:"stored_bytes_per_call,omitempty"`
	// Periodic is the messages stored per second, over the case, in the
	// streams written per replica as time passes rather than per call
	// (perReplicaStreams); they are not in Stored.
	Periodic map[string]float64 `json:"periodic_per_second,omitempty"`
	// Events is Stored's share of the events stream.
	Events float64 `json:"events_per_call,omitempty"`
}

// StallGap is the longest time without a completed batch that a case
// may have before it counts as stalled: a batch takes milliseconds, the
// client's pull stalls take seconds.
const StallGap = time.Second

// Stalled says why the measurement is distorted, or "" if it is not.
func (m Measurement) Stalled() string {
	switch {
	case m.Stalls > 0:
		return fmt.Sprintf("%d stalled pulls", m.Stalls)
	case m.Gap >= StallGap:
		return fmt.Sprintf("no batch completed for %.1f s", m.Gap.Seconds())
	}
	return ""
}

// StoredPerCall is the messages stored per call in every stream.
func (m Measurement) StoredPerCall() float64 {
	var n float64
	for _, v := range m.Stored {
		n += v
	}
	return n
}

// Throughput is completed calls per second.
func (m Measurement) Throughput() float64 {
	if m.Elapsed <= 0 {
		return 0
	}
	return float64(m.Calls) / m.Elapsed.Seconds()
}

// Implausible says why the heap figure cannot be what the conversations
// cost, or "" if it can be: a paused conversation holds at least its entry,
// so the heap it adds is positive, and no less than the side's own share
// measured by allocation site (toolgate's, which is sampled: with room for
// the sampling's error). Full runs read -1,347 B per conversation at
// 10,000 and -77,600 at 1,000: memory held when the case began (message
// ids of the cases before it, in the streams' duplicate windows, which the
// harness now waits out) was released during it. The check stays for what
// else may do that.
func (m MemoryMeasurement) Implausible() string {
	heap, ok := m.Figures[MetricHeapPerConversation]
	if !ok {
		return ""
	}
	if heap <= 0 {
		return fmt.Sprintf("heap per conversation %.0f B, not positive", heap)
	}
	if own, ok := m.Figures[MetricOrchestratorHeap]; ok && heap < own*implausibleShare {
		return fmt.Sprintf("heap per conversation %.0f B, below its own share %.0f B", heap, own)
	}
	return ""
}

// implausibleShare is how far below its own (sampled) share a side's heap
// per conversation may read before it is measured again.
const implausibleShare = 0.75

// MemoryCase is the paused-conversations case.
type MemoryCase struct {
	// Conversations paused at once, each waiting for one external call.
	Conversations int `json:"conversations"`
	// Settle is how long the case waits, before the heap is measured (at
	// the start and after each half of the conversations paused, see
	// heapSlope), for the embedded server to drop its caches of what was
	// last written (CacheSettle): raw writes nothing meanwhile and waits
	// that long; toolgate waits until it has stored nothing for that long,
	// as its index and reconcile write for a paused conversation 10 to 30 s
	// after it paused. 0 measures at once.
	Settle time.Duration `json:"-"`
}

// CacheSettle is how long nats-server's file store keeps a message
// block's cache after its last read or write (10 s, its
// defaultCacheBufferExpiration, checked on a 100 ms tick), with a margin.
// Measured before that, a heap holds the server's copies of the last
// seconds' writes: a cost of the write rate, which a conversation paused
// for minutes does not keep, and which made raw's own figure 6 KB per
// conversation at 1,000 and 0.4 KB at 100,000.
const CacheSettle = 11 * time.Second

// settle waits d for the server's caches to expire (see CacheSettle).
func settle(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Name identifies the case in results.
func (c MemoryCase) Name() string { return "paused/conversations=" + strconv.Itoa(c.Conversations) }

// MemoryTarget holds c.Conversations paused conversations, then delivers
// every reply and waits until all are resumed.
type MemoryTarget interface {
	Name() string
	RunMemory(ctx context.Context, c MemoryCase) (MemoryMeasurement, error)
}

// MemoryMeasurement holds the figures a MemoryTarget could measure, by
// metric name (MetricHeapPerConversation, MetricStorePerConversation,
// MetricResumeSeconds and target-specific extras, all documented in
// bench/README.md). A missing metric was not measured by this target.
type MemoryMeasurement struct {
	Conversations int                `json:"conversations"`
	Figures       map[string]float64 `json:"figures"`
	// ResumeGap is the longest time during the resume in which no
	// conversation finished resuming. A stall of either side moves the
	// ratio as much as anything measured, raw's in toolgate's favour.
	// Pulls the client gave up on are not counted, as Measurement.Stalls
	// counts them: toolgate's idle consumers miss heartbeats while a
	// resume keeps its client busy, and the resume goes on (1 to 5 such
	// pulls in each resume of 20,000, the longest gap 25 to 770 ms).
	ResumeGap time.Duration `json:"resume_longest_gap_ns,omitempty"`
}

// Distorted says why the figures are not to be taken, or "" if they are:
// a heap figure that cannot be (Implausible), or a resume in which nothing
// finished for StallGap or longer.
func (m MemoryMeasurement) Distorted() string {
	if why := m.Implausible(); why != "" {
		return why
	}
	return Measurement{Gap: m.ResumeGap}.Stalled()
}
