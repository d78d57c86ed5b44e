package bus

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// After Setup, what the server holds covers what Setup asks for, so the
// next Setup (every process start) sends no update; a changed setting does
// not cover.
func TestSetupLeavesConfiguredStreamsAlone(t *testing.T) {
	// A bare nats-server: package embedded imports bus, so this internal
	// test cannot use it.
	srv, err := server.NewServer(&server.Options{JetStream: true, StoreDir: t.TempDir(), DontListen: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	ctx := t.Context()
	b, err := ConnectInProcess(ctx, srv, ConnConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	cfg := SetupConfig{}
	if err := b.Setup(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	for _, sc := range cfg.StreamConfigs() {
		st, err := b.js.Stream(ctx, sc.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !covers(st.CachedInfo().Config, sc) {
			t.Errorf("stream %s: the server's config does not cover Setup's; every start would update it", sc.Name)
		}
		changed := sc
		changed.MaxAge += time.Hour
		if covers(st.CachedInfo().Config, changed) {
			t.Errorf("stream %s: a changed max age is covered", sc.Name)
		}
	}
	for _, kc := range cfg.KeyValueConfigs() {
		kv, err := b.js.KeyValue(ctx, kc.Bucket)
		if err != nil {
			t.Fatal(err)
		}
		st, err := kv.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !covers(st.Config(), kc) {
			t.Errorf("bucket %s: the server's config does not cover Setup's; every start would update it", kc.Bucket)
		}
		changed := kc
		changed.History++
		if covers(st.Config(), changed) {
			t.Errorf("bucket %s: a changed history is covered", kc.Bucket)
		}
	}
}
