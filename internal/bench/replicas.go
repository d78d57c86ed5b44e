package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/testkit"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/wire"
)

// Metrics of the replica case: every part a process of its own, over
// loopback TCP.
const (
	// MetricCPUPerCall is the CPU time (user and system) per measured
	// call, in milliseconds: of the whole process in the in-process cases
	// (the side, the embedded server and the harness); in the replica
	// case, of every process: the orchestrators, the nats-server(s) and
	// the load generator (the harness, whose tool-workers, HTTP client and
	// event subscription serve every replica count alike).
	MetricCPUPerCall = "cpu_ms_per_call"
	// MetricCPUPerCallOrchestrators, MetricCPUPerCallNATS and
	// MetricCPUPerCallLoad are its parts.
	MetricCPUPerCallOrchestrators = "cpu_ms_per_call_orchestrators"
	MetricCPUPerCallNATS          = "cpu_ms_per_call_nats"
	MetricCPUPerCallLoad          = "cpu_ms_per_call_load"
	// MetricCPUOverOneReplica is MetricCPUPerCall over the same case's
	// with one orchestrator, measured in the same run; the goal at three
	// replicas is at most 1.15.
	MetricCPUOverOneReplica = "cpu_per_call_over_1_replica"
	// MetricCallsPerSecond is the replica case's throughput: measured
	// calls over the time they took (no goal: on a 2-core machine more
	// processes cannot add throughput; CPU per call is the proxy).
	MetricCallsPerSecond = "calls_per_s"
)

// ReplicaCase is the load of the replica case on Replicas orchestrator
// processes sharing one nats-server process (or a cluster of three).
type ReplicaCase struct {
	Replicas int `json:"replicas"`
	// InFlight is how many conversations of one deferred call run at
	// once, each started again as soon as it completed.
	InFlight int `json:"in_flight"`
	Calls    int `json:"calls"`
	Warmup   int `json:"warmup"`
	// Cluster runs a three-node NATS cluster (streams with 3 replicas)
	// instead of one server.
	Cluster bool `json:"cluster,omitempty"`
}

// Name identifies the case in results.
func (c ReplicaCase) Name() string {
	nats := "nats=1"
	if c.Cluster {
		nats = "nats=3"
	}
	return fmt.Sprintf("replicas/%s/in_flight=%d/orchestrators=%d", nats, c.InFlight, c.Replicas)
}

// ReplicaMeasurement is what one replica case measured.
type ReplicaMeasurement struct {
	Calls   int
	Elapsed time.Duration
	// CPU of the orchestrators (summed), the NATS servers (summed) and
	// the load generator over the measured calls.
	Orchestrators, NATS, Load time.Duration
	// LoadAverage is the machine's when the case ended.
	LoadAverage string
}

func (m ReplicaMeasurement) perCall(d time.Duration) float64 {
	return float64(d.Microseconds()) / 1000 / float64(m.Calls)
}

// ReplicaTarget runs the replica cases: it builds cmd/orchestrator,
// natsd and the replica floor's floord into a folder of its own, and
// starts them as processes.
type ReplicaTarget struct {
	dir string
	log io.Writer
	// GOMAXPROCS, when positive, is set in the orchestrator processes'
	// environment, and the replica floor's (floord), so that the two
	// ratios compare like with like; 0 leaves them the harness's.
	GOMAXPROCS int
}

// procEnv is the environment of an orchestrator or floord process: nil
// (the harness's) unless GOMAXPROCS is set.
func (t *ReplicaTarget) procEnv() []string {
	if t.GOMAXPROCS <= 0 {
		return nil
	}
	return append(os.Environ(), "GOMAXPROCS="+strconv.Itoa(t.GOMAXPROCS))
}

// NewReplicaTarget builds the binaries into a temporary folder; Close
// removes it.
func NewReplicaTarget(ctx context.Context, log io.Writer) (*ReplicaTarget, error) {
	dir, err := os.MkdirTemp("", "toolgate-bench-replicas-")
	if err != nil {
		return nil, err
	}
	build := exec.CommandContext(ctx, "go", "build", "-o", dir+string(filepath.Separator),
		"github.com/toolgate/toolgate/cmd/orchestrator", "github.com/toolgate/toolgate/internal/bench/natsd",
		"github.com/toolgate/toolgate/internal/bench/floord")
	if out, err := build.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("build the orchestrator, natsd and floord: %w: %s", err, out)
	}
	if err := writeAgentFiles(dir); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if log == nil {
		log = io.Discard
	}
	return &ReplicaTarget{dir: dir, log: log}, nil
}

