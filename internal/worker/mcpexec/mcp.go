// Package mcpexec is tool-worker's MCP executor: it serves the tools of an
// MCP server, over stdio or streamable HTTP, and follows its tool list.
package mcpexec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/toolgate/toolgate/internal/worker/executor"
	"io"
	"log/slog"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/worker/callctx"
	"github.com/toolgate/toolgate/wire"
	"github.com/toolgate/toolgate/worker"
)

// Config configures one MCP server whose tools a worker serves.
type Config struct {
	// Name names the server (the NAME of --mcp NAME=…): it appears in
	// adverts, logs and messages the model sees. Required.
	Name string
	// Command runs a stdio server: the program and its arguments. A server
	// that exits is started again for the next call. Exactly one of Command
	// and URL is set.
	Command []string
	// Dir is the stdio server's working directory; Env is added to the
	// worker's environment, from which the worker's own TOOLGATE_* variables
	// are removed.
	Dir string
	Env []string
	// URL is a streamable-HTTP server's endpoint.
	URL string
	// Header is sent with every HTTP request (Authorization, say).
	Header http.Header
	// Prefix is put before every tool name the server gives, so that two
	// servers with a tool of the same name can be served side by side.
	Prefix string
	// Logger receives the server's events. nil discards them.
	Logger *slog.Logger
	// ConnectTimeout bounds starting a session (process start, initialize,
	// tools/list). Defaults to 30s.
	ConnectTimeout time.Duration
}

// Server serves the tools of one MCP server as toolgate tools: it keeps
// one client session, turns each call into tools/call, and follows the
// server's tool list.
//
// A stdio server that exits is started again for the next call; the calls
// in flight when the session broke (the server exited, or sent a frame
// that is not JSON-RPC or is over the frame limit) fail with a message
// saying so (they are not retried: the server may have done part of the
// work, and a call that breaks the server would break it again). A call's deadline cancels the
// tools/call (notifications/cancelled) and fails the call with "timed out".
// Progress notifications renew the call's lease (in-progress acks). On
// notifications/tools/list_changed the list is read again: new tools are
// served and advertised, tools that are gone are no longer advertised and
// their calls fail with a message saying so.
type Server struct {
	cfg    Config
	log    *slog.Logger
	client *mcp.Client

	connMu sync.Mutex // held while a session starts, so only one does

	mu       sync.Mutex
	sess     *mcpSession
	tools    map[string]*mcp.Tool // by toolgate name: the server's current list
	served   map[string]bool      // toolgate names given to a worker
	worker   Binder
	closed   bool
	onChange []func()

	progress  sync.Map // progress token -> func()
	nextToken atomic.Uint64

	refresh chan struct{}
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

// mcpSession is one connection to the server.
type mcpSession struct {
	cs     *mcp.ClientSession
	done   chan struct{} // closed when the session ended
	stderr *syncTail     // stdio: the end of the server's stderr
	pgid   int           // stdio: the server's process group, 0 if none
}

func (s *mcpSession) ended() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// New checks cfg and starts the session: it fails when the server
// cannot be started or listed, so that a misconfigured worker stops at once.
// Close ends it.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if err := wire.ValidateToken("MCP server name", cfg.Name); err != nil {
		return nil, err
	}
	if (len(cfg.Command) == 0) == (cfg.URL == "") {
		return nil, fmt.Errorf("MCP server %s: give a command or a URL", cfg.Name)
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		cfg:     cfg,
		log:     cfg.Logger.With(slog.String("mcp_server", cfg.Name)),
		tools:   map[string]*mcp.Tool{},
		served:  map[string]bool{},
		refresh: make(chan struct{}, 1),
	}
	s.client = mcp.NewClient(&mcp.Implementation{Name: "toolgate-worker", Version: "1"}, &mcp.ClientOptions{
		Logger: s.log,
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			// Handlers run on the session's reading side: list from elsewhere.
			select {
			case s.refresh <- struct{}{}:
			default:
			}
		},
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			if req.Params == nil {
				return
			}
			if f, ok := s.progress.Load(progressKey(req.Params.ProgressToken)); ok {
				f.(func())()
			}
		},
	})
	if _, err := s.session(ctx); err != nil {
		return nil, err
	}
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s.stop = stop
	s.wg.Go(func() { s.refreshLoop(rctx) })
	return s, nil
}

