package bus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/goccy/go-yaml"
)

// User is a NATS user of toolgate's server.
type User struct {
	Name     string
	Password string
	// Role is the role Permissions came from (RolePermissions), if any.
	Role        string
	Permissions Permissions
}

// Permissions are subject allow lists; a nil list allows everything, an
// empty non-nil list allows nothing.
type Permissions struct {
	Publish   []string
	Subscribe []string
}

// usersFile is the users file: every NATS user of the embedded server with
// the role whose permissions it gets.
//
//	users:
//	  - {name: orchestrator, password: "…", role: orchestrator}
//	  - {name: worker-1, password: "…", role: worker}
//	  - {name: bot, password: "…", role: approver}
type usersFile struct {
	Users []struct {
		Name     string `json:"name"`
		Password string `json:"password"`
		Role     string `json:"role"`
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
		out = append(out, User{Name: u.Name, Password: u.Password, Role: u.Role, Permissions: perms})
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
