package toolgatetest

import (
	"context"
	"crypto/ed25519"
	"log/slog"
	"reflect"
	"testing"
	"testing/fstest"

	"github.com/toolgate/toolgate"
	"github.com/toolgate/toolgate/agenttool"
	"github.com/toolgate/toolgate/deferred"
)

type stubModel struct{}

func (stubModel) Name() string { return "stub" }
func (stubModel) Request(context.Context, toolgate.ModelRequest) (toolgate.ModelResponse, error) {
	return toolgate.ModelResponse{}, nil
}

// Every option reaches the orchestrator's config under its own name: an
// option added to Options and not passed on fails here.
func TestConfigCarriesEveryOption(t *testing.T) {
	t.Parallel()
	tool, err := agenttool.New("t", "", func(*agenttool.RunContext, struct{}) (int, error) { return 0, nil })
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{
		Agent:            []byte("model: {provider: test}\n"),
		AgentDir:         fstest.MapFS{},
		TrustedApprovers: map[string]ed25519.PublicKey{"ann": make(ed25519.PublicKey, ed25519.PublicKeySize)},
		Tools:            []agenttool.Tool{tool},
		Handlers: []agenttool.Handler{agenttool.HandlerFunc(func(*agenttool.RunContext, *deferred.Requests) (*deferred.Results, error) {
			return nil, nil
		})},
		Model:    stubModel{},
		Deps:     "deps",
		APIToken: "token",
		Logger:   slog.New(slog.DiscardHandler),
	}
	ov := reflect.ValueOf(opts)
	for i := range ov.NumField() {
		if ov.Field(i).IsZero() {
			t.Fatalf("set Options.%s in this test", ov.Type().Field(i).Name)
		}
	}
	cv := reflect.ValueOf(opts.config(opts.Agent, opts.AgentDir, opts.Logger))
	for i := range ov.NumField() {
		name := ov.Type().Field(i).Name
		got := cv.FieldByName(name)
		if !got.IsValid() {
			t.Errorf("Options.%s: toolgate.Config has no field of that name", name)
			continue
		}
		if !reflect.DeepEqual(got.Interface(), ov.Field(i).Interface()) {
			t.Errorf("Options.%s is not carried to the orchestrator", name)
		}
	}
}