// Name is the server's name.
func (s *Server) Name() string { return s.cfg.Name }

// Tools are the server's tools as worker tools, in name order.
func (s *Server) Tools() []executor.Tool {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.tools))
	for n := range s.tools {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]executor.Tool, 0, len(names))
	for _, n := range names {
		out = append(out, s.toolLocked(n))
		s.served[n] = true
	}
	return out
}

func (s *Server) toolLocked(name string) executor.Tool {
	t := s.tools[name]
	params, _ := json.Marshal(t.InputSchema)
	return executor.Tool{
		Spec:     executor.ToolSpec{Name: name, Description: mcpDescription(t), Parameters: params},
		Executor: s,
		Kind:     "mcp",
	}
}

// Binder is the worker a Server hands the tools to that appear while it
// runs (internal/worker.Worker).
type Binder interface {
	AddTool(t executor.Tool) error
	Readvertise()
}

// Bind hands the tools that appear from now on to w (Binder.AddTool), and
// serves at once those that appeared since Tools was read.
func (s *Server) Bind(w Binder) {
	s.mu.Lock()
	s.worker = w
	s.mu.Unlock()
	s.serveNew()
}

// OnToolsChanged registers f, called after each change of the tool list has
// been applied (tests wait on it).
func (s *Server) OnToolsChanged(f func()) {
	s.mu.Lock()
	s.onChange = append(s.onChange, f)
	s.mu.Unlock()
}

// Close ends the session (and a stdio server's process).
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	sess := s.sess
	s.sess = nil
	s.mu.Unlock()
	if s.stop != nil {
		s.stop()
	}
	s.wg.Wait()
	if sess != nil {
		return s.closeSession(sess)
	}
	return nil
}

func (s *Server) closeSession(sess *mcpSession) error {
	err := sess.cs.Close()
	<-sess.done
	killGroup(sess.pgid)
	// A stdio server that does not exit when its stdin closes is
	// terminated: its exit status says only that.
	var exitErr *exec.ExitError
	if errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) || errors.As(err, &exitErr) {
		err = nil
	}
	return err
}

// Advert is what the worker advertises for tool name (worker.Advertiser);
// ok is false once the server no longer offers it.
func (s *Server) Advert(name string) (a worker.Advert, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tools[name]
	if !ok {
		return a, false
	}
	params, _ := json.Marshal(t.InputSchema)
	a = worker.Advert{
		Description: mcpDescription(t),
		Parameters:  params,
		MCPServer:   s.cfg.Name,
		MCPTool:     t.Name,
	}
	if t.Annotations != nil {
		a.Annotations, _ = json.Marshal(t.Annotations)
	}
	return a, true
}

// session returns the live session, starting one (a new process, for stdio)
// when there is none or the last one ended.
func (s *Server) session(ctx context.Context) (*mcpSession, error) {
	s.mu.Lock()
	sess, closed := s.sess, s.closed
	s.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("MCP server %s: closed", s.cfg.Name)
	}
	if sess != nil && !sess.ended() {
		return sess, nil
	}
	s.connMu.Lock()
	defer s.connMu.Unlock()
	s.mu.Lock()
	sess = s.sess
	s.mu.Unlock()
	if sess != nil && !sess.ended() {
		return sess, nil
	}
	if sess != nil {
		s.log.Warn("MCP session ended; starting a new one", slog.String("stderr", sess.stderr.String()))
		_ = s.closeSession(sess)
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
	defer cancel()
	sess, err := s.connect(cctx)
	if err != nil {
		return nil, err
	}
	tools, err := listTools(cctx, sess.cs)
	if err != nil {
		_ = s.closeSession(sess)
		return nil, fmt.Errorf("MCP server %s: tools/list: %w", s.cfg.Name, err)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = s.closeSession(sess)
		return nil, fmt.Errorf("MCP server %s: closed", s.cfg.Name)
	}
	s.sess = sess
	s.mu.Unlock()
	s.setTools(tools)
	s.log.Info("MCP session started", slog.Int("tools", len(tools)))
	return sess, nil
}

