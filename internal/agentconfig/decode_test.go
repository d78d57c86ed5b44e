package agentconfig_test

import (
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/agentconfig"
)

// Every kind of error in an agent config names the field's path and its
// line. Before, YAML was turned into JSON before decoding, so errors such
// as `unknown field "descripton"` or `invalid duration "10 minutes"` had
// neither.
func TestErrorsNameFieldAndLine(t *testing.T) {
	t.Parallel()
	const head = "# an agent\nmodel:\n  provider: test\ntools:\n  - name: read\n" // lines 1-5
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"unknown field", head + "  - name: write\n    descripton: writes\n",
			`line 7: tools[1]: unknown field "descripton"`},
		{"unknown top-level field", head + "modle: x\n",
			`line 6: unknown field "modle"`},
		{"wrong type", head + "max_model_requests: many\n",
			"line 6: max_model_requests: cannot use a string here (want an integer)"},
		{"wrong type in a list", head + "  - name: write\n    description: [writes]\n",
			"line 7: tools[1].description: cannot use a list here (want a string)"},
		{"bad duration", head + "    deadline: 10 minutes\n",
			`line 6: tools[0].deadline: invalid duration "10 minutes"`},
		{"bad CEL", head + "    approval: args.path ==\n",
			"line 6: tools[0] (read).approval: CEL"},
		{"missing required", "model:\n  name: gpt\ntools:\n  - name: read\n",
			"line 1: model.provider: required"},
		{"missing required in a list", head + "discover:\n  - approval: always\n",
			"line 7: discover[0].tools: required"},
		{"duplicate key", head + "model: {provider: test}\n",
			"line 6: "},
		{"JSON", "{\n  \"model\": {\"provider\": \"test\"},\n  \"tools\": [{\"name\": \"t\", \"dedline\": \"1s\"}]\n}\n",
			`line 3: tools[0]: unknown field "dedline"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := agentconfig.Parse([]byte(tc.yaml), nil)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("error = %v\nwant one starting %q", err, tc.want)
			}
		})
	}
}
