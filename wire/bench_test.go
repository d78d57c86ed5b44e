package wire_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/toolgate/toolgate/wire"
)

func BenchmarkCodec(b *testing.B) {
	for _, v := range wireSamples() {
		name := reflect.TypeOf(v).Name()
		for _, ct := range []string{wire.ContentTypeMsgpack, wire.ContentTypeJSON} {
			short := map[string]string{wire.ContentTypeMsgpack: "msgpack", wire.ContentTypeJSON: "json"}[ct]
			data, err := wire.Encode(v, ct)
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("%s/%s/encode", name, short), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := wire.Encode(v, ct); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(data)), "bytes/msg")
			})
			b.Run(fmt.Sprintf("%s/%s/decode", name, short), func(b *testing.B) {
				b.ReportAllocs()
				typ := reflect.TypeOf(v)
				for b.Loop() {
					p := reflect.New(typ).Interface()
					if err := wire.Decode(data, ct, p); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
