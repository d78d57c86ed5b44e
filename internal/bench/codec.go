package bench

import (
	"flag"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/wire"
)

// Metrics of the codec case: raw is JSON, toolgate is msgpack (the
// default wire codec), both through wire.Encode and wire.Decode as messages
// travel, validation included.
const (
	MetricCodecNsPerOp     = "codec_ns_per_op"
	MetricCodecBytesPerOp  = "codec_bytes_per_op"
	MetricCodecAllocsPerOp = "codec_allocs_per_op"
	MetricCodecWireBytes   = "codec_wire_bytes"
)

// CodecMessage is one wire message in its sample form.
type CodecMessage struct {
	Name string
	// Value is the message; New returns an empty one to decode into.
	Value any
	New   func() any
}

// CodecMessages are samples of every wire message, sized like real ones.
func CodecMessages() []CodecMessage {
	run := runID("c", 1)
	return []CodecMessage{
		{"CallRequest", sampleCallRequest(run, "conv_"+run[4:], toolCallID(run, 0)), func() any { return new(wire.CallRequest) }},
		{"ApprovalRequest", sampleApprovalRequest(), func() any { return new(wire.ApprovalRequest) }},
		{"CallReply", replyFor(sampleCallRequest(run, "conv_"+run[4:], toolCallID(run, 0)), "worker-1"), func() any { return new(wire.CallReply) }},
		{"Decision", sampleDecision(), func() any { return new(wire.Decision) }},
		{"Event", sampleEvent(), func() any { return new(wire.Event) }},
	}
}

// CodecBenchmark is one message, operation and codec.
type CodecBenchmark struct {
	Message     string
	Op          string // "encode" or "decode"
	ContentType string
	F           func(b *testing.B)
}

// Name is message/op/codec, as go test -bench shows it.
func (cb CodecBenchmark) Name() string {
	return cb.Message + "/" + cb.Op + "/" + codecName(cb.ContentType)
}

func codecName(ct string) string {
	if ct == wire.ContentTypeJSON {
		return "json"
	}
	return "msgpack"
}

// CodecBenchmarks are the encode and decode benchmarks of every message in
// both codecs.
func CodecBenchmarks() ([]CodecBenchmark, error) {
	var out []CodecBenchmark
	for _, m := range CodecMessages() {
		for _, ct := range []string{wire.ContentTypeJSON, wire.ContentTypeMsgpack} {
			data, err := wire.Encode(m.Value, ct)
			if err != nil {
				return nil, fmt.Errorf("encode %s as %s: %w", m.Name, ct, err)
			}
			if err := wire.Decode(data, ct, m.New()); err != nil {
				return nil, fmt.Errorf("decode %s as %s: %w", m.Name, ct, err)
			}
			out = append(out,
				CodecBenchmark{Message: m.Name, Op: "encode", ContentType: ct, F: func(b *testing.B) {
					b.ReportAllocs()
					b.SetBytes(int64(len(data)))
					for b.Loop() {
						if _, err := wire.Encode(m.Value, ct); err != nil {
							b.Fatal(err)
						}
					}
				}},
				CodecBenchmark{Message: m.Name, Op: "decode", ContentType: ct, F: func(b *testing.B) {
					b.ReportAllocs()
					b.SetBytes(int64(len(data)))
					for b.Loop() {
						if err := wire.Decode(data, ct, m.New()); err != nil {
							b.Fatal(err)
						}
					}
				}},
			)
		}
	}
	return out, nil
}

// CodecResult is one benchmark's figures.
type CodecResult struct {
	Benchmark   CodecBenchmark
	NsPerOp     float64
	BytesPerOp  float64
	AllocsPerOp float64
}

var benchTimeMu sync.Mutex

// RunCodecBenchmarks runs every codec benchmark through testing.Benchmark
// for about d each (0: testing's default, one second).
func RunCodecBenchmarks(d time.Duration) ([]CodecResult, error) {
	cbs, err := CodecBenchmarks()
	if err != nil {
		return nil, err
	}
	benchTimeMu.Lock()
	defer benchTimeMu.Unlock()
	if d > 0 {
		restore, err := setBenchTime(d)
		if err != nil {
			return nil, err
		}
		defer restore()
	}
	out := make([]CodecResult, 0, len(cbs))
	for _, cb := range cbs {
		r := testing.Benchmark(cb.F)
		if r.N == 0 {
			return nil, fmt.Errorf("codec benchmark %s failed", cb.Name())
		}
		out = append(out, CodecResult{
			Benchmark:   cb,
			NsPerOp:     float64(r.T.Nanoseconds()) / float64(r.N),
			BytesPerOp:  float64(r.MemBytes) / float64(r.N),
			AllocsPerOp: float64(r.MemAllocs) / float64(r.N),
		})
	}
	return out, nil
}

// setBenchTime sets testing's -test.benchtime, which testing.Benchmark
// reads; outside a test binary the flag exists only after testing.Init.
func setBenchTime(d time.Duration) (restore func(), err error) {
	f := flag.Lookup("test.benchtime")
	if f == nil {
		testing.Init()
		if f = flag.Lookup("test.benchtime"); f == nil {
			return nil, fmt.Errorf("testing has no benchtime flag")
		}
	}
	old := f.Value.String()
	if err := f.Value.Set(d.String()); err != nil {
		return nil, fmt.Errorf("set benchtime: %w", err)
	}
	return func() { _ = f.Value.Set(old) }, nil
}

// WireSizes is the encoded size of every sample message in JSON and
// msgpack.
func WireSizes() (map[string][2]int, error) {
	out := map[string][2]int{}
	for _, m := range CodecMessages() {
		j, err := wire.Encode(m.Value, wire.ContentTypeJSON)
		if err != nil {
			return nil, err
		}
		mp, err := wire.Encode(m.Value, wire.ContentTypeMsgpack)
		if err != nil {
			return nil, err
		}
		out[m.Name] = [2]int{len(j), len(mp)}
	}
	return out, nil
}
