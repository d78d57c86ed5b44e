package embedded

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/disktest"
)

// waitTimeout bounds every wait on a condition; generous for a loaded
// 2-core machine.
const waitTimeout = 30 * time.Second

func testLogger() *slog.Logger {
	if os.Getenv("TOOLGATE_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// A disk that fills below JetStream's limit leaves the stream that failed
// to write with its error, which nats-server never clears while the stream
// stays open. The server does not reopen the store while the disk is still
// short of MinFreeBytes; once it has them, it reopens it without a restart:
// the stream takes writes again, keeps what it held, and the clients
// connected all along go on (a durable pull consumer and a KV watcher
// receive what is written after).
func TestStoreReopensOnceTheDiskHasRoom(t *testing.T) {
	dir := disktest.Tmpfs(t, "16m")
	// The check runs only when the test calls it, to say when it may
	// reopen.
	s, err := StartServer(ServerConfig{StoreDir: filepath.Join(dir, "store"), NoListen: true, MinFreeBytes: 2 << 20, StoreCheckInterval: time.Hour, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitTimeout)
	defer cancel()
	b, err := s.Connect(ctx, bus.ConnConfig{Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	js := b.JetStream()

	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "D", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 16)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		got <- m.Subject()
		m.Ack()
	}, jetstream.PullExpiry(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "K", Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.Watch(ctx, "k.*", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	recv := func(want string) {
		t.Helper()
		select {
		case subj := <-got:
			if subj != want {
				t.Fatalf("consumer received %s, want %s", subj, want)
			}
		case <-time.After(waitTimeout):
			t.Fatalf("consumer received nothing, want %s", want)
		}
	}
	watch := func(key string) {
		t.Helper()
		for {
			select {
			case e := <-w.Updates():
				if e != nil && e.Key() == key {
					return
				}
			case <-time.After(waitTimeout):
				t.Fatalf("watcher saw no update of %s", key)
			}
		}
	}
	if _, err := js.Publish(ctx, "t.1", []byte("one")); err != nil {
		t.Fatal(err)
	}
	recv("t.1")
	if _, err := kv.Put(ctx, "k.1", []byte("one")); err != nil {
		t.Fatal(err)
	}
	watch("k.1")
	if err := s.WriteError(); err != nil {
		t.Fatalf("write error before the disk filled: %v", err)
	}

	filler := filepath.Join(dir, "filler")
	disktest.Fill(t, filler)
	// nats-server answers no publish to a stream that keeps a write
	// error, not even the one that failed.
	publishFull := func(subj string, data []byte) {
		t.Helper()
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		defer pcancel()
		if _, err := js.Publish(pctx, subj, data); err == nil {
			t.Fatalf("%s: a publish on a full disk was stored", subj)
		}
	}
	publishFull("t.2", bytes.Repeat([]byte("x"), 64<<10))
	werr := s.WriteError()
	if werr == nil || !strings.Contains(werr.Error(), "no space left") || !strings.Contains(werr.Error(), "reopened once its filesystem has 2.0 MiB free") {
		t.Fatalf("write error on a full disk: %v, want no space left and when it is reopened", werr)
	}

	// Still full: no reopening, and the stream still refuses.
	s.checkStore()
	if n := s.StoreReopens(); n != 0 {
		t.Fatalf("the store was reopened %d times on a full disk", n)
	}
	publishFull("t.3", []byte("small"))

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteError(); err == nil {
		t.Fatal("the write error went away before the store was reopened")
	}
	s.checkStore()
	if n := s.StoreReopens(); n != 1 {
		t.Fatalf("the store was reopened %d times once the disk had room, want 1", n)
	}
	if err := s.WriteError(); err != nil {
		t.Fatalf("write error after the store was reopened: %v", err)
	}

	if _, err := js.Publish(ctx, "t.4", []byte("four")); err != nil {
		t.Fatalf("publish after the store was reopened: %v", err)
	}
	recv("t.4")
	if _, err := kv.Put(ctx, "k.4", []byte("four")); err != nil {
		t.Fatalf("KV put after the store was reopened: %v", err)
	}
	watch("k.4")
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Errorf("the stream holds %d messages after reopening, want 2 (t.1 and t.4)", info.State.Msgs)
	}
	if e, err := kv.Get(ctx, "k.1"); err != nil || string(e.Value()) != "one" {
		t.Errorf("k.1 after reopening: %v %v", e, err)
	}
}
