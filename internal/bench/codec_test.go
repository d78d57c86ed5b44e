package bench_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/toolgate/toolgate/internal/bench"
	"github.com/toolgate/toolgate/wire"
)

func BenchmarkCodec(b *testing.B) {
	cbs, err := bench.CodecBenchmarks()
	if err != nil {
		b.Fatal(err)
	}
	for _, cb := range cbs {
		b.Run(cb.Name(), cb.F)
	}
}

// Every sample survives a round trip through both codecs unchanged, so the
// benchmarks measure real messages.
func TestCodecSamplesRoundTrip(t *testing.T) {
	t.Parallel()
	for _, m := range bench.CodecMessages() {
		for _, ct := range []string{wire.ContentTypeJSON, wire.ContentTypeMsgpack} {
			t.Run(m.Name+"/"+ct, func(t *testing.T) {
				t.Parallel()
				data, err := wire.Encode(m.Value, ct)
				if err != nil {
					t.Fatal(err)
				}
				got := m.New()
				if err := wire.Decode(data, ct, got); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(m.Value, derefAny(got)); diff != "" {
					t.Errorf("round trip (-sent +decoded):\n%s", diff)
				}
			})
		}
	}
}

func derefAny(v any) any {
	switch p := v.(type) {
	case *wire.CallRequest:
		return *p
	case *wire.ApprovalRequest:
		return *p
	case *wire.CallReply:
		return *p
	case *wire.Decision:
		return *p
	case *wire.Event:
		return *p
	}
	return v
}

func TestRunCodecBenchmarks(t *testing.T) {
	rs, err := bench.RunCodecBenchmarks(time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 5*2*2 {
		t.Fatalf("got %d results, want 20 (5 messages, 2 ops, 2 codecs)", len(rs))
	}
	for _, r := range rs {
		if r.NsPerOp <= 0 || r.AllocsPerOp <= 0 || r.BytesPerOp <= 0 {
			t.Errorf("%s: ns/op %f, B/op %f, allocs/op %f: want all positive", r.Benchmark.Name(), r.NsPerOp, r.BytesPerOp, r.AllocsPerOp)
		}
	}
	sizes, err := bench.WireSizes()
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range sizes {
		if s[1] <= 0 || s[1] >= s[0] {
			t.Errorf("%s: msgpack %d bytes, JSON %d: want msgpack smaller", name, s[1], s[0])
		}
	}
}
