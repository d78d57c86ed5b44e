package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// --stream-replicas says which replicas it sets (the streams', not the
// orchestrator's); --replicas, its name before, still works and is
// warned about, so that a deployment passing it does not break.
func TestStreamReplicasFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		args    []string
		want    int
		warned  bool
		wantErr string
	}{
		{name: "default", want: 1},
		{name: "stream replicas", args: []string{"--stream-replicas", "3"}, want: 3},
		{name: "old name", args: []string{"--replicas=3"}, want: 3, warned: true},
		{name: "both agreeing", args: []string{"--replicas", "3", "--stream-replicas", "3"}, want: 3, warned: true},
		{name: "both disagreeing", args: []string{"--replicas", "3", "--stream-replicas", "1"}, wantErr: "give --stream-replicas only"},
		{name: "old name out of range", args: []string{"--replicas", "7"}, wantErr: "--stream-replicas 7: want 1 to 5"},
		{name: "zero", args: []string{"--stream-replicas", "0"}, wantErr: "--stream-replicas 0: want 1 to 5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o, err := parseFlags(tc.args, io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			warned := slices.ContainsFunc(o.warnings, func(w string) bool { return strings.Contains(w, "--replicas is deprecated") })
			if o.streamReplicas != tc.want || warned != tc.warned {
				t.Errorf("stream replicas %d, warnings %q; want %d, warned %v", o.streamReplicas, o.warnings, tc.want, tc.warned)
			}
		})
	}
}

// The warning reaches the log at start.
func TestReplicasFlagWarnsInTheLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	usersFile := filepath.Join(dir, "users.yaml")
	if err := os.WriteFile(usersFile, []byte(usersYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	var log lockedBuffer
	args := []string{"--replicas", "3", "--nats-users", usersFile, "--write-nats-config", filepath.Join(dir, "auth.conf")}
	if err := run(context.Background(), args, io.Discard, &log, noEnv); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if got := log.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, "--replicas is deprecated") || !strings.Contains(got, "--stream-replicas") {
		t.Errorf("log lacks the deprecation warning:\n%s", got)
	}
}