func (s *Server) connect(ctx context.Context) (*mcpSession, error) {
	sess := &mcpSession{done: make(chan struct{}), stderr: &syncTail{t: executor.Tail{Max: executor.StderrTail}}}
	var transport mcp.Transport
	var cmd *exec.Cmd
	if len(s.cfg.Command) > 0 {
		cmd = exec.Command(s.cfg.Command[0], s.cfg.Command[1:]...)
		cmd.Dir = s.cfg.Dir
		cmd.Env = append(executor.ChildEnv(cmd.Environ()), s.cfg.Env...)
		cmd.Stderr = sess.stderr
		newProcessGroup(cmd)
		transport = &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
	} else {
		client := &http.Client{Transport: headerTransport{header: s.cfg.Header, base: http.DefaultTransport}}
		transport = &mcp.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: client, MaxRetries: 2}
	}
	cs, err := s.client.Connect(ctx, transport, nil)
	if err != nil {
		if cmd != nil && cmd.Process != nil {
			killGroup(cmd.Process.Pid)
			_ = cmd.Wait()
		}
		where := s.cfg.URL
		if cmd != nil {
			where = s.cfg.Command[0]
			if msg := sess.stderr.String(); msg != "" {
				err = fmt.Errorf("%w (stderr: %s)", err, msg)
			}
		} else {
			where = executor.RedactURL(where)
		}
		return nil, fmt.Errorf("MCP server %s: connect to %s: %w", s.cfg.Name, where, err)
	}
	if cmd != nil && cmd.Process != nil {
		sess.pgid = cmd.Process.Pid
	}
	sess.cs = cs
	go func() {
		_ = cs.Wait()
		close(sess.done)
	}()
	return sess, nil
}

// listTools reads every page of tools/list.
func listTools(ctx context.Context, cs *mcp.ClientSession) ([]*mcp.Tool, error) {
	var out []*mcp.Tool
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// setTools records the server's list, then serves the new tools.
func (s *Server) setTools(list []*mcp.Tool) {
	tools := make(map[string]*mcp.Tool, len(list))
	for _, t := range list {
		name := s.cfg.Prefix + t.Name
		if err := wire.ValidateToken("tool name", name); err != nil {
			s.log.Warn("MCP tool not served: its name cannot be a toolgate tool name", slog.String("tool", t.Name), slog.Any("error", err))
			continue
		}
		tools[name] = t
	}
	s.mu.Lock()
	for n := range s.tools {
		if _, ok := tools[n]; !ok {
			s.log.Info("MCP tool withdrawn by the server", slog.String("tool", n))
		}
	}
	s.tools = tools
	s.mu.Unlock()
	s.serveNew()
}

// serveNew hands tools not yet served to the bound worker, then tells the
// worker to advertise again and calls the OnToolsChanged functions.
func (s *Server) serveNew() {
	s.mu.Lock()
	w := s.worker
	var add []executor.Tool
	if w != nil {
		for n := range s.tools {
			if !s.served[n] {
				add = append(add, s.toolLocked(n))
				s.served[n] = true
			}
		}
	}
	fns := slices.Clone(s.onChange)
	s.mu.Unlock()
	for _, t := range add {
		if err := w.AddTool(t); err != nil {
			s.log.Warn("serve new MCP tool", slog.String("tool", t.Spec.Name), slog.Any("error", err))
			s.mu.Lock()
			delete(s.served, t.Spec.Name)
			s.mu.Unlock()
			continue
		}
		s.log.Info("serving new MCP tool", slog.String("tool", t.Spec.Name))
	}
	if w != nil {
		w.Readvertise()
	}
	for _, f := range fns {
		f()
	}
}

// refreshLoop lists the tools again after each tools/list_changed.
func (s *Server) refreshLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.refresh:
		}
		s.mu.Lock()
		sess := s.sess
		s.mu.Unlock()
		if sess == nil || sess.ended() {
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
		tools, err := listTools(lctx, sess.cs)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("MCP tools/list after list_changed", slog.Any("error", err))
			}
			continue
		}
		s.setTools(tools)
	}
}

