package wire

import "testing"

// The ASCII fast path accepts only what the rune by rune check accepts, and
// every ASCII byte the check accepts: each byte alone and between others.
func TestPlainTokenAgreesWithRuneCheck(t *testing.T) {
	t.Parallel()
	for c := range 256 {
		for _, s := range []string{string([]byte{byte(c)}), "run_" + string([]byte{byte(c)}) + "-1"} {
			if plainToken(s) && checkTokenRunes("id", s) != nil {
				t.Errorf("%q: taken by the fast path, refused by the check", s)
			}
			if c < 0x80 && !plainToken(s) && checkTokenRunes("id", s) == nil {
				t.Errorf("%q: ASCII the check takes, left to it", s)
			}
		}
	}
}

func FuzzValidateToken(f *testing.F) {
	for _, s := range []string{"run_1", "c82d0570407b8fb5bfc891bcb", "a.b", "é", "a b", "\x7f", "a\\b", "~!@#$%^&()"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if plainToken(s) && checkTokenRunes("id", s) != nil {
			t.Errorf("%q: taken by the fast path, refused by the check", s)
		}
	})
}
