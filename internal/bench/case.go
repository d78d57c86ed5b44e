package bench

import (
	"errors"
	"fmt"
)

// Case is one cell of the round-trip matrix.
type Case struct {
	// Workers is the number of tool-workers, each with its own connection
	// and one call in hand at a time.
	Workers int `json:"workers"`
	// Batch is the number of deferred calls a paused run waits for; its
	// follow-up can start only when every one of them has a reply.
	Batch int `json:"batch"`
	// Window is the number of calls in flight at once: Window/Batch
	// conversations (at least one) run concurrently.
	Window int `json:"window"`
	// Calls is the number of measured calls, rounded up to whole batches.
	Calls int `json:"calls"`
	// Warmup calls run first on the same set-up and are not measured.
	Warmup int `json:"warmup"`
	// Label, when set, names the case in results instead of its workers
	// and batch (a case of another window than the matrix's).
	Label string `json:"-"`
}

// Conversations is the number of conversations that run concurrently.
func (c Case) Conversations() int { return max(1, c.Window/max(1, c.Batch)) }

// Batches is the number of measured batches.
func (c Case) Batches() int { return (c.Calls + c.Batch - 1) / c.Batch }

// WarmupBatches is the number of warm-up batches.
func (c Case) WarmupBatches() int { return (c.Warmup + c.Batch - 1) / c.Batch }

// Name identifies the case in results.
func (c Case) Name() string {
	if c.Label != "" {
		return c.Label
	}
	return fmt.Sprintf("roundtrip/workers=%d/batch=%d", c.Workers, c.Batch)
}

func (c Case) validate() error {
	switch {
	case c.Workers < 1:
		return errors.New("workers must be at least 1")
	case c.Batch < 1:
		return errors.New("batch must be at least 1")
	case c.Window < 1:
		return errors.New("window must be at least 1")
	case c.Calls < 1:
		return errors.New("calls must be at least 1")
	case c.Warmup < 0:
		return errors.New("warmup must not be negative")
	}
	return nil
}

// Matrix is every combination of workers and batches, workers varying
// fastest within a batch size.
func Matrix(workers, batches []int, window, calls, warmup int) []Case {
	var cs []Case
	for _, b := range batches {
		for _, w := range workers {
			cs = append(cs, Case{Workers: w, Batch: b, Window: window, Calls: calls, Warmup: warmup})
		}
	}
	return cs
}
