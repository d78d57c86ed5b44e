package bus

import (
	"testing"
	"time"
)

// After Setup, what the server holds covers what Setup asks for, so the
// next Setup (every process start) sends no update; a changed setting does
// not cover.
func TestSetupLeavesConfiguredStreamsAlone(t *testing.T) {
	srv, err := StartServer(ServerConfig{StoreDir: t.TempDir(), NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	ctx := t.Context()
	b, err := srv.Connect(ctx, ConnConfig{})
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
