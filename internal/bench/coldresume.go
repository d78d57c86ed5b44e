package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/internal/bus"
)

// Metrics of the cold-resume case (toolgate only; the raw column of
// MetricColdLogReads is bare JetStream's).
const (
	// MetricResumeRateInCache is conversations resumed per second with
	// every paused state in the orchestrator's cache.
	MetricResumeRateInCache = "resume_per_s_in_cache"
	// MetricResumeRateCold is the same with a cache that holds a quarter
	// of them (coldCacheShare), resumed in the order they paused: the
	// least recently used first, so each is read from its log.
	MetricResumeRateCold = "resume_per_s_cold"
	// MetricColdOverInCache is MetricResumeRateCold over
	// MetricResumeRateInCache; the goal is at least 0.5.
	MetricColdOverInCache = "resume_cold_over_in_cache"
	// MetricColdReads is the log reads per conversation of the cold
	// resume (the in-cache one's is MetricResumeReads).
	MetricColdReads = "resume_state_reads_per_conversation_cold"
	// MetricColdLogReads is, per second, the reads of the paused
	// conversations' logs: raw, the batched direct gets of each log with
	// none of toolgate's code, as many at once as the orchestrator runs
	// runs (memoryStarters); toolgate, the cold resume's log reads over
	// the time the cold resume took beyond the in-cache one. Raw's is the
	// floor under what a cold state costs.
	MetricColdLogReads = "cold_log_reads_per_s"
	// MetricResumeCPUInCache and MetricResumeCPUCold are the process's
	// CPU time (user and system: the orchestrator, the server and the
	// harness) per conversation resumed, in microseconds: unlike a rate,
	// a figure other processes' load on the machine hardly moves.
	// MetricColdCPUOverInCache is the cold one over the in-cache one.
	MetricResumeCPUInCache   = "resume_cpu_us_per_conversation_in_cache"
	MetricResumeCPUCold      = "resume_cpu_us_per_conversation_cold"
	MetricColdCPUOverInCache = "resume_cpu_cold_over_in_cache"
)

// coldCacheShare: the cold side's cache holds 1/coldCacheShare of the
// paused conversations.
const coldCacheShare = 4

// ColdResumeCase resumes Conversations paused conversations on fresh
// streams each time, with a cache that holds them all and with one that
// holds a quarter of them, alternately, coldAttempts times each.
type ColdResumeCase struct {
	Conversations int `json:"conversations"`
	// Settle is the wait for the server's caches to expire before each
	// resume, as in the memory case (MemoryCase.Settle).
	Settle time.Duration `json:"-"`
}

// Name identifies the case in results.
func (c ColdResumeCase) Name() string {
	return fmt.Sprintf("cold_resume/paused=%d/cache_holds=%d", c.Conversations, c.Conversations/coldCacheShare)
}

// ColdResumeMeasurement is what the case measured.
type ColdResumeMeasurement struct {
	InCache, Cold resumeSide
	// CacheBytes is the cold side's StateCacheBytes, from RecordBytes.
	CacheBytes int64
	// RecordBytes is the bytes of records per paused conversation.
	RecordBytes float64
	// RawLogReads is the time of bare JetStream's reads of the paused
	// logs (MetricColdLogReads).
	RawLogReads time.Duration
	// Load is the machine's load average when the cold side ended.
	Load string
}

// resumeSide is one resume of the case.
type resumeSide struct {
	Elapsed time.Duration
	// Reads and Writes are the orchestrator's log reads and appends per
	// conversation during the resume.
	Reads, Writes float64
	Gap           time.Duration
	// CPU is the process's CPU time during the resume.
	CPU time.Duration
}

func (s resumeSide) rate(n int) float64 { return float64(n) / s.Elapsed.Seconds() }

// cpuPer is the side's CPU time per conversation, in microseconds.
func (s resumeSide) cpuPer(n int) float64 { return float64(s.CPU.Microseconds()) / float64(n) }