// Close removes the binaries.
func (t *ReplicaTarget) Close() { os.RemoveAll(t.dir) }

// writeAgentFiles writes the batch-1 agent of the round-trip cases
// (agentConfig) as files cmd/orchestrator reads.
func writeAgentFiles(dir string) error {
	script, cfg, err := agentJSON(1)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "script.json"), script, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "bench.json"), cfg, 0o644)
}

// RunReplicas measures every in-flight count of cases (one replica count,
// one NATS shape) on one set-up: the servers, the orchestrators and the
// load generator started once, the calls of each count after its warm-up.
func (t *ReplicaTarget) RunReplicas(ctx context.Context, replicas int, cluster bool, inFlight []int, calls, warmup int) ([]ReplicaMeasurement, error) {
	s, err := t.start(ctx, replicas, cluster)
	if err != nil {
		return nil, err
	}
	defer s.stop()
	var out []ReplicaMeasurement
	for _, w := range inFlight {
		if err := s.drive(ctx, w, warmup); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
		before, err := s.cpu()
		if err != nil {
			return nil, err
		}
		start := time.Now()
		if err := s.drive(ctx, w, calls); err != nil {
			return nil, err
		}
		elapsed := time.Since(start)
		after, err := s.cpu()
		if err != nil {
			return nil, err
		}
		out = append(out, ReplicaMeasurement{
			Calls: calls, Elapsed: elapsed,
			Orchestrators: after.orchestrators - before.orchestrators,
			NATS:          after.nats - before.nats, Load: after.load - before.load,
			LoadAverage: loadAverage(),
		})
	}
	return out, nil
}

// replicaSetUp is one set-up of the replica case.
type replicaSetUp struct {
	t       *ReplicaTarget
	servers []*exec.Cmd
	orchs   []*exec.Cmd
	https   []string
	sys     *testkit.System
	conn    *bus.Bus
	sub     *nats.Subscription
	client  *http.Client
	stores  string

	mu    sync.Mutex
	waits map[string]chan struct{}
	next  int
}

func (t *ReplicaTarget) start(ctx context.Context, replicas int, cluster bool) (s *replicaSetUp, err error) {
	s = &replicaSetUp{t: t, waits: map[string]chan struct{}{}, client: &http.Client{Timeout: 30 * time.Second}}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	var url string
	if s.servers, url, s.stores, err = t.startServers(cluster); err != nil {
		return s, err
	}
	streamReplicas := "1"
	if cluster {
		streamReplicas = "3"
	}
	for i := range replicas {
		addr, err := freeAddr()
		if err != nil {
			return s, err
		}
		cmd := exec.Command(filepath.Join(t.dir, "orchestrator"), "--nats", url, "--agent", filepath.Join(t.dir, "bench.json"),
			"--http", addr, "--max-runs", "64", "--log-level", "warn", "--replicas", streamReplicas,
			"--retention", benchRetention.String())
		cmd.Stdout, cmd.Stderr = t.log, t.log
		cmd.Env = t.procEnv()
		// Each waits for the servers (and the first's set-up of the
		// streams) on its own; started one after the other, so that they
		// do not race to create them.
		if err := cmd.Start(); err != nil {
			return s, fmt.Errorf("start orchestrator %d: %w", i, err)
		}
		s.orchs = append(s.orchs, cmd)
		s.https = append(s.https, "http://"+addr)
		if err := s.healthy(ctx, "http://"+addr); err != nil {
			return s, fmt.Errorf("orchestrator %d: %w", i, err)
		}
	}
	if s.sys, err = testkit.Start(ctx, testkit.Options{URL: url, NoSetup: true}); err != nil {
		return s, err
	}
	if s.conn, err = s.sys.Connect(ctx, bus.ConnConfig{Name: "bench-replicas"}); err != nil {
		return s, err
	}
	if s.sub, err = s.conn.Conn().Subscribe(wire.PrefixEvent+".*", s.onEvent); err != nil {
		return s, err
	}
	served, err := testkit.BuiltinTools(filepath.Join(s.stores, "sandbox"), sampleTool)
	if err != nil {
		return s, err
	}
	for i := range replicaWorkers {
		name := fmt.Sprintf("bench-worker-%d", i)
		if _, err := s.sys.Worker(ctx, name, worker.Config{ID: name, Concurrency: 1, DrainTimeout: 5 * time.Second, Tools: served}); err != nil {
			return s, err
		}
	}
	return s, nil
}

