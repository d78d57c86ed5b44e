package bus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/toolgate/toolgate/wire"
)

// User is a NATS user of toolgate's server.
type User struct {
	Name     string
	Password string
	// Role is the role Permissions came from (RolePermissions), if any.
	Role        string
	Permissions Permissions
	// Consumers are the durables of TOOLGATE_APPROVALS an approver user
	// owns (ApproverConsumers unless the users file lists them); the other
	// approver users may not make or update them.
	Consumers []string
}

// Permissions are subject allow lists; a nil list allows everything, an
// empty non-nil list allows nothing. PublishDeny takes subjects out of
// Publish.
type Permissions struct {
	Publish     []string
	Subscribe   []string
	PublishDeny []string
}

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

// LoadUsers reads a users file (YAML or JSON) and gives each user the
// permissions of its role (RolePermissions).
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

// ParseUsers parses a users file; see LoadUsers. Names must be unique and
// every user needs a password and a known role.
func ParseUsers(data []byte) ([]User, error) {
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
	var out []User
	for i, u := range f.Users {
		if u.Name == "" {
			return nil, fmt.Errorf("user %d: name is required", i)
		}
		if slices.ContainsFunc(out, func(o User) bool { return o.Name == u.Name }) {
			return nil, fmt.Errorf("user %s: listed twice", u.Name)
		}
		if u.Password == "" {
			return nil, fmt.Errorf("user %s: password is required", u.Name)
		}
		perms, err := RolePermissions(u.Role)
		if err != nil {
			return nil, fmt.Errorf("user %s: %w (want %s, %s or %s)", u.Name, err, RoleOrchestrator, RoleWorker, RoleApprover)
		}
		user := User{Name: u.Name, Password: u.Password, Role: u.Role, Permissions: perms}
		if u.Consumers != nil && u.Role != RoleApprover {
			return nil, fmt.Errorf("user %s: consumers are listed for approver users only", u.Name)
		}
		if u.Role == RoleApprover {
			user.Consumers = u.Consumers
			if user.Consumers == nil {
				user.Consumers = ApproverConsumers(u.Name)
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
		if u.Role != RoleApprover {
			continue
		}
		for _, o := range out {
			if o.Name != u.Name {
				out[i].Permissions.PublishDeny = append(out[i].Permissions.PublishDeny, ApproverDeny(o.Consumers)...)
			}
		}
	}
	return out, nil
}

// ServerConfigBlock writes the users as a nats-server configuration
// "authorization" block, for the servers of a cluster: the same users and
// subject permissions as the embedded server gives them.
func ServerConfigBlock(users []User) string {
	var b strings.Builder
	b.WriteString("authorization {\n  users = [\n")
	list := func(name string, subjects []string) {
		if subjects == nil {
			return
		}
		q := make([]string, len(subjects))
		for i, s := range subjects {
			q[i] = fmt.Sprintf("%q", s)
		}
		fmt.Fprintf(&b, "        %s = [%s]\n", name, strings.Join(q, ", "))
	}
	for _, u := range users {
		fmt.Fprintf(&b, "    { # role %s\n      user = %q\n      password = %q\n", u.Role, u.Name, u.Password)
		if u.Permissions.Publish != nil || u.Permissions.Subscribe != nil {
			b.WriteString("      permissions = {\n")
			if u.Permissions.Publish != nil {
				b.WriteString("        publish = {\n")
				list("  allow", u.Permissions.Publish)
				if len(u.Permissions.PublishDeny) > 0 {
					list("  deny", u.Permissions.PublishDeny)
				}
				b.WriteString("        }\n")
			}
			if u.Permissions.Subscribe != nil {
				b.WriteString("        subscribe = {\n")
				list("  allow", u.Permissions.Subscribe)
				b.WriteString("        }\n")
			}
			b.WriteString("      }\n")
		}
		b.WriteString("    }\n")
	}
	b.WriteString("  ]\n}\n")
	return b.String()
}
