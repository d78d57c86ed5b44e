package toolgatetest_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"testing/fstest"

	"github.com/toolgate/toolgate/approval"
	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/worker"
)

// A whole system in a test: the agent of agentYAML (a script model that
// calls get_weather and asks to delete a file), a Go worker for the
// weather, and a bot that denies the delete; the conversation runs to its
// end.
func ExampleStart() {
	t := &exampleT{} // in a test: the test's *testing.T
	defer t.finish()

	sys := toolgatetest.Start(t, toolgatetest.Options{
		Agent:    []byte(agentYAML),
		AgentDir: fstest.MapFS{"script.yaml": {Data: []byte(scriptYAML)}},
	})
	serveWeather(t, sys)

	ctx, cancel := context.WithTimeout(context.Background(), toolgatetest.Timeout)
	defer cancel()
	run, err := sys.Client.Start(ctx, client.StartRequest{Prompt: "Weather in Paris? And delete /etc/passwd."})
	if err != nil {
		t.Fatal(err)
	}
	conv, err := sys.Client.Wait(ctx, run.ConversationID)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(conv.Status, string(conv.Output))
	// Output: completed "It is sunny in Paris; I was not allowed to delete the file."
}

// serveWeather runs a Go worker for get_weather and an approval bot that
// denies every call it is asked about, both stopped at t's cleanup.
func serveWeather(t testing.TB, sys *toolgatetest.System) {
	w, err := worker.New(sys.Conn(), worker.Config{ID: "weather"})
	if err != nil {
		t.Fatal(err)
	}
	err = worker.Register(w, "get_weather", "Current weather of a city.", func(ctx context.Context, call worker.Call, a struct {
		City string `json:"city"`
	}) (string, error) {
		return "sunny in " + a.City, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sys.Go("worker", w.Run)
	sys.Approve("bot", nil, approval.DeciderFunc(func(ctx context.Context, req approval.Request) (approval.Verdict, error) {
		return approval.Deny("not " + req.ToolName), nil
	}))
}

// exampleT stands in for the *testing.T an Example does not have: it
// gives what Start uses, and runs the cleanups at finish.
type exampleT struct {
	testing.TB
	cleanups []func()
}

func (t *exampleT) Helper()                      {}
func (t *exampleT) Cleanup(f func())             { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Fatal(args ...any)            { panic(fmt.Sprint(args...)) }
func (t *exampleT) Errorf(f string, args ...any) { fmt.Printf("error: "+f+"\n", args...) }
func (t *exampleT) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }

func (t *exampleT) TempDir() string {
	dir, err := os.MkdirTemp("", "toolgatetest-example-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func (t *exampleT) finish() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}
