package agui_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/chat/agui"
	"github.com/toolgate/toolgate/internal/chat/chattest"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/testkit"
)

// A run whose connection drops mid-run, inside its first text message,
// while the run waits for a worker: @ag-ui/client sends the run's input
// again with the id of the last event it applied as Last-Event-ID, and the
// stream goes on from there (RUN_STARTED again, the message it has a part
// of opened again), through another replica: the library's messages hold
// every text, call and result exactly once. The next prompt's run streams
// only its own events.
func TestAGUIReconnect(t *testing.T) {
	t.Parallel()
	modules := aguiModules(t)
	sys := testkit.Test(t, testkit.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	slow := chattest.Agent(t, chattest.SlowAgent, map[string]string{"slow.yaml": chattest.SlowScript})
	o := chattest.Orchestrator(ctx, t, sys, slow)
	other, err := sys.Orchestrator(ctx, "orch2", orchestrator.Config{Agent: slow, ReconcileInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	release := chattest.Slow(ctx, t, sys)
	h, otherH := agui.Handler(o, agui.Config{}), agui.Handler(other, agui.Config{})
	reconnected := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Last-Event-ID") != "" {
			// The client comes back through another replica, and the
			// worker's call returns once it is there.
			release()
			otherH.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
	srv := httptest.NewServer(api.Handler(o, api.Config{Routes: map[string]http.Handler{"POST /v1/agui": reconnected}}))
	t.Cleanup(srv.Close)

	lines := chattest.Node(ctx, t, filepath.Join("testdata", "agui-reconnect.cjs"), modules, map[string]any{
		"url": srv.URL + "/v1/agui", "threadId": "dropped", "prompt": "Look it up",
		// RUN_STARTED, TEXT_MESSAGE_START, "Let ", then the cut.
		"cutAfter": 4, "next": "Again",
	})
	type phase struct {
		events []map[string]any
		end    struct {
			Messages []struct {
				ID         string `json:"id"`
				Role       string `json:"role"`
				Content    string `json:"content"`
				ToolCallID string `json:"toolCallId"`
				ToolCalls  []struct {
					ID string `json:"id"`
				} `json:"toolCalls"`
			} `json:"messages"`
			LastEventID string `json:"lastEventId"`
		}
		err string
	}
	phases := map[string]*phase{"cut": {}, "reconnect": {}, "next": {}}
	for _, text := range lines {
		var l struct {
			Phase string          `json:"phase"`
			Event map[string]any  `json:"event"`
			End   json.RawMessage `json:"end"`
			Error string          `json:"error"`
		}
		if err := json.Unmarshal(text, &l); err != nil {
			t.Fatalf("client line %q: %v", text, err)
		}
		p := phases[l.Phase]
		switch {
		case l.Event != nil:
			p.events = append(p.events, l.Event)
		case l.End != nil:
			if err := json.Unmarshal(l.End, &p.end); err != nil {
				t.Fatal(err)
			}
		default:
			p.err = l.Error
		}
	}
	for name, p := range phases {
		t.Logf("%s: %s %s", name, types(p.events), p.err)
	}
	cut, again, next := phases["cut"], phases["reconnect"], phases["next"]
	if types(cut.events) != "RUN_STARTED TEXT_MESSAGE_START TEXT_MESSAGE_CONTENT" || cut.end.LastEventID == "" {
		t.Fatalf("before the cut: %s, last event id %q %s", types(cut.events), cut.end.LastEventID, cut.err)
	}
	if again.err != "" || len(again.events) == 0 || again.events[0]["type"] != "RUN_STARTED" || last(t, again.events)["type"] != "RUN_FINISHED" {
		t.Fatalf("reconnect: %s %s", types(again.events), again.err)
	}
	// Every event once over the two connections, but RUN_STARTED and the
	// start of the message the cut fell in, which the reconnect opens again.
	count := map[string]int{}
	key := func(ev map[string]any) string {
		return fmt.Sprintf("%v %v%v %v", ev["type"], ev["messageId"], ev["toolCallId"], ev["delta"])
	}
	var text strings.Builder
	for _, ev := range append(cut.events, again.events...) {
		count[key(ev)]++
		if ev["type"] == "TEXT_MESSAGE_CONTENT" {
			text.WriteString(fmt.Sprint(ev["delta"]))
		}
	}
	for k, n := range count {
		want := 1
		if strings.HasPrefix(k, "RUN_STARTED") || k == key(cut.events[1]) {
			want = 2
		}
		if n != want {
			t.Errorf("%s: %d times, want %d", k, n, want)
		}
	}
	if text.String() != "Let me look into it for youfound it" {
		t.Errorf("texts streamed: %q", text.String())
	}
	var got []string
	for _, m := range again.end.Messages {
		got = append(got, fmt.Sprintf("%s:%s:%d:%s", m.Role, m.Content, len(m.ToolCalls), m.ToolCallID))
	}
	want := []string{"user:Look it up:0:", "assistant:Let me look into it for you:1:", "tool:the answer:0:slow_call", "assistant:found it:0:"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the library's messages after the reconnect:\n got %q\nwant %q", got, want)
	}
	var nextText strings.Builder
	for _, ev := range next.events {
		switch ev["type"] {
		case "TEXT_MESSAGE_CONTENT":
			nextText.WriteString(fmt.Sprint(ev["delta"]))
		case "TOOL_CALL_START", "TOOL_CALL_RESULT":
			t.Errorf("the next prompt's run streams an event of the first: %v", ev)
		}
	}
	if next.err != "" || nextText.String() != "again done" || next.events[0]["type"] != "RUN_STARTED" || last(t, next.events)["type"] != "RUN_FINISHED" {
		t.Errorf("the next prompt's run: %s %q %s", types(next.events), nextText.String(), next.err)
	}
}

// sseEvent is an event of a raw SSE answer with its id.
type sseEvent struct {
	id string
	ev map[string]any
}

// postWithID posts input with Last-Event-ID lastID (none when empty) and
// returns the status and the events of the answer with their ids.
func (e *env) postWithID(t *testing.T, input map[string]any, lastID string) (int, []sseEvent) {
	t.Helper()
	body, _ := json.Marshal(input)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", e.url+"/v1/agui", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var (
		out []sseEvent
		id  string
	)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "id: "); ok {
			id = v
		}
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var ev map[string]any
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				t.Fatal(err)
			}
			out = append(out, sseEvent{id: id, ev: ev})
		}
		if sc.Text() == "" {
			id = ""
		}
	}
	return resp.StatusCode, out
}

