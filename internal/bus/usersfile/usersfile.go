// Package usersfile reads toolgate's NATS users file: every user of the
// embedded server with the role whose permissions it gets. It lives apart
// from package bus so that clients of the bus (a worker, an approval bot)
// do not link a YAML parser they never use.
package usersfile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/goccy/go-yaml"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/wire"
)

// usersFile is the users file: every NATS user of the embedded server with
// the role whose permissions it gets.
//
//	users:
//	  - {name: orchestrator, password: "…", role: orchestrator}
//	  - {name: worker-1, password: "…", role: worker}
//	  - {name: bot, password: "…", role: approver}
//	  - {name: ops, password: "…", role: approver, consumers: [ops-bot, ops-inbox]}
type usersFile struct {
	Users []struct {
		Name      string   `json:"name"`
		Password  string   `json:"password"`
		Role      string   `json:"role"`
		Consumers []string `json:"consumers"`
	} `json:"users"`
}

// Load reads a users file (YAML or JSON) and gives each user the
// permissions of its role (bus.RolePermissions).
func Load(path string) ([]bus.User, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("users file: %w", err)
	}
	users, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("users file %s: %w", path, err)
	}
	return users, nil
}

// Parse parses a users file; see Load. Names must be unique and
// every user needs a password and a known role.
func Parse(data []byte) ([]bus.User, error) {
	raw, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("yaml: %s", yaml.FormatError(err, false, false))
	}
	var f usersFile
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if len(f.Users) == 0 {
		return nil, fmt.Errorf("no users")
	}
	var out []bus.User
	for i, u := range f.Users {
		if u.Name == "" {
			return nil, fmt.Errorf("user %d: name is required", i)
		}
		if slices.ContainsFunc(out, func(o bus.User) bool { return o.Name == u.Name }) {
			return nil, fmt.Errorf("user %s: listed twice", u.Name)
		}
		if u.Password == "" {
			return nil, fmt.Errorf("user %s: password is required", u.Name)
		}
		perms, err := bus.RolePermissions(u.Role)
		if err != nil {
			return nil, fmt.Errorf("user %s: %w (want %s, %s or %s)", u.Name, err, bus.RoleOrchestrator, bus.RoleWorker, bus.RoleApprover)
		}
		user := bus.User{Name: u.Name, Password: u.Password, Role: u.Role, Permissions: perms}
		if u.Consumers != nil && u.Role != bus.RoleApprover {
			return nil, fmt.Errorf("user %s: consumers are listed for approver users only", u.Name)
		}
		if u.Role == bus.RoleApprover {
			user.Consumers = u.Consumers
			if user.Consumers == nil {
				user.Consumers = bus.ApproverConsumers(u.Name)
			}
			for _, c := range user.Consumers {
				if err := wire.ValidateToken("consumer name", c); err != nil {
					return nil, fmt.Errorf("user %s: %w", u.Name, err)
				}
			}
		}
		out = append(out, user)
	}
	// Each approver user may not make or update the others' durables.
	owner := map[string]string{}
	for _, u := range out {
		for _, c := range u.Consumers {
			if o, ok := owner[c]; ok {
				return nil, fmt.Errorf("users %s and %s: consumer %s listed for both", o, u.Name, c)
			}
			owner[c] = u.Name
		}
	}
	for i, u := range out {
		if u.Role != bus.RoleApprover {
			continue
		}
		for _, o := range out {
			if o.Name != u.Name {
				out[i].Permissions.PublishDeny = append(out[i].Permissions.PublishDeny, bus.ApproverDeny(o.Consumers)...)
			}
		}
	}
	return out, nil
}
