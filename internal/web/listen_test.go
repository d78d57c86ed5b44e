package web_test

import (
	"testing"

	"github.com/toolgate/toolgate/internal/web"
)

func TestCheckListen(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr  string
		token bool
		ok    bool
	}{
		{"127.0.0.1:8080", false, true},
		{"[::1]:8080", false, true},
		{"localhost:8080", false, true},
		{"0.0.0.0:8080", false, false},
		{":8080", false, false},
		{"10.1.2.3:8080", false, false},
		{"0.0.0.0:8080", true, true},
	} {
		err := web.CheckListen(tc.addr, tc.token)
		if (err == nil) != tc.ok {
			t.Errorf("CheckListen(%q, %v) = %v", tc.addr, tc.token, err)
		}
	}
}
