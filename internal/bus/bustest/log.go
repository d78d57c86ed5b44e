package bustest

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// Logger logs at info level into the test's log, shown when it fails or
// with -v. Cleanups run last-in first-out, so whatever was started after
// this call and is stopped at cleanup still logs while it stops; lines
// written later are dropped, since testing panics on a log of a finished
// test.
func Logger(t testing.TB) *slog.Logger { return LevelLogger(t, slog.LevelInfo) }

// LevelLogger is Logger at level: slog.LevelWarn keeps a busy test's log
// to what went wrong (an embedded server logs why it refused a request
// only there).
func LevelLogger(t testing.TB, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(NewLogWriter(t), &slog.HandlerOptions{Level: level}))
}

// NewLogWriter returns a writer into the test's log that drops what is
// written once the cleanups registered after this call have run.
func NewLogWriter(t testing.TB) *LogWriter {
	w := &LogWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return w
}

// LogWriter writes into a test's log; see NewLogWriter.
type LogWriter struct {
	t    testing.TB
	mu   sync.Mutex
	done bool
}

func (w *LogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}
