package agentconfig_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/agentconfig"
)

// overloaded is a chat completions server that answers 503 to the first
// attempts (with the Retry-After given for each, "" for none) and 200 after
// them, recording when each attempt came.
type overloaded struct {
	srv *httptest.Server

	mu sync.Mutex
	at []time.Time
}

func newOverloaded(t *testing.T, retryAfter ...string) *overloaded {
	t.Helper()
	o := &overloaded{}
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		o.mu.Lock()
		n := len(o.at)
		o.at = append(o.at, time.Now())
		o.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if n < len(retryAfter) {
			if retryAfter[n] != "" {
				w.Header().Set("Retry-After", retryAfter[n])
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":{"message":"overloaded"}}`)
			return
		}
		_, _ = io.WriteString(w, `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`)
	}))
	t.Cleanup(o.srv.Close)
	return o
}

func (o *overloaded) attempts() []time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]time.Time(nil), o.at...)
}

func (o *overloaded) model(t *testing.T, extra string) agent.Model {
	t.Helper()
	return o.modelLogging(t, extra, nil)
}

// modelLogging is model with its log written to log.
func (o *overloaded) modelLogging(t *testing.T, extra string, log *slog.Logger) agent.Model {
	t.Helper()
	cfg, err := agentconfig.Parse([]byte("model: {provider: openai, name: m, base_url: \""+o.srv.URL+"/v1\""+extra+"}\ntools:\n  - name: t\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := cfg.ModelFunc(nil, log)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func ask(t *testing.T, m agent.Model) error {
	t.Helper()
	_, err := m.Request(t.Context(), agent.ModelRequest{Messages: []agent.Message{{
		Kind: agent.KindRequest, Parts: []agent.Part{{Kind: agent.PartUserPrompt, Content: "hi"}},
	}}})
	return err
}

// model.retries bounds the attempts and model.backoff sets the first wait
// when the provider gives no Retry-After; a Retry-After wins over it.
func TestModelRetriesAndBackoff(t *testing.T) {
	t.Parallel()
	t.Run("retry-after then backoff", func(t *testing.T) {
		t.Parallel()
		o := newOverloaded(t, "1", "")
		var log bytes.Buffer
		m := o.modelLogging(t, ", retries: 2, backoff: 200ms", slog.New(slog.NewJSONHandler(&log, nil)))
		if err := ask(t, m); err != nil {
			t.Fatalf("Request: %v", err)
		}
		// The waits as the model logs them: Retry-After's, then the
		// second retry's backoff (twice 200ms) less at most a quarter of
		// jitter.
		var waits []time.Duration
		for line := range strings.Lines(log.String()) {
			var rec struct {
				Msg  string `json:"msg"`
				Wait int64  `json:"wait"`
			}
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			if strings.Contains(rec.Msg, "retrying") {
				waits = append(waits, time.Duration(rec.Wait))
			}
		}
		if len(waits) != 2 || waits[0] != time.Second || waits[1] < 300*time.Millisecond || waits[1] > 400*time.Millisecond {
			t.Errorf("waits %v, want [1s, 300ms..400ms]", waits)
		}
		at := o.attempts()
		if len(at) != 3 {
			t.Fatalf("%d attempts, want 3", len(at))
		}
		if gap := at[1].Sub(at[0]); gap < time.Second {
			t.Errorf("second attempt %s after the first, want at least Retry-After's 1s", gap)
		}
		if gap := at[2].Sub(at[1]); gap < 300*time.Millisecond {
			t.Errorf("third attempt %s after the second, want at least 300ms", gap)
		}
	})
	for _, tc := range []struct {
		name  string
		extra string
		want  int
	}{
		{"retries 1", ", retries: 1", 2},
		{"retries 0", ", retries: 0", 1},
		{"default", "", 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := newOverloaded(t, "0", "0", "0", "0", "0", "0", "0")
			err := ask(t, o.model(t, tc.extra))
			if err == nil || !strings.Contains(err.Error(), "status 503") {
				t.Errorf("error %v, want the 503", err)
			}
			if n := len(o.attempts()); n != tc.want {
				t.Errorf("%d attempts, want %d", n, tc.want)
			}
		})
	}
}