// RunColdResume measures c: the in-cache side, then the cold one.
func (t *ToolgateTarget) RunColdResume(ctx context.Context, c ColdResumeCase) (ColdResumeMeasurement, error) {
	n := c.Conversations
	if n < coldCacheShare {
		return ColdResumeMeasurement{}, fmt.Errorf("toolgate cold resume: %d conversations, want at least %d", n, coldCacheShare)
	}
	var m ColdResumeMeasurement
	for attempt := range coldAttempts {
		warm, perConv, _, err := t.resumeWith(ctx, n, 0, c.Settle, false)
		if err != nil {
			return m, fmt.Errorf("toolgate cold resume, in cache: %w", err)
		}
		if attempt == 0 {
			// The orchestrator estimates a state's heap at 1.2 times its
			// records (heapPerRecordByte): room for a quarter of them.
			m.RecordBytes = perConv
			m.CacheBytes = int64(perConv * 1.2 * float64(n/coldCacheShare))
		}
		cold, _, raw, err := t.resumeWith(ctx, n, m.CacheBytes, c.Settle, true)
		if err != nil {
			return m, fmt.Errorf("toolgate cold resume, cold: %w", err)
		}
		// Each side's fastest resume counts, and, apart, its least CPU.
		warmCPU, coldCPU := warm.CPU, cold.CPU
		if attempt > 0 {
			warmCPU, coldCPU = min(warmCPU, m.InCache.CPU), min(coldCPU, m.Cold.CPU)
		}
		if attempt == 0 || warm.Elapsed < m.InCache.Elapsed {
			m.InCache = warm
		}
		if attempt == 0 || cold.Elapsed < m.Cold.Elapsed {
			m.Cold = cold
		}
		m.InCache.CPU, m.Cold.CPU = warmCPU, coldCPU
		if attempt == 0 || raw < m.RawLogReads {
			m.RawLogReads = raw
		}
	}
	m.Load = loadAverage()
	return m, nil
}

// coldAttempts is how many times each side of the cold-resume case runs,
// alternately; each side's fastest counts. A resume of a few thousand
// takes seconds, and on the shared 2-core machine one run in three or so
// had a side slowed by twice (once the cold side read faster than the
// in-cache one).
const coldAttempts = 2

// resumeWith pauses n conversations on an orchestrator with a cache of
// cacheBytes (0: the default), waits for the store to be quiet and
// resumes them in the order they paused. It returns the resume, the
// bytes of records per paused conversation and, when rawReads, the time
// bare JetStream took to read every paused log (before the resume, the
// server's caches then left to expire again).
func (t *ToolgateTarget) resumeWith(ctx context.Context, n int, cacheBytes int64, wait time.Duration, rawReads bool) (resumeSide, float64, time.Duration, error) {
	a, err := agentConfig(1)
	if err != nil {
		return resumeSide{}, 0, 0, err
	}
	r, err := t.setUpWith(ctx, rigConfig{agent: a, maxRuns: memoryStarters, cacheBytes: cacheBytes})
	if err != nil {
		return resumeSide{}, 0, 0, err
	}
	defer r.tearDown(ctx)
	bytes0 := r.stats.StateBytes.Load()
	ids, runs, err := r.pauseAll(ctx, n)
	if err != nil {
		return resumeSide{}, 0, 0, err
	}
	perConv := float64(r.stats.StateBytes.Load()-bytes0) / float64(n)
	if err := r.eventsPublished(ctx); err != nil {
		return resumeSide{}, 0, 0, err
	}
	if err := r.quiet(ctx, wait); err != nil {
		return resumeSide{}, 0, 0, err
	}
	var raw time.Duration
	if rawReads {
		if raw, err = readLogsRaw(ctx, r.bus.Conn(), ids); err != nil {
			return resumeSide{}, 0, 0, err
		}
		if err := settle(ctx, wait); err != nil {
			return resumeSide{}, 0, 0, err
		}
	}
	replies, err := answers(runs)
	if err != nil {
		return resumeSide{}, 0, 0, err
	}
	reads0, writes0 := r.stats.StateReads.Load(), r.stats.StateWrites.Load()
	cpu0 := cpuUsed()
	res, err := r.resumeAll(ctx, ids, replies)
	if err != nil {
		return resumeSide{}, 0, 0, err
	}
	return resumeSide{
		Elapsed: res.elapsed, Gap: res.gap, CPU: cpuUsed() - cpu0,
		Reads:  float64(r.stats.StateReads.Load()-reads0) / float64(n),
		Writes: float64(r.stats.StateWrites.Load()-writes0) / float64(n),
	}, perConv, raw, nil
}

