package bus

import (
	"fmt"
	"strings"
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
