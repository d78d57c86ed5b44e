// Package builtin is tool-worker's built-in demo tools: files in a sandbox
// folder, a calculator and the like.
package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/toolgate/toolgate/internal/worker/executor"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"unicode"

	"github.com/toolgate/toolgate/wire"
)

// Names of the built-in tools.
const (
	ToolUpdateFile      = "update_file"
	ToolDeleteFile      = "delete_file"
	ToolReadFile        = "read_file"
	ToolCalculateAnswer = "calculate_answer"
	ToolSendToWorker    = "send_to_worker"
	ToolNoop            = "noop"
)

// maxReadFile bounds what read_file returns.
const maxReadFile = 1 << 20

const pathDescription = "File path relative to the sandbox."

var builtinSpecs = []executor.ToolSpec{
	{
		Name:        ToolUpdateFile,
		Description: "Write content to a file in the sandbox, creating it and its folders if needed.",
		Parameters:  stringsSchema("path", pathDescription, "content", "The new content of the file."),
	},
	{
		Name:        ToolDeleteFile,
		Description: "Delete a file in the sandbox.",
		Parameters:  stringsSchema("path", pathDescription),
	},
	{
		Name:        ToolReadFile,
		Description: "Read a file in the sandbox and return its content.",
		Parameters:  stringsSchema("path", pathDescription),
	},
	{
		Name:        ToolCalculateAnswer,
		Description: "Calculate the answer to a question; slow, so it runs in the background.",
		Parameters:  stringsSchema("question", "The question to answer."),
	},
	{
		Name:        ToolSendToWorker,
		Description: "Hand a task to a background worker and return when it is done.",
		Parameters:  stringsSchema("task", "What the worker should do."),
	},
	{
		Name:        ToolNoop,
		Description: "Return the arguments unchanged.",
		Parameters:  json.RawMessage(`{"type":"object"}`),
	},
}

// stringsSchema is the JSON Schema of an object whose properties, given as
// name and description pairs, are all required strings, and nothing else.
func stringsSchema(props ...string) json.RawMessage {
	var b strings.Builder
	var names []string
	b.WriteString(`{"type":"object","properties":{`)
	for i := 0; i+1 < len(props); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(props[i])
		desc, _ := json.Marshal(props[i+1])
		fmt.Fprintf(&b, `%s:{"type":"string","description":%s}`, name, desc)
		names = append(names, string(name))
	}
	fmt.Fprintf(&b, `},"required":[%s],"additionalProperties":false}`, strings.Join(names, ","))
	return json.RawMessage(b.String())
}

// Tools lists the built-in tools, so that an orchestrator's config can
// declare the same schemas. The slice is a copy.
func Tools() []executor.ToolSpec {
	out := make([]executor.ToolSpec, len(builtinSpecs))
	for i, s := range builtinSpecs {
		s.Parameters = append(json.RawMessage(nil), s.Parameters...)
		out[i] = s
	}
	return out
}

// Builtin runs the built-in demo tools. The file tools work inside Sandbox:
// absolute paths and paths that leave it (by ".." or by a symbolic link) fail
// the call.
type Builtin struct {
	sandbox string
}