func describe(evs []sseEvent) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "%s %v%v [%s]\n", e.ev["type"], e.ev["toolCallId"], e.ev["messageId"], e.id)
	}
	return b.String()
}

// A reconnect at every event of a run gets the rest of the run, under the
// same ids, after RUN_STARTED (under the id it resumes from) and, when it
// falls inside a tool call, the call's TOOL_CALL_START again (without an
// id: the client's last id stays the one it sent). A Last-Event-ID that
// is no event id of the endpoint is a 400; one of no run of the thread
// ends the stream with RUN_ERROR reconnect_refused.
func TestAGUIReconnectAtEveryEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	input := map[string]any{"threadId": "again", "runId": "r1", "messages": []any{map[string]any{"id": "u1", "role": "user", "content": "go"}}}
	status, first := e.postWithID(t, input, "")
	if status != http.StatusOK || len(first) < 4 || first[len(first)-1].ev["type"] != "RUN_FINISHED" {
		t.Fatalf("first run: %d\n%s", status, describe(first))
	}
	for i := range first[:len(first)-1] {
		status, again := e.postWithID(t, input, first[i].id)
		want := []sseEvent{{id: first[i].id, ev: map[string]any{"type": "RUN_STARTED"}}}
		if open := first[i].ev; open["type"] == "TOOL_CALL_START" || open["type"] == "TOOL_CALL_ARGS" {
			want = append(want, sseEvent{ev: map[string]any{"type": "TOOL_CALL_START", "toolCallId": open["toolCallId"]}})
		}
		want = append(want, first[i+1:]...)
		if status != http.StatusOK || describe(again) != describe(want) {
			t.Errorf("reconnect after event %d:\n got %s\nwant %s", i, describe(again), describe(want))
		}
	}
	if status, _ := e.postWithID(t, input, "1.2.3"); status != http.StatusBadRequest {
		t.Errorf("a malformed Last-Event-ID: %d", status)
	}
	_, evs := e.postWithID(t, map[string]any{"threadId": "never", "runId": "r1"}, first[1].id)
	if len(evs) != 1 || evs[0].ev["code"] != "reconnect_refused" {
		t.Errorf("a Last-Event-ID of no run of the thread: %s", describe(evs))
	}
}