// startServers starts one natsd process, or three clustered, each on a
// store of its own under stores; url reaches them all.
func (t *ReplicaTarget) startServers(cluster bool) (servers []*exec.Cmd, url, stores string, err error) {
	defer func() {
		if err != nil {
			for _, cmd := range servers {
				terminate(cmd)
			}
			if stores != "" {
				os.RemoveAll(stores)
			}
			servers, stores = nil, ""
		}
	}()
	if stores, err = os.MkdirTemp("", "toolgate-bench-nats-"); err != nil {
		return nil, "", "", err
	}
	nodes := 1
	if cluster {
		nodes = 3
	}
	clients, routes := make([]string, nodes), make([]string, nodes)
	for i := range nodes {
		if clients[i], err = freeAddr(); err != nil {
			return servers, "", stores, err
		}
		if routes[i], err = freeAddr(); err != nil {
			return servers, "", stores, err
		}
	}
	var urls []string
	for i := range nodes {
		args := []string{"-listen", clients[i], "-store", filepath.Join(stores, strconv.Itoa(i)), "-name", fmt.Sprintf("n%d", i)}
		if cluster {
			var others []string
			for j, r := range routes {
				if j != i {
					others = append(others, "nats://"+r)
				}
			}
			args = append(args, "-cluster", routes[i], "-routes", strings.Join(others, ","))
		}
		cmd := exec.Command(filepath.Join(t.dir, "natsd"), args...)
		cmd.Stdout, cmd.Stderr = t.log, t.log
		if err := cmd.Start(); err != nil {
			return servers, "", stores, fmt.Errorf("start natsd: %w", err)
		}
		servers = append(servers, cmd)
		urls = append(urls, "nats://"+clients[i])
	}
	return servers, strings.Join(urls, ","), stores, nil
}

// replicaWorkers is the tool-workers of the replica case, in the load
// generator's process, each on its own connection with one call in hand.
const replicaWorkers = 4

// healthy waits until url answers /healthz.
func (s *replicaSetUp) healthy(ctx context.Context, url string) error {
	return awaitReady(ctx, "healthy", func() error {
		resp, err := s.client.Get(url + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/healthz: %s", resp.Status)
		}
		return nil
	})
}

