package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/embedded"
	"github.com/toolgate/toolgate/wire"
)

// An approver's user gives and revokes grants under bus.<id>, but may not
// write under api.<id>, which holds the grants the orchestrator's API
// authenticated.
func TestApproverGrantsOnlyUnderBus(t *testing.T) {
	t.Parallel()
	srv := bustest.StartServer(t, embedded.ServerConfig{NoListen: true, Users: roleUsers(t)})
	orch := bustest.ConnectConfig(t, srv, bus.ConnConfig{Name: "orch", User: bus.RoleOrchestrator, Password: bus.RoleOrchestrator + "-pw", Role: bus.RoleOrchestrator})
	bustest.Setup(t, orch)
	approver := bustest.ConnectConfig(t, srv, bus.ConnConfig{Name: "bot", User: bus.RoleApprover, Password: bus.RoleApprover + "-pw", Role: bus.RoleApprover})
	ctx := bustest.Context(t)
	g := wire.Grant{ID: "g1", Tool: "delete_file", GrantedBy: "bot", GrantedAt: time.Now()}
	if err := approver.PutGrant(ctx, wire.GrantKeyBus, g); err != nil {
		t.Fatalf("under bus: %v", err)
	}
	g.ID = "g2"
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := approver.PutGrant(short, wire.GrantKeyAPI, g); err == nil {
		t.Error("an approver wrote under api")
	}
	kv, err := orch.Grants(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.Keys(ctx)
	if err != nil || len(keys) != 1 || keys[0] != "bus.g1" {
		t.Errorf("keys %v, %v; want only bus.g1", keys, err)
	}
	if err := approver.DeleteGrant(ctx, "g1", wire.GrantKeyBus); err != nil {
		t.Fatalf("revoke under bus: %v", err)
	}
	if keys, err := kv.Keys(ctx); err != nil || len(keys) != 0 {
		t.Errorf("keys after the revoke %v, %v", keys, err)
	}
}
