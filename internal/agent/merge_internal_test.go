package agent

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMergeRequests(t *testing.T) {
	t.Parallel()
	prompt := func(s string) Part { return Part{Kind: PartUserPrompt, Content: s} }
	ret := func(id string) Part { return Part{Kind: PartToolReturn, ToolCallID: id} }
	call := func(id string) Part { return Part{Kind: PartToolCall, ToolCallID: id} }
	req := func(ps ...Part) Message { return Message{Kind: KindRequest, Parts: ps} }
	resp := func(ps ...Part) Message { return Message{Kind: KindResponse, Parts: ps} }
	for _, tc := range []struct {
		name string
		in   []Message
		want []Message
		// shared: nothing to merge, so the history itself is handed over.
		shared bool
	}{
		{name: "empty", in: nil, want: nil, shared: true},
		{
			name:   "alternating",
			in:     []Message{req(prompt("a")), resp(call("1")), req(ret("1")), resp(call("2")), req(ret("2"), prompt("b"))},
			want:   []Message{req(prompt("a")), resp(call("1")), req(ret("1")), resp(call("2")), req(ret("2"), prompt("b"))},
			shared: true,
		},
		{
			name: "a resume's results after a paused run's partial ones",
			in:   []Message{req(prompt("a")), resp(call("1"), call("2")), req(ret("1")), req(ret("2"), prompt("b"))},
			want: []Message{req(prompt("a")), resp(call("1"), call("2")), req(ret("1"), ret("2"), prompt("b"))},
		},
		{
			name: "tool returns first, then the rest, each in order",
			in:   []Message{resp(call("1"), call("2")), req(prompt("x"), ret("1")), req(prompt("y"), ret("2"))},
			want: []Message{resp(call("1"), call("2")), req(ret("1"), ret("2"), prompt("x"), prompt("y"))},
		},
		{
			name: "a single request out of order",
			in:   []Message{resp(call("1")), req(prompt("x"), ret("1")), resp()},
			want: []Message{resp(call("1")), req(ret("1"), prompt("x")), resp()},
		},
		{
			name: "merged at the end only",
			in:   []Message{req(prompt("a")), resp(call("1")), req(ret("1")), resp(call("2")), req(ret("2")), req(prompt("b"))},
			want: []Message{req(prompt("a")), resp(call("1")), req(ret("1")), resp(call("2")), req(ret("2"), prompt("b"))},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := cloneMessages(tc.in)
			got := mergeRequests(tc.in)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("merged (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, tc.in); diff != "" {
				t.Errorf("the history changed (-before +after):\n%s", diff)
			}
			if len(got) > 0 {
				if s := &got[0] == &tc.in[0]; s != tc.shared {
					t.Errorf("shares the history's array: %v, want %v", s, tc.shared)
				}
				if tc.shared && cap(got) != len(got) {
					t.Errorf("cap %d > len %d: a model appending to its messages would write into the history", cap(got), len(got))
				}
			}
		})
	}
}

func cloneMessages(ms []Message) []Message {
	if ms == nil {
		return nil
	}
	out := make([]Message, len(ms))
	for i, m := range ms {
		m.Parts = append([]Part(nil), m.Parts...)
		out[i] = m
	}
	return out
}
