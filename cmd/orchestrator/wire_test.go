package main

import (
	"io"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/bus"
)

func TestWireFlag(t *testing.T) {
	t.Parallel()
	for arg, want := range map[string]string{"": bus.ContentTypeMsgpack, "msgpack": bus.ContentTypeMsgpack, "json": bus.ContentTypeJSON} {
		args := []string{}
		if arg != "" {
			args = append(args, "--wire", arg)
		}
		o, err := parseFlags(args, io.Discard)
		if err != nil || o.contentType != want {
			t.Errorf("%v: content type %q, %v; want %q", args, o.contentType, err, want)
		}
	}
	if _, err := parseFlags([]string{"--wire", "xml"}, io.Discard); err == nil || !strings.Contains(err.Error(), "--wire") {
		t.Errorf("--wire xml: %v, want an error naming --wire", err)
	}
}
