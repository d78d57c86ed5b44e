package orchestrator

import (
	"errors"
	"strings"
	"testing"
)

// A prompt is held to the size its run_started event can carry once
// JSON-escaped, not to its own length: 200 KiB of text passes, 200 KiB of
// '<' (six bytes each escaped) is refused, naming the event.
func TestCheckPrompt(t *testing.T) {
	if err := checkPrompt(strings.Repeat("plain text ", 200<<10/11)); err != nil {
		t.Errorf("200 KiB of text: %v", err)
	}
	var bad *BadRequestError
	err := checkPrompt(strings.Repeat("<", 200<<10))
	if !errors.As(err, &bad) || !strings.Contains(err.Error(), "run_started") {
		t.Errorf("200 KiB of '<': %v, want a *BadRequestError naming run_started", err)
	}
}
