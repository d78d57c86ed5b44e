package worker_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/embedded"
	"github.com/toolgate/toolgate/internal/bus/usersfile"
	"github.com/toolgate/toolgate/internal/disktest"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/wire"
)

// logSignal closes seen the first time a log line contains want.
type logSignal struct {
	want string
	once sync.Once
	seen chan struct{}
}

func newLogSignal(want string) *logSignal {
	return &logSignal{want: want, seen: make(chan struct{})}
}

func (s *logSignal) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(s.want)) {
		s.once.Do(func() { close(s.seen) })
	}
	return len(p), nil
}

func (s *logSignal) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(s, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func echoTool(name string) worker.Tool {
	return worker.Tool{
		Spec: worker.ToolSpec{Name: name},
		Executor: worker.ExecutorFunc(func(_ context.Context, req wire.CallRequest) (wire.CallReply, error) {
			return worker.ReturnValue(req.Args), nil
		}),
	}
}

// A worker started before the streams exist (as on a cluster that is not
// ready yet) keeps trying to create its consumer and serves once they do.
func TestWorkerStartsOnceTheStreamsExist(t *testing.T) {
	t.Parallel()
	srv := bustest.StartServer(t, embedded.ServerConfig{NoListen: true})
	e := &env{srv: srv, bus: bustest.Connect(t, srv, "test")}
	retrying := newLogSignal("cannot start consuming calls yet; retrying")
	stop := run(t, newWorker(t, worker.Config{
		Bus: e.bus, Tools: []worker.Tool{echoTool("echo")}, ID: "w1", Logger: retrying.logger(),
	}))
	bustest.Recv(t, retrying.seen, "a retried consumer creation")

	bustest.Setup(t, e.bus)
	got := e.replies(t)
	e.publish(t, call("echo", "c1", `{"x":1}`))
	r := got.wait(t, 1)[0]
	if r.ToolCallID != "c1" || r.Outcome != wire.OutcomeReturn || string(r.Value) != `{"x":1}` || r.WorkerID != "w1" {
		t.Errorf("reply = %+v, want c1 returning {\"x\":1} from w1", r)
	}
	if err := stop(); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
}

// Stopping a worker that is still waiting for its streams is a clean stop.
func TestWorkerStopsWhileStarting(t *testing.T) {
	t.Parallel()
	srv := bustest.StartServer(t, embedded.ServerConfig{NoListen: true})
	b := bustest.Connect(t, srv, "test")
	retrying := newLogSignal("cannot start consuming calls yet; retrying")
	stop := run(t, newWorker(t, worker.Config{
		Bus: b, Tools: []worker.Tool{echoTool("echo")}, Logger: retrying.logger(),
	}))
	bustest.Recv(t, retrying.seen, "a retried consumer creation")
	if err := stop(); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
}

// A permission error is not retried: a worker whose user may not consume
// calls fails at once.
func TestWorkerPermissionDeniedFailsAtOnce(t *testing.T) {
	t.Parallel()
	var users []bus.User
	for _, role := range []string{bus.RoleOrchestrator, bus.RoleApprover} {
		p, err := bus.RolePermissions(role)
		if err != nil {
			t.Fatal(err)
		}
		users = append(users, bus.User{Name: role, Password: role + "-pw", Permissions: p})
	}
	srv := bustest.StartServer(t, embedded.ServerConfig{NoListen: true, Users: users})
	admin := bustest.ConnectConfig(t, srv, bus.ConnConfig{Name: "admin", User: bus.RoleOrchestrator, Password: bus.RoleOrchestrator + "-pw"})
	bustest.Setup(t, admin)
	approver := bustest.ConnectConfig(t, srv, bus.ConnConfig{Name: "approver", User: bus.RoleApprover, Password: bus.RoleApprover + "-pw", Role: bus.RoleApprover})

	w := newWorker(t, worker.Config{Bus: approver, Tools: []worker.Tool{echoTool("echo")}})
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	err := w.Run(ctx)
	if !errors.Is(err, bus.ErrPermissionDenied) {
		t.Fatalf("Run = %v, want a permission error", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("Run returned only when its context ended: %v", err)
	}
}

// A worker started before the toolgate_tools bucket exists (an external
// server the orchestrator has not finished setting up) advertises its
// tools once the bucket is made.
func TestWorkerAdvertisesOnceTheBucketExists(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := bustest.Context(t)
	if err := e.bus.JetStream().DeleteKeyValue(ctx, wire.BucketTools); err != nil {
		t.Fatal(err)
	}
	retrying := newLogSignal("tool advertisements not possible yet; retrying")
	run(t, newWorker(t, worker.Config{
		Bus: e.bus, Tools: []worker.Tool{echoTool("echo")}, ID: "w1", Logger: retrying.logger(), Advertise: true,
	}))
	bustest.Recv(t, retrying.seen, "a retried opening of the bucket")

	bustest.Setup(t, e.bus)
	kv, err := e.bus.Tools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, "the worker's advert", func() bool {
		entry, err := kv.Get(ctx, "echo")
		if err != nil {
			return false
		}
		a, err := bus.DecodeToolAdvert(entry.Value)
		return err == nil && a.WorkerID == "w1"
	})
}

// A worker whose user may not make call_<tool> (the generated worker
// permissions) waits for the orchestrator to make it and serves from then
// on; when the consumer's filter is changed under it (by an operator: no
// worker may), it says so with an error and counts it.
func TestWorkerWaitsForItsConsumerAndTellsWhenItChanges(t *testing.T) {
	t.Parallel()
	users, err := usersfile.Parse([]byte("users:\n  - {name: orch, password: orch-pw, role: orchestrator}\n  - {name: w1, password: w1-pw, role: worker}\n"))
	if err != nil {
		t.Fatal(err)
	}
	srv := bustest.StartServer(t, embedded.ServerConfig{NoListen: true, Users: users})
	orch := bustest.ConnectConfig(t, srv, bus.ConnConfig{Name: "orch", User: "orch", Password: "orch-pw"})
	bustest.Setup(t, orch)
	changed := newLogSignal("consumer configuration was changed by another client")
	wb := bustest.ConnectConfig(t, srv, bus.ConnConfig{Name: "w1", User: "w1", Password: "w1-pw", Role: bus.RoleWorker,
		Logger: slog.New(slog.NewTextHandler(changed, &slog.HandlerOptions{Level: slog.LevelError}))})
	waiting := newLogSignal("waiting for the tool's call consumer")
	run(t, newWorker(t, worker.Config{
		Bus: wb, Tools: []worker.Tool{echoTool("echo")}, ID: "w1", ConsumerCheckEvery: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(waiting, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}))
	bustest.Recv(t, waiting.seen, "the worker waiting for call_echo")

	e := &env{srv: srv, bus: orch}
	got := e.replies(t)
	e.publish(t, call("echo", "c1", `{"x":1}`)) // makes call_echo first
	if r := got.wait(t, 1)[0]; r.ToolCallID != "c1" || r.WorkerID != "w1" {
		t.Errorf("reply = %+v, want c1 from w1", r)
	}

	ctx := bustest.Context(t)
	cons, err := orch.JetStream().Consumer(ctx, wire.StreamCalls, "call_echo")
	if err != nil {
		t.Fatal(err)
	}
	edited := cons.CachedInfo().Config
	edited.FilterSubject = "toolgate.call.nothing"
	if _, err := orch.JetStream().UpdateConsumer(ctx, wire.StreamCalls, edited); err != nil {
		t.Fatal(err)
	}
	bustest.Recv(t, changed.seen, "an error record of the changed consumer")
	bustest.WaitFor(t, "the change counted", func() bool { return wb.ConsumerDrifts() >= 1 })
}

// A worker started while the server's disk is full (its store cannot take
// the worker's consumer) keeps trying, saying why, and serves once there
// is room again, instead of failing at once.
func TestWorkerStartsOnceTheDiskHasRoom(t *testing.T) {
	t.Parallel()
	dir := disktest.Tmpfs(t, "16m")
	srv := bustest.StartServer(t, embedded.ServerConfig{NoListen: true, StoreDir: filepath.Join(dir, "store"),
		MinFreeBytes: 1 << 20, StoreCheckInterval: 50 * time.Millisecond})
	e := &env{srv: srv, bus: bustest.Connect(t, srv, "test")}
	bustest.Setup(t, e.bus)
	filler := filepath.Join(dir, "filler")
	disktest.Fill(t, filler)

	retrying := newLogSignal("no room")
	stop := run(t, newWorker(t, worker.Config{
		Bus: e.bus, Tools: []worker.Tool{echoTool("echo")}, ID: "w1", Logger: retrying.logger(),
	}))
	bustest.Recv(t, retrying.seen, "a retry for want of room")

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	got := e.replies(t)
	e.publish(t, call("echo", "c1", `{"x":1}`))
	if r := got.wait(t, 1)[0]; r.ToolCallID != "c1" || r.WorkerID != "w1" {
		t.Errorf("reply = %+v, want c1 from w1", r)
	}
	if err := stop(); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
}
