package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/wire"
)

func TestWireFlag(t *testing.T) {
	t.Parallel()
	for arg, want := range map[string]string{"": wire.ContentTypeMsgpack, "msgpack": wire.ContentTypeMsgpack, "json": wire.ContentTypeJSON} {
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

func TestClaimWindowFlag(t *testing.T) {
	t.Parallel()
	for args, want := range map[string]time.Duration{"": 50 * time.Millisecond, "--claim-window=1s": time.Second, "--claim-window=0": -1} {
		o, err := parseFlags(strings.Fields(args), io.Discard)
		if err != nil || claimWindowOf(o.claimWindow) != want {
			t.Errorf("%q: window %s, %v; want %s", args, claimWindowOf(o.claimWindow), err, want)
		}
	}
	if _, err := parseFlags([]string{"--claim-window=-1s"}, io.Discard); err == nil || !strings.Contains(err.Error(), "--claim-window") {
		t.Errorf("--claim-window=-1s: %v, want an error naming it", err)
	}
}
