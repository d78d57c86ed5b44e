package worker_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/worker"
)

func TestAddMCPHeader(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("Bearer s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, spec, key, want, err string
	}{
		{name: "plain", spec: "X-Team: tools", key: "X-Team", want: "tools"},
		{name: "from file", spec: "Authorization:@" + token, key: "Authorization", want: "Bearer s3cret"},
		{name: "no colon", spec: "Authorization", err: "want Key:Value"},
		{name: "no value", spec: "Authorization: ", err: "want Key:Value"},
		{name: "space in name", spec: "X Team: a", err: "white space"},
		{name: "missing file", spec: "Authorization:@" + filepath.Join(dir, "nope"), err: "no such file"},
		{name: "empty file", spec: "Authorization:@" + empty, err: "is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			err := worker.AddMCPHeader(h, tt.spec)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("AddMCPHeader(%q) = %v, want an error containing %q", tt.spec, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := h.Get(tt.key); got != tt.want {
				t.Fatalf("header %s = %q, want %q", tt.key, got, tt.want)
			}
		})
	}
}
