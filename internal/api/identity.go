package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/goccy/go-yaml"

	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/web"
)

// User is a caller of the API named by its bearer token: the token's
// SHA-256 is kept, never the token. A decision given over the API records
// the name of the user who gave it.
type User struct {
	Name string `json:"name"`
	// TokenSHA256 is the hex SHA-256 of the user's bearer token
	// (`printf %s "$TOKEN" | sha256sum`).
	TokenSHA256 string `json:"token_sha256"`
	hash        []byte
}

// Caller names who sends a request, as authenticated: a user of
// Config.Users, CallerToken for the holder of Config.Token, CallerLocal for
// a tokenless API on loopback.
type Caller struct {
	Name string
	// User says Name is a user of Config.Users.
	User bool
}

// Callers that are not users of Config.Users.
const (
	CallerToken = "api"
	CallerLocal = "local"
)

type callerKey struct{}

// CallerOf is the caller the API authenticated for the request of ctx;
// an adapter mounted on the API's handler reads it the same way.
func CallerOf(ctx context.Context) Caller {
	c, _ := ctx.Value(callerKey{}).(Caller)
	return c
}

// LoadUsers reads a users file (YAML or JSON):
//
//	users:
//	  - {name: ann, token_sha256: 2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae}
//
// Names are unique tokens as approver ids are (letters, digits, _ and -);
// hashes are 64 hex digits, each used once.
func LoadUsers(path string) ([]User, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("users file: %w", err)
	}
	users, err := ParseUsers(data)
	if err != nil {
		return nil, fmt.Errorf("users file %s: %w", path, err)
	}
	return users, nil
}

// ParseUsers parses a users file; see LoadUsers.
func ParseUsers(data []byte) ([]User, error) {
	raw, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("yaml: %s", yaml.FormatError(err, false, false))
	}
	var f struct {
		Users []User `json:"users"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if len(f.Users) == 0 {
		return nil, fmt.Errorf("no users")
	}
	names, hashes := map[string]bool{}, map[string]bool{}
	for i := range f.Users {
		u := &f.Users[i]
		if !orchestrator.ValidID(u.Name) {
			return nil, fmt.Errorf("users[%d].name: %q is not a name (letters, digits, _ and -, at most 128)", i, u.Name)
		}
		if u.Name == CallerLocal || u.Name == CallerToken {
			return nil, fmt.Errorf("users[%d].name: %q is reserved", i, u.Name)
		}
		if names[u.Name] {
			return nil, fmt.Errorf("users[%d].name: %q is given twice", i, u.Name)
		}
		u.TokenSHA256 = strings.ToLower(u.TokenSHA256)
		if u.hash, err = hex.DecodeString(u.TokenSHA256); err != nil || len(u.hash) != sha256.Size {
			return nil, fmt.Errorf("users[%d].token_sha256: want the 64 hex digits of a SHA-256", i)
		}
		if hashes[u.TokenSHA256] {
			return nil, fmt.Errorf("users[%d].token_sha256: the token of another user", i)
		}
		names[u.Name], hashes[u.TokenSHA256] = true, true
	}
	return f.Users, nil
}

// authenticate admits a request whose bearer token is Config.Token or a
// user's, and tells the handlers who sent it (CallerOf); with neither
// configured (an API on loopback) every request is the local caller's.
// /healthz needs no token.
func (h *api) authenticate(next http.Handler) http.Handler {
	if h.token == "" && len(h.users) == 0 {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, Caller{Name: CallerLocal})))
		})
	}
	want := []byte("Bearer " + h.token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			next.ServeHTTP(w, r)
			return
		}
		got := r.Header.Get("Authorization")
		caller, ok := Caller{}, false
		if h.token != "" && subtle.ConstantTimeCompare([]byte(got), want) == 1 {
			caller, ok = Caller{Name: CallerToken}, true
		}
		if tok, found := strings.CutPrefix(got, "Bearer "); found && !ok {
			sum := sha256.Sum256([]byte(tok))
			// Every user is compared, so the time taken does not tell
			// which one matched.
			for _, u := range h.users {
				if subtle.ConstantTimeCompare(sum[:], u.hash) == 1 {
					caller, ok = Caller{Name: u.Name, User: true}, true
				}
			}
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="toolgate"`)
			web.WriteError(w, http.StatusUnauthorized, "missing or wrong bearer token")
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, caller)))
	})
}
