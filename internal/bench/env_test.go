package bench_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// Cases delete the streams they made and the next case creates its own at
// once; the server's clean-up after an account's last stream must never
// remove the directory under a stream being created (without the env's
// stream that holds it, nine runs in ten of this test failed).
func TestEnvStreamsDeletedAndCreatedBackToBack(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	ctx := t.Context()
	b, err := env.Connect(ctx, "streams")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	js := b.JetStream()
	sc := jetstream.StreamConfig{Name: "BACK_TO_BACK", Subjects: []string{"back.to.back"}, Storage: jetstream.FileStorage}
	for i := range 2000 {
		if _, err := js.CreateStream(ctx, sc); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if err := js.DeleteStream(ctx, sc.Name); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
	}
}