// New returns the built-in tools working in the folder sandbox, which
// is created if missing.
func New(sandbox string) (*Builtin, error) {
	if sandbox == "" {
		return nil, errors.New("builtin: sandbox folder is empty")
	}
	abs, err := filepath.Abs(sandbox)
	if err != nil {
		return nil, fmt.Errorf("builtin: sandbox %s: %w", sandbox, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("builtin: sandbox: %w", err)
	}
	return &Builtin{sandbox: abs}, nil
}

// Sandbox is the absolute path of the sandbox folder.
func (b *Builtin) Sandbox() string { return b.sandbox }

// Execute runs the built-in tool named by req.ToolName.
func (b *Builtin) Execute(ctx context.Context, req wire.CallRequest) (wire.CallReply, error) {
	if err := ctx.Err(); err != nil {
		if executor.TimedOut(ctx) {
			return executor.Failed(executor.TimedOutMessage), nil
		}
		return wire.CallReply{}, fmt.Errorf("builtin %s: %w", req.ToolName, err)
	}
	switch req.ToolName {
	case ToolUpdateFile:
		var a struct {
			Path    *string `json:"path"`
			Content *string `json:"content"`
		}
		if r, ok := decodeArgs(req.Args, &a); !ok {
			return r, nil
		}
		return b.updateFile(*a.Path, *a.Content), nil
	case ToolDeleteFile, ToolReadFile:
		var a struct {
			Path *string `json:"path"`
		}
		if r, ok := decodeArgs(req.Args, &a); !ok {
			return r, nil
		}
		if req.ToolName == ToolDeleteFile {
			return b.deleteFile(*a.Path), nil
		}
		return b.readFile(*a.Path), nil
	case ToolCalculateAnswer:
		var a struct {
			Question *string `json:"question"`
		}
		if r, ok := decodeArgs(req.Args, &a); !ok {
			return r, nil
		}
		return executor.ReturnValue(json.RawMessage("42")), nil
	case ToolSendToWorker:
		var a struct {
			Task *string `json:"task"`
		}
		if r, ok := decodeArgs(req.Args, &a); !ok {
			return r, nil
		}
		return executor.ReturnValue(executor.JSONString(fmt.Sprintf("Task %s completed", pyRepr(*a.Task)))), nil
	case ToolNoop:
		args := bytes.TrimSpace(req.Args)
		if len(args) == 0 {
			args = []byte("{}")
		}
		if !json.Valid(args) {
			return executor.Retry("arguments are not valid JSON"), nil
		}
		return executor.ReturnValue(executor.Compact(args)), nil
	default:
		return executor.Failed("unknown built-in tool %q", req.ToolName), nil
	}
}

// decodeArgs decodes a call's arguments strictly into v, a pointer to a
// struct whose fields are all required *string; bad or missing arguments
// ask the model to try again, as a validation error would.
func decodeArgs(raw json.RawMessage, v any) (wire.CallReply, bool) {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return executor.Retry("invalid arguments: %v", err), false
	}
	var missing []string
	rv := reflect.ValueOf(v).Elem()
	for i := range rv.NumField() {
		if rv.Field(i).IsNil() {
			name, _, _ := strings.Cut(rv.Type().Field(i).Tag.Get("json"), ",")
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return executor.Retry("invalid arguments: missing %s", strings.Join(missing, ", ")), false
	}
	return wire.CallReply{}, true
}

// sandboxPath checks that path names something inside the sandbox.
func sandboxPath(path string) (string, *wire.CallReply) {
	if path == "" {
		r := executor.Retry("invalid arguments: path is empty")
		return "", &r
	}
	if filepath.IsAbs(path) || strings.HasPrefix(path, "/") || strings.HasPrefix(path, `\`) {
		r := executor.Failed("path %s is absolute; paths are relative to the sandbox", pyRepr(path))
		return "", &r
	}
	clean := filepath.Clean(filepath.FromSlash(path))
	if !filepath.IsLocal(clean) {
		r := executor.Failed("path %s is outside the sandbox", pyRepr(path))
		return "", &r
	}
	return clean, nil
}

// fsFailure turns a file-system error into a failed reply without the
// sandbox's absolute path.
func fsFailure(op, path string, err error) wire.CallReply {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return executor.Failed("File %s not found", pyRepr(path))
	case errors.Is(err, fs.ErrPermission):
		return executor.Failed("%s %s: permission denied", op, pyRepr(path))
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	if strings.Contains(err.Error(), "escapes") {
		return executor.Failed("path %s is outside the sandbox", pyRepr(path))
	}
	return executor.Failed("%s %s: %v", op, pyRepr(path), err)
}

// open checks path and opens the sandbox to work on it; the root is the
// caller's to close.
func (b *Builtin) open(path string) (root *os.Root, clean string, bad *wire.CallReply) {
	clean, bad = sandboxPath(path)
	if bad != nil {
		return nil, "", bad
	}
	root, err := os.OpenRoot(b.sandbox)
	if err != nil {
		r := executor.Failed("open sandbox: %v", err)
		return nil, "", &r
	}
	return root, clean, nil
}

func (b *Builtin) updateFile(path, content string) wire.CallReply {
	root, clean, bad := b.open(path)
	if bad != nil {
		return *bad
	}
	defer root.Close()
	if dir := filepath.Dir(clean); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return fsFailure("update", path, err)
		}
	}
	if err := root.WriteFile(clean, []byte(content), 0o644); err != nil {
		return fsFailure("update", path, err)
	}
	return executor.ReturnValue(executor.JSONString(fmt.Sprintf("File %s updated: %s", pyRepr(path), pyRepr(content))))
}

func (b *Builtin) deleteFile(path string) wire.CallReply {
	root, clean, bad := b.open(path)
	if bad != nil {
		return *bad
	}
	defer root.Close()
	if err := root.Remove(clean); err != nil {
		return fsFailure("delete", path, err)
	}
	return executor.ReturnValue(executor.JSONString(fmt.Sprintf("File %s deleted", pyRepr(path))))
}

func (b *Builtin) readFile(path string) wire.CallReply {
	root, clean, bad := b.open(path)
	if bad != nil {
		return *bad
	}
	defer root.Close()
	fi, err := root.Stat(clean)
	if err != nil {
		return fsFailure("read", path, err)
	}
	if fi.IsDir() {
		return executor.Failed("%s is a folder", pyRepr(path))
	}
	if fi.Size() > maxReadFile {
		return executor.Failed("File %s is larger than %d bytes", pyRepr(path), maxReadFile)
	}
	data, err := root.ReadFile(clean)
	if err != nil {
		return fsFailure("read", path, err)
	}
	return executor.ReturnValue(executor.JSONString(string(data)))
}

// pyRepr quotes s as Python's repr() does, so the built-in tools answer
// exactly like the Python examples they come from ("File 'README.md'
// deleted").
func pyRepr(s string) string {
	quote := byte('\'')
	if strings.ContainsRune(s, '\'') && !strings.ContainsRune(s, '"') {
		quote = '"'
	}
	var b strings.Builder
	b.WriteByte(quote)
	for _, r := range s {
		switch {
		case r == rune(quote) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case !unicode.IsPrint(r):
			switch {
			case r < 0x100:
				fmt.Fprintf(&b, `\x%02x`, r)
			case r < 0x10000:
				fmt.Fprintf(&b, `\u%04x`, r)
			default:
				fmt.Fprintf(&b, `\U%08x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(quote)
	return b.String()
}
