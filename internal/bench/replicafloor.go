package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
)

// The replica floor is the storage floor's orchestrator half (what
// NewStorageTarget stores and sends for a batch-1 call) in Processes
// processes of its own (floord) on the replica case's nats-server, over
// loopback TCP, under the replica case's load: the load generator keeps
// InFlight conversations going, each started at the processes in turn,
// and replicaWorkers raw workers in its process answer the calls. Its CPU
// per call at N processes over one process is what splitting the same
// JetStream traffic over N clients costs with none of toolgate's code:
// the floor under the replica case's ratio.
//
// Replies are split as toolgate's reply partitions split them (bus
// partition.go): the replies stream stores each reply, published on
// bench.reply.<run>.call as ever, under bench.replyp.<p>.<run>.call, p
// being nats-server's partition(Partitions, 1) of the run id; each
// partition is a durable, consumed by the one process that owns it (p mod
// Processes), and a process draws its run ids until their partition is
// one it owns, as toolgate's replicas do. So no process sees another's
// reply, the workers publish what they would anyway, and the server does
// the transform toolgate's does. Partitions defaults to one per process,
// the fewest durables a split needs; toolgate keeps 6 at every count.
//
// A start is a core NATS request on benchfloor.start.<process> carrying
// the conversation id, answered once the first record is stored and the
// call's publish acked; the conversation completes when its event message
// (which names it in its Toolgate-Conversation header) reaches the load
// generator's subscription to the events subjects, as the replica case
// waits for its run_completed event. Against toolgate's HTTP start, the
// request and its answer are two core messages a call that nats-server
// routes (an HTTP start goes from the load generator to the orchestrator
// without it): the floor's server carries them at every process count
// alike.
const (
	replicaFloorGen         = "rf"
	replicaFloorStart       = "benchfloor.start."
	replicaFloorReplyPrefix = "bench.replyp."
	replicaFloorDurable     = "orchestrator_p"
	// hdrFloorError is a start's answer's error, if any.
	hdrFloorError = "Bench-Error"
)

// replicaFloorStreams are the storage floor's streams for the replica
// floor: its replies stored in partitions of their run id, every stream
// with replicas copies.
func replicaFloorStreams(partitions, replicas int) ([]jetstream.StreamConfig, error) {
	calls, replies, err := rawStreams(replicaFloorGen)
	if err != nil {
		return nil, err
	}
	replies.SubjectTransform = &jetstream.SubjectTransformConfig{
		Source:      rawReplyPrefix + "*.*",
		Destination: fmt.Sprintf("%s{{partition(%d,1)}}.{{wildcard(1)}}.{{wildcard(2)}}", replicaFloorReplyPrefix, partitions),
	}
	log, events, err := storageStreams(replicaFloorGen)
	if err != nil {
		return nil, err
	}
	configs := []jetstream.StreamConfig{calls, replies, log, events}
	for i := range configs {
		configs[i].Replicas = replicas
	}
	return configs, nil
}

func replicaFloorRepliesStream() string { return rawRepliesStream + "_" + replicaFloorGen }
func replicaFloorCallsStream() string   { return rawCallsStream + "_" + replicaFloorGen }

// ReplicaFloorProcess configures one process of the replica floor.
type ReplicaFloorProcess struct {
	// URL is the nats-server's (comma-separated for a cluster).
	URL string
	// Index is this half's among Processes: it answers the starts on
	// benchfloor.start.<Index> and owns the partitions p with p mod
	// Processes = Index among Partitions.
	Index, Processes, Partitions int
	// Sizes are the bytes stored per record and event message.
	Sizes StorageSizes
}

func (p ReplicaFloorProcess) validate() error {
	if p.URL == "" {
		return errors.New("no NATS URL")
	}
	if p.Processes < 1 || p.Index < 0 || p.Index >= p.Processes {
		return fmt.Errorf("process %d of %d", p.Index, p.Processes)
	}
	if p.Partitions < p.Processes {
		return fmt.Errorf("%d partitions for %d processes: each process needs one", p.Partitions, p.Processes)
	}
	return nil
}

