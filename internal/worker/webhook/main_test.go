package webhook_test

import (
	"encoding/json"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolgate/toolgate/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func callRequest(tool, args string) wire.CallRequest {
	return wire.CallRequest{
		RunID:          "run1",
		ConversationID: "conv1",
		ToolCallID:     "call1",
		ToolName:       tool,
		Args:           json.RawMessage(args),
		Deadline:       time.Now().Add(time.Minute),
		Attempt:        1,
	}
}