// Execute calls the tool on the MCP server.
func (s *Server) Execute(ctx context.Context, req wire.CallRequest) (wire.CallReply, error) {
	s.mu.Lock()
	t, ok := s.tools[req.ToolName]
	s.mu.Unlock()
	if !ok {
		return executor.Failed("tool %s is no longer offered by MCP server %s", req.ToolName, s.cfg.Name), nil
	}
	ctx, cancel := executor.WithCallDeadline(ctx, req)
	defer cancel()
	sess, err := s.session(ctx)
	if err != nil {
		if executor.TimedOut(ctx) {
			return executor.Failed(executor.TimedOutMessage), nil
		}
		return wire.CallReply{}, err
	}
	// The session may have restarted with another list.
	s.mu.Lock()
	t, ok = s.tools[req.ToolName]
	s.mu.Unlock()
	if !ok {
		return executor.Failed("tool %s is no longer offered by MCP server %s", req.ToolName, s.cfg.Name), nil
	}

	args := req.Args
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	params := &mcp.CallToolParams{Name: t.Name, Arguments: args}
	token := "toolgate-" + strconv.FormatUint(s.nextToken.Add(1), 10)
	params.SetProgressToken(token)
	if f := callctx.Progress(ctx); f != nil {
		s.progress.Store(token, f)
		defer s.progress.Delete(token)
	}

	res, err := sess.cs.CallTool(ctx, params)
	if err != nil {
		switch {
		case executor.TimedOut(ctx):
			// The SDK has sent notifications/cancelled for the request.
			return executor.Failed(executor.TimedOutMessage), nil
		case ctx.Err() != nil:
			return wire.CallReply{}, fmt.Errorf("MCP server %s: %w", s.cfg.Name, context.Cause(ctx))
		}
		var rpcErr *jsonrpc.Error
		if errors.As(err, &rpcErr) {
			// The server answered the request with an error: invalid
			// params, an unknown tool, a failure inside the handler.
			return executor.Failed("MCP server %s: %s", s.cfg.Name, rpcErr.Message), nil
		}
		// Anything else broke the session (the server exited, sent a frame
		// that is not JSON-RPC or one over the size limit) after the
		// request went out: the server may have done the call's work, so
		// the call fails rather than being handed back to run again, and
		// so does every other call in flight on the session.
		s.log.Warn("MCP session broken during a call; the call fails and is not run again",
			slog.String("tool", req.ToolName), slog.String("tool_call_id", req.ToolCallID), slog.Any("error", err))
		s.endBroken(sess)
		msg := fmt.Sprintf("MCP server %s stopped during the call (%s)", s.cfg.Name, brokenReason(err))
		if tail := sess.stderr.String(); tail != "" {
			msg += ": " + lastLine(tail)
		}
		return executor.Failed("%s; the call is not run again, since the server may have done part of it; the server is started again for the next call", msg), nil
	}
	return mcpReply(res), nil
}

// endBroken waits briefly for a broken session to end (its reader notices
// a moment after the call fails) and closes it if it has not, so that the
// next call starts a new one.
func (s *Server) endBroken(sess *mcpSession) {
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-sess.done:
	case <-t.C:
		_ = sess.cs.Close()
	}
}

// brokenReason is what ended a session, without the SDK's layers of
// context ("connection closed: calling \"tools/call\": client is closing:").
func brokenReason(err error) string {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "its output ended"
	}
	msg := err.Error()
	for _, layer := range []string{"connection closed: ", `calling "tools/call": `, "client is closing: "} {
		msg = strings.TrimPrefix(msg, layer)
	}
	return msg
}

// mcpDescription is the tool's description, or its title when it has none.
func mcpDescription(t *mcp.Tool) string {
	if t.Description != "" {
		return t.Description
	}
	if t.Title != "" {
		return t.Title
	}
	if t.Annotations != nil && t.Annotations.Title != "" {
		return t.Annotations.Title
	}
	return ""
}

func progressKey(token any) any {
	switch v := token.(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	default:
		return fmt.Sprint(v)
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return strings.TrimSpace(s[i+1:])
	}
	return s
}

// headerTransport adds fixed headers to every request.
type headerTransport struct {
	header http.Header
	base   http.RoundTripper
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(h.header) > 0 {
		r = r.Clone(r.Context())
		for k, vs := range h.header {
			r.Header.Del(k)
			for _, v := range vs {
				r.Header.Add(k, v)
			}
		}
	}
	return h.base.RoundTrip(r)
}

// syncTail is a executor.Tail written by a process's stderr copier and read by calls.
type syncTail struct {
	mu sync.Mutex
	t  executor.Tail
}

func (s *syncTail) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.t.Write(p)
}

func (s *syncTail) String() string {
	if s == nil {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.t.String()
}