// awaitReady tries try every 100 ms until it succeeds, for a minute at
// most: a process just started answers once it is set up.
func awaitReady(ctx context.Context, what string, try func() error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := try()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not %s after a minute: %w", what, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// onEvent wakes the driver of a conversation whose run completed.
func (s *replicaSetUp) onEvent(m *nats.Msg) {
	evs, err := bus.DecodeEvents(m.Data, m.Header)
	if err != nil {
		return
	}
	for _, e := range evs {
		if e.Type != "run_completed" {
			continue
		}
		s.mu.Lock()
		ch := s.waits[e.ConversationID]
		delete(s.waits, e.ConversationID)
		s.mu.Unlock()
		if ch != nil {
			close(ch)
		}
	}
}

// drive runs calls conversations, inFlight at once, each started by the
// replicas in turn over HTTP, and returns when every one has completed.
func (s *replicaSetUp) drive(ctx context.Context, inFlight, calls int) error {
	return driveConversations(ctx, inFlight, calls, s.converse)
}

// driveConversations runs calls conversations through converse, inFlight
// at once, and returns when every one has completed or the first failed.
func driveConversations(ctx context.Context, inFlight, calls int, converse func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, inFlight)
	var mu sync.Mutex
	left := calls
	for range inFlight {
		wg.Go(func() {
			for {
				mu.Lock()
				if left == 0 {
					mu.Unlock()
					return
				}
				left--
				mu.Unlock()
				if err := converse(ctx); err != nil {
					errs <- err
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// converse starts one conversation and waits for it to complete. It
// names the conversation itself, so that its wait is in place before the
// start, whose completion may come before the start's answer.
func (s *replicaSetUp) converse(ctx context.Context) error {
	s.mu.Lock()
	s.next++
	id := fmt.Sprintf("c%dr%d", time.Now().UnixNano(), s.next)
	url := s.https[s.next%len(s.https)]
	done := make(chan struct{})
	s.waits[id] = done
	s.mu.Unlock()
	body, _ := json.Marshal(map[string]string{"prompt": benchPrompt, "new_conversation_id": id})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/runs", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("start a run: %w", err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("start a run: %s: %s", resp.Status, msg)
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(conversationTimeout):
		return fmt.Errorf("conversation %s not completed after %s", id, conversationTimeout)
	}
}

// cpuTimes are the CPU times of the processes of a set-up.
type cpuTimes struct{ orchestrators, nats, load time.Duration }

func (s *replicaSetUp) cpu() (cpuTimes, error) { return setUpCPU(s.orchs, s.servers) }

// setUpCPU is the CPU time so far of a set-up's processes (toolgate's
// orchestrators or the floor's), its servers, and the load generator.
func setUpCPU(procs, servers []*exec.Cmd) (cpuTimes, error) {
	var c cpuTimes
	for _, cmd := range procs {
		d, err := processCPU(cmd.Process.Pid)
		if err != nil {
			return c, err
		}
		c.orchestrators += d
	}
	for _, cmd := range servers {
		d, err := processCPU(cmd.Process.Pid)
		if err != nil {
			return c, err
		}
		c.nats += d
	}
	c.load = cpuUsed()
	return c, nil
}

// clockTick is the unit of /proc/<pid>/stat's times (USER_HZ, 100 on
// Linux).
const clockTick = 10 * time.Millisecond

// processCPU is the user and system time of process pid so far.
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("cpu of process %d: %w", pid, err)
	}
	// The command name, in parentheses, may hold spaces: the fields
	// counted from after it.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("cpu of process %d: no command name in its stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// utime and stime are fields 14 and 15 of stat, 12 and 13 after the
	// name (state is the first).
	if len(f) < 13 {
		return 0, fmt.Errorf("cpu of process %d: short stat", pid)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("cpu of process %d: %w", pid, err)
	}
	return time.Duration(u+st) * clockTick, nil
}

// stop ends every process and connection of the set-up.
func (s *replicaSetUp) stop() {
	if s.sub != nil {
		_ = s.sub.Unsubscribe()
	}
	if s.sys != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = s.sys.Close(ctx)
		cancel()
	}
	if s.conn != nil {
		s.conn.Close()
	}
	for _, cmd := range s.orchs {
		terminate(cmd)
	}
	for _, cmd := range s.servers {
		terminate(cmd)
	}
	if s.stores != "" {
		os.RemoveAll(s.stores)
	}
}

// terminate asks cmd's process to stop, and kills it after 15 s.
func terminate(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// freeAddr is a loopback address with a port free now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// replicaCases measures the replica cases of cfg and, after each replica
// count's, the replica floor at as many processes, and adds their rows; a
// failure is recorded as toolgate's, or the floor's.
func (h *harnessRun) replicaCases(ctx context.Context) {
	cfg := h.cfg
	t, err := NewReplicaTarget(ctx, nil)
	if err != nil {
		h.toolgateErr("replicas", err)
		return
	}
	defer t.Close()
	sizes := StorageSizesOf(nil)
	if h.sizes != nil {
		sizes = *h.sizes
	}
	t.GOMAXPROCS = cfg.ReplicaGOMAXPROCS
	shapes := []bool{false}
	if cfg.ReplicaCluster {
		shapes = append(shapes, true)
	}
	for _, cluster := range shapes {
		// CPU per call with one replica (one floor process), by in-flight
		// count.
		one, oneFloor := map[int]float64{}, map[int]float64{}
		for _, n := range cfg.Replicas {
			ms, err := t.RunReplicas(ctx, n, cluster, cfg.ReplicaInFlight, cfg.ReplicaCalls, cfg.ReplicaCalls/10)
			if err != nil {
				h.toolgateErr(ReplicaCase{Replicas: n, Cluster: cluster}.Name(), err)
				if ctx.Err() != nil {
					return
				}
			}
			var fms []ReplicaMeasurement
			if !cfg.NoReplicaFloor {
				fms, err = t.RunReplicaFloor(ctx, ReplicaFloorRun{
					Processes: n, Partitions: cfg.ReplicaFloorPartitions, Cluster: cluster, InFlight: cfg.ReplicaInFlight,
					Calls: cfg.ReplicaCalls, Warmup: cfg.ReplicaCalls / 10, Sizes: sizes,
				})
				if err != nil {
					h.res.Errors["replica_floor "+ReplicaCase{Replicas: n, Cluster: cluster}.Name()] = err.Error()
					if ctx.Err() != nil {
						return
					}
				}
			}
			for i, w := range cfg.ReplicaInFlight {
				c := ReplicaCase{Replicas: n, InFlight: w, Calls: cfg.ReplicaCalls, Cluster: cluster}
				var tm, fm *ReplicaMeasurement
				if i < len(ms) {
					tm = &ms[i]
					if n == 1 {
						one[w] = tm.total()
					}
				}
				if i < len(fms) {
					fm = &fms[i]
					if n == 1 {
						oneFloor[w] = fm.total()
					}
				}
				if tm == nil && fm == nil {
					continue
				}
				h.res.Cases = append(h.res.Cases, replicaRows(c, tm, fm, one[w], oneFloor[w])...)
				if tm != nil {
					h.res.noteLoad(c.Name(), tm.LoadAverage)
				}
				fmt.Fprintf(cfg.Progress, "%-30s toolgate %s\n", c.Name(), tm.describe())
				fmt.Fprintf(cfg.Progress, "%-30s floor    %s\n", "", fm.describe())
			}
		}
	}
}

// total is the CPU per call of every process.
func (m ReplicaMeasurement) total() float64 { return m.perCall(m.Orchestrators + m.NATS + m.Load) }

// describe is m's progress line.
func (m *ReplicaMeasurement) describe() string {
	if m == nil {
		return "not measured"
	}
	return fmt.Sprintf("%.0f calls/s, CPU %.3f ms/call (orchestrators %.3f, nats %.3f, load %.3f) | load %s",
		float64(m.Calls)/m.Elapsed.Seconds(), m.total(), m.perCall(m.Orchestrators), m.perCall(m.NATS), m.perCall(m.Load), m.LoadAverage)
}

// replicaRows are the rows of one replica case: toolgate's figures (tm)
// and the replica floor's (fm, in the Storage column), either nil when
// not measured; oneReplica and oneFloor are the CPU per call of the same
// load on one orchestrator and one floor process (0: not measured).
func replicaRows(c ReplicaCase, tm, fm *ReplicaMeasurement, oneReplica, oneFloor float64) []Row {
	row := func(metric string, f func(ReplicaMeasurement) float64) Row {
		r := Row{Name: c.Name(), Metric: metric, Workers: replicaWorkers, Batch: 1}
		if tm != nil {
			r.Toolgate = num(f(*tm))
		}
		if fm != nil {
			r.Storage = num(f(*fm))
		}
		return r
	}
	rows := []Row{
		row(MetricCallsPerSecond, func(m ReplicaMeasurement) float64 { return float64(m.Calls) / m.Elapsed.Seconds() }),
		row(MetricCPUPerCall, ReplicaMeasurement.total),
		row(MetricCPUPerCallOrchestrators, func(m ReplicaMeasurement) float64 { return m.perCall(m.Orchestrators) }),
		row(MetricCPUPerCallNATS, func(m ReplicaMeasurement) float64 { return m.perCall(m.NATS) }),
		row(MetricCPUPerCallLoad, func(m ReplicaMeasurement) float64 { return m.perCall(m.Load) }),
	}
	if c.Replicas > 1 && ((tm != nil && oneReplica > 0) || (fm != nil && oneFloor > 0)) {
		r := Row{Name: c.Name(), Metric: MetricCPUOverOneReplica, Workers: replicaWorkers, Batch: 1}
		if tm != nil && oneReplica > 0 {
			r.Toolgate = num(tm.total() / oneReplica)
		}
		if fm != nil && oneFloor > 0 {
			r.Storage = num(fm.total() / oneFloor)
		}
		rows = append(rows, r)
	}
	return rows
}
