package bus_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/embedded"
)

func TestClusterConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cl   embedded.ClusterConfig
		want string
	}{
		{"no name", embedded.ClusterConfig{Listen: "127.0.0.1:-1"}, "cluster name is empty"},
		{"dotted name", embedded.ClusterConfig{Name: "a.b", Listen: "127.0.0.1:-1"}, "contains a dot"},
		{"bad listen", embedded.ClusterConfig{Name: "c", Listen: "nope"}, "cluster: listen address"},
		{"bad route", embedded.ClusterConfig{Name: "c", Listen: "127.0.0.1:-1", Routes: []string{"::"}}, "want nats-route://host:port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cl := tt.cl
			_, err := embedded.StartServer(embedded.ServerConfig{StoreDir: t.TempDir(), Listen: "127.0.0.1:-1", Cluster: &cl})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// Three embedded nodes with authenticated routes form one JetStream
// cluster: Setup makes R3 streams, and a message stored before a node goes
// down is still there, and new ones are accepted, with two nodes left.
func TestClusterR3SurvivesANode(t *testing.T) {
	t.Parallel()
	var ports []int
	var lns []net.Listener
	for range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	var routes []string
	for _, ln := range lns {
		ln.Close()
	}
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	var nodes []*embedded.Server
	for i, p := range ports {
		nodes = append(nodes, startServerCfg(t, embedded.ServerConfig{
			StoreDir:   t.TempDir(),
			Listen:     "127.0.0.1:-1",
			ServerName: fmt.Sprintf("n%d", i), Logger: testLogger(t),
			Cluster: &embedded.ClusterConfig{
				Name: "tg", Listen: fmt.Sprintf("127.0.0.1:%d", p), Routes: routes,
				User: "route", Password: "route-pw",
			},
		}))
	}
	if got, want := nodes[0].ClusterURL(), routes[0]; got != want {
		t.Errorf("ClusterURL = %q, want %q", got, want)
	}
	var urls []string
	for _, n := range nodes {
		urls = append(urls, n.ClientURL())
	}
	b, err := bus.Connect(ctxT(t), bus.ConnConfig{URL: strings.Join(urls, ","), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	// Setup itself waits (bounded by its ctx) for the meta leader and the
	// peers a cluster that has just started does not have yet.
	deadline := time.Now().Add(wait)
	sctx, cancel := context.WithDeadline(t.Context(), deadline)
	defer cancel()
	if err := b.Setup(sctx, bus.SetupConfig{Replicas: 3}); err != nil {
		t.Fatalf("setup R3: %v", err)
	}
	st, err := b.JetStream().Stream(ctxT(t), bus.StreamCalls)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("calls stream: replicas %d, cluster %+v", info.Config.Replicas, info.Cluster)
	}
	if _, err := b.PublishCall(ctxT(t), bustest.SampleCall("run1", "c1")); err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes {
		if n.NATSServer().JetStreamIsStreamLeader("$G", bus.StreamCalls) {
			nodes[i].Shutdown()
			break
		}
	}
	deadline = time.Now().Add(wait)
	for {
		_, err = b.PublishCall(ctxT(t), bustest.SampleCall("run1", "c2"))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("publish after the leader went down: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := streamMsgs(t, b, bus.StreamCalls); n != 2 {
		t.Errorf("calls stream holds %d messages, want 2", n)
	}
}