// ServeReplicaFloor runs one orchestrator half of the replica floor, on a
// connection of its own, until ctx ends.
// The streams and durables are the load generator's to create.
func ServeReplicaFloor(ctx context.Context, p ReplicaFloorProcess) error {
	if err := p.validate(); err != nil {
		return fmt.Errorf("replica floor: %w", err)
	}
	nc, err := nats.Connect(p.URL, nats.Name(fmt.Sprintf("bench-floor-%d", p.Index)))
	if err != nil {
		return fmt.Errorf("replica floor: connect: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("replica floor: %w", err)
	}
	var (
		bg          failure
		redelivered atomic.Int64
	)
	st := newStorageRun(js, replicaFloorGen, p.Sizes, &bg)
	defer st.pending.Wait()
	owned := map[int]bool{}
	for part := p.Index; part < p.Partitions; part += p.Processes {
		owned[part] = true
		cons, err := js.Consumer(ctx, replicaFloorRepliesStream(), replicaFloorDurable+strconv.Itoa(part))
		if err != nil {
			return fmt.Errorf("replica floor: reply partition %d: %w", part, err)
		}
		cc, err := cons.Consume(rawReplyHandler(ctx, nil, st, &bg, &redelivered), rawPullExpiry,
			jetstream.ConsumeErrHandler(consumeErrHandler(&bg)))
		if err != nil {
			return fmt.Errorf("replica floor: consume reply partition %d: %w", part, err)
		}
		defer stopConsume(cc)
	}
	prefix := fmt.Sprintf("%sp%d_", replicaFloorGen, p.Index)
	var next atomic.Int64
	draw := func() string {
		for {
			if run := runID(prefix, next.Add(1)); owned[bus.ReplyPartition(run, p.Partitions)] {
				return run
			}
		}
	}
	var starts sync.WaitGroup
	defer starts.Wait()
	sub, err := nc.Subscribe(replicaFloorStart+strconv.Itoa(p.Index), func(m *nats.Msg) {
		// Each start on a goroutine of its own, as toolgate's HTTP
		// server serves each request.
		starts.Go(func() {
			out := nats.NewMsg(m.Reply)
			if len(m.Data) > 0 {
				if err := errors.Join(bg.get(), floorStart(ctx, js, st, draw(), string(m.Data))); err != nil {
					out.Header.Set(hdrFloorError, err.Error())
				}
			}
			_ = m.RespondMsg(out)
		})
	})
	if err != nil {
		return fmt.Errorf("replica floor: subscribe: %w", err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		return fmt.Errorf("replica floor: flush: %w", err)
	}
	<-ctx.Done()
	return bg.get()
}

// floorStart stores conversation conv's first record, under run, then
// publishes its call and waits for the publish's ack.
func floorStart(ctx context.Context, js jetstream.JetStream, st *storageRun, run, conv string) error {
	if err := st.begin(ctx, run, conv); err != nil {
		return err
	}
	return sendRawBatch(ctx, js, newBatch(run, conv, 1))
}

// ReplicaFloorRun is one set-up of the replica floor.
type ReplicaFloorRun struct {
	// Processes is the floor's processes (the orchestrators' place).
	Processes int
	// Partitions of the replies. Defaults to Processes.
	Partitions int
	// Cluster runs it on a three-node NATS cluster (streams with 3
	// replicas) instead of one server.
	Cluster bool
	// OneProcess runs the Processes halves in one process, each on a
	// connection of its own: the control that tells what the processes
	// cost from what their connections cost the server.
	OneProcess bool
	// InFlight are the in-flight counts measured one after the other;
	// Calls and Warmup the conversations of each.
	InFlight      []int
	Calls, Warmup int
	// Sizes are the bytes stored per record and event message (see
	// StorageSizesOf).
	Sizes StorageSizes
}

// RunReplicaFloor measures the replica floor at every in-flight count of
// r on one set-up, as RunReplicas measures toolgate's: Orchestrators in
// each measurement is the floor's processes' CPU.
func (t *ReplicaTarget) RunReplicaFloor(ctx context.Context, r ReplicaFloorRun) ([]ReplicaMeasurement, error) {
	if r.Partitions == 0 {
		r.Partitions = r.Processes
	}
	if r.Processes < 1 || r.Partitions < r.Processes {
		return nil, fmt.Errorf("replica floor: %d partitions for %d processes: each process needs one", r.Partitions, r.Processes)
	}
	s, err := t.startFloor(ctx, r)
	if err != nil {
		return nil, fmt.Errorf("replica floor: %w", err)
	}
	defer s.stop()
	var out []ReplicaMeasurement
	for _, w := range r.InFlight {
		if err := driveConversations(ctx, w, r.Warmup, s.converse); err != nil {
			return nil, fmt.Errorf("replica floor: warm-up: %w", err)
		}
		before, err := s.cpu()
		if err != nil {
			return nil, err
		}
		done0 := s.completed.Load()
		start := time.Now()
		if err := driveConversations(ctx, w, r.Calls, s.converse); err != nil {
			return nil, fmt.Errorf("replica floor: %w", err)
		}
		elapsed := time.Since(start)
		after, err := s.cpu()
		if err != nil {
			return nil, err
		}
		out = append(out, ReplicaMeasurement{
			Calls: int(s.completed.Load() - done0), Elapsed: elapsed,
			Orchestrators: after.orchestrators - before.orchestrators,
			NATS:          after.nats - before.nats, Load: after.load - before.load,
			LoadAverage: loadAverage(),
		})
	}
	if err := s.checkSplit(ctx, r.Partitions); err != nil {
		return nil, fmt.Errorf("replica floor: %w", err)
	}
	return out, nil
}

// checkSplit fails unless every reply partition delivered replies and had
// each acked: a process that consumed none, or left some, would make the
// figures those of another split. A reply is acked after its event is
// published, so the last acks may still be on their way.
func (s *floorSetUp) checkSplit(ctx context.Context, partitions int) error {
	js, err := jetstream.New(s.nc)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for p := range partitions {
		for {
			cons, err := js.Consumer(ctx, replicaFloorRepliesStream(), replicaFloorDurable+strconv.Itoa(p))
			if err != nil {
				return fmt.Errorf("reply partition %d: %w", p, err)
			}
			info := cons.CachedInfo()
			if info.Delivered.Consumer > 0 && info.NumAckPending == 0 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("reply partition %d: %d replies delivered, %d not acked", p, info.Delivered.Consumer, info.NumAckPending)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// floorSetUp is one set-up of the replica floor.
type floorSetUp struct {
	servers []*exec.Cmd
	procs   []*exec.Cmd
	stores  string
	// nc is the load generator's: the starts and the events.
	nc          *nats.Conn
	sub         *nats.Subscription
	workers     []*nats.Conn
	stops       []func()
	bg          failure
	redelivered atomic.Int64
	completed   atomic.Int64

	// halves is the floor's orchestrator halves, each answering its own
	// starts, in len(procs) processes.
	halves int

	mu    sync.Mutex
	waits map[string]chan struct{}
	next  int
}

func (t *ReplicaTarget) startFloor(ctx context.Context, r ReplicaFloorRun) (s *floorSetUp, err error) {
	s = &floorSetUp{waits: map[string]chan struct{}{}}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	var url string
	if s.servers, url, s.stores, err = t.startServers(r.Cluster); err != nil {
		return s, err
	}
	if s.nc, err = connectWhenUp(ctx, url, "bench-floor-load"); err != nil {
		return s, err
	}
	js, err := jetstream.New(s.nc)
	if err != nil {
		return s, err
	}
	replicas := 1
	if r.Cluster {
		replicas = 3
	}
	configs, err := replicaFloorStreams(r.Partitions, replicas)
	if err != nil {
		return s, err
	}
	for _, sc := range configs {
		if err := createStreamWhenUp(ctx, js, sc); err != nil {
			return s, err
		}
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, replicaFloorCallsStream(), rawCallConsumerConfig(replicaWorkers)); err != nil {
		return s, fmt.Errorf("create call consumer: %w", err)
	}
	window := 0
	for _, w := range r.InFlight {
		window = max(window, w)
	}
	for p := range r.Partitions {
		cfg := rawReplyConsumerConfig(replicaFloorDurable+strconv.Itoa(p), replicaFloorReplyPrefix+strconv.Itoa(p)+".>", window)
		if _, err := js.CreateOrUpdateConsumer(ctx, replicaFloorRepliesStream(), cfg); err != nil {
			return s, fmt.Errorf("create reply partition %d: %w", p, err)
		}
	}
	if s.sub, err = s.nc.Subscribe(storageEventPrefix+replicaFloorGen+".>", s.onEvent); err != nil {
		return s, err
	}
	if err := s.nc.Flush(); err != nil {
		return s, err
	}
	for i := range replicaWorkers {
		name := fmt.Sprintf("bench-worker-%d", i)
		wc, err := nats.Connect(url, nats.Name(name))
		if err != nil {
			return s, fmt.Errorf("worker %s: %w", name, err)
		}
		s.workers = append(s.workers, wc)
		wjs, err := jetstream.New(wc)
		if err != nil {
			return s, err
		}
		stop, err := consumeCalls(ctx, wjs, replicaFloorCallsStream(), name, false, &s.bg, &s.redelivered)
		if err != nil {
			return s, err
		}
		s.stops = append(s.stops, stop)
	}
	var groups [][]string // the indexes of each process
	for i := range r.Processes {
		if r.OneProcess && i > 0 {
			groups[0] = append(groups[0], strconv.Itoa(i))
			continue
		}
		groups = append(groups, []string{strconv.Itoa(i)})
	}
	for _, g := range groups {
		cmd := exec.Command(filepath.Join(t.dir, "floord"), "-nats", url, "-index", strings.Join(g, ","),
			"-processes", strconv.Itoa(r.Processes), "-partitions", strconv.Itoa(r.Partitions),
			"-record", strconv.Itoa(r.Sizes.Record), "-event", strconv.Itoa(r.Sizes.Event))
		cmd.Stdout, cmd.Stderr, cmd.Env = t.log, t.log, t.procEnv()
		if err := cmd.Start(); err != nil {
			return s, fmt.Errorf("start floord %s: %w", g, err)
		}
		s.procs = append(s.procs, cmd)
	}
	for i := range r.Processes {
		if err := s.ready(ctx, i); err != nil {
			return s, fmt.Errorf("floord %d: %w", i, err)
		}
	}
	s.halves = r.Processes
	return s, nil
}

// connectWhenUp connects to url once a server there accepts connections.
func connectWhenUp(ctx context.Context, url, name string) (*nats.Conn, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		nc, err := nats.Connect(url, nats.Name(name))
		if err == nil {
			return nc, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("connect to %s: %w", url, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// createStreamWhenUp creates sc, waiting for JetStream to be ready (a
// cluster elects its meta leader after its servers accept connections).
func createStreamWhenUp(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig) error {
	deadline := time.Now().Add(time.Minute)
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := js.CreateStream(cctx, sc)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("create stream %s: %w", sc.Name, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ready waits until process i answers an empty start.
func (s *floorSetUp) ready(ctx context.Context, i int) error {
	return awaitReady(ctx, "answering", func() error {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := s.nc.RequestWithContext(rctx, replicaFloorStart+strconv.Itoa(i), nil)
		return err
	})
}

// onEvent wakes the driver of the conversation an event message names.
func (s *floorSetUp) onEvent(m *nats.Msg) {
	conv := m.Header.Get(hdrConversation)
	s.mu.Lock()
	ch := s.waits[conv]
	delete(s.waits, conv)
	s.mu.Unlock()
	if ch != nil {
		s.completed.Add(1)
		close(ch)
	}
}

// converse starts one conversation at the next process and waits for it
// to complete; its wait is in place before the start, whose completion
// may come before the start's answer.
func (s *floorSetUp) converse(ctx context.Context) error {
	s.mu.Lock()
	s.next++
	k := s.next % s.halves
	// As long as a run id, for which the event's size is reckoned.
	conv := fmt.Sprintf("conv_%026d", s.next)
	done := make(chan struct{})
	s.waits[conv] = done
	s.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	resp, err := s.nc.RequestWithContext(rctx, replicaFloorStart+strconv.Itoa(k), []byte(conv))
	cancel()
	if err != nil {
		return fmt.Errorf("start %s at process %d: %w", conv, k, err)
	}
	if e := resp.Header.Get(hdrFloorError); e != "" {
		return fmt.Errorf("start %s at process %d: %s", conv, k, e)
	}
	select {
	case <-done:
		return nil
	case <-s.bg.failed():
		return s.bg.get()
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(conversationTimeout):
		return fmt.Errorf("conversation %s not completed after %s", conv, conversationTimeout)
	}
}

// cpu is the CPU time of the floor's processes, the servers and the load
// generator so far.
func (s *floorSetUp) cpu() (cpuTimes, error) { return setUpCPU(s.procs, s.servers) }

// stop ends every process and connection of the set-up: the workers and
// the floor's processes before the servers.
func (s *floorSetUp) stop() {
	if s.sub != nil {
		_ = s.sub.Unsubscribe()
	}
	for _, stop := range s.stops {
		stop()
	}
	for _, wc := range s.workers {
		wc.Close()
	}
	for _, cmd := range s.procs {
		terminate(cmd)
	}
	if s.nc != nil {
		s.nc.Close()
	}
	for _, cmd := range s.servers {
		terminate(cmd)
	}
	if s.stores != "" {
		os.RemoveAll(s.stores)
	}
}