// readLogsRaw reads the log of each conversation in ids as the
// orchestrator's store does, with bare nats.go: one batched direct get of
// its subject from the stream's start (up to 64 messages, then an
// end-of-batch marker), answered on one subscription for all,
// memoryStarters at once. It returns the time all took.
func readLogsRaw(ctx context.Context, nc *nats.Conn, ids []string) (time.Duration, error) {
	api := "$JS.API.DIRECT.GET." + bus.StreamConversations
	prefix := nc.NewInbox() + "."
	var mu sync.Mutex
	reads := map[string]chan *nats.Msg{}
	sub, err := nc.Subscribe(prefix+"*", func(m *nats.Msg) {
		mu.Lock()
		ch := reads[m.Subject[len(prefix):]]
		mu.Unlock()
		if ch != nil {
			select {
			case ch <- m:
			default:
			}
		}
	})
	if err != nil {
		return 0, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	var next atomic.Int64
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for range memoryStarters {
		g.Go(func() error {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(ids) {
					return nil
				}
				token := strconv.Itoa(i)
				ch := make(chan *nats.Msg, 65)
				mu.Lock()
				reads[token] = ch
				mu.Unlock()
				err := readLogRaw(gctx, nc, api, prefix+token, bus.ConversationSubject(ids[i]), ch)
				mu.Lock()
				delete(reads, token)
				mu.Unlock()
				if err != nil {
					return err
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		return 0, fmt.Errorf("raw log reads: %w", err)
	}
	return time.Since(start), nil
}

// readLogRaw is one batched direct get of every message of subject,
// answered to inbox and delivered on ch.
func readLogRaw(ctx context.Context, nc *nats.Conn, api, inbox, subject string, ch <-chan *nats.Msg) error {
	req, err := json.Marshal(map[string]any{"seq": 1, "next_by_subj": subject, "batch": 64})
	if err != nil {
		return err
	}
	if err := nc.PublishRequest(api, inbox, req); err != nil {
		return err
	}
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	got := 0
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			return errors.New(subject + ": no answer")
		case m := <-ch:
			// The end-of-batch marker: a status message with no data.
			if len(m.Data) == 0 && m.Header.Get("Status") != "" {
				if got == 0 {
					return errors.New(subject + ": no message")
				}
				return nil
			}
			got++
		}
	}
}

// loadAverage is the machine's load average (the first three fields of
// /proc/loadavg), or "" where there is none.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// coldResume measures c on a ToolgateTarget of the run's env and adds its
// rows; a failure is recorded as toolgate's.
func (h *harnessRun) coldResume(ctx context.Context, c ColdResumeCase) {
	m, err := NewToolgateTarget(h.env).RunColdResume(ctx, c)
	if err != nil {
		h.toolgateErr(c.Name(), err)
		return
	}
	h.res.Cases = append(h.res.Cases, coldResumeRows(c, m)...)
	h.res.noteLoad(c.Name(), m.Load)
	n := c.Conversations
	fmt.Fprintf(h.cfg.Progress, "%-30s in cache %.0f/s (%.2f reads each, %.0f us CPU each) | cold %.0f/s (%.2f reads each, %.0f us CPU each), cache %d KiB for %.0f B of records each | raw log reads %.0f/s | load %s\n",
		c.Name(), m.InCache.rate(n), m.InCache.Reads, m.InCache.cpuPer(n), m.Cold.rate(n), m.Cold.Reads, m.Cold.cpuPer(n), m.CacheBytes>>10, m.RecordBytes, float64(n)/m.RawLogReads.Seconds(), m.Load)
}

// coldResumeRows are the rows of the cold-resume case.
func coldResumeRows(c ColdResumeCase, m ColdResumeMeasurement) []Row {
	n := c.Conversations
	row := func(metric string, raw, tg *float64) Row {
		return Row{Name: c.Name(), Metric: metric, Workers: 0, Batch: 1, Raw: raw, Toolgate: tg}
	}
	rows := []Row{
		row(MetricResumeRateInCache, nil, num(m.InCache.rate(n))),
		row(MetricResumeRateCold, nil, num(m.Cold.rate(n))),
		row(MetricColdOverInCache, nil, num(m.Cold.rate(n)/m.InCache.rate(n))),
		row(MetricResumeReads, nil, num(m.InCache.Reads)),
		row(MetricColdReads, nil, num(m.Cold.Reads)),
		row(MetricResumeCPUInCache, nil, num(m.InCache.cpuPer(n))),
		row(MetricResumeCPUCold, nil, num(m.Cold.cpuPer(n))),
		row(MetricColdCPUOverInCache, nil, num(m.Cold.cpuPer(n)/m.InCache.cpuPer(n))),
	}
	var tg *float64
	if extra := m.Cold.Elapsed - m.InCache.Elapsed; extra > 0 {
		tg = num(m.Cold.Reads * float64(n) / extra.Seconds())
	}
	return append(rows, row(MetricColdLogReads, num(float64(n)/m.RawLogReads.Seconds()), tg))
}
