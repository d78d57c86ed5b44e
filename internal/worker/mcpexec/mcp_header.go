package mcpexec

import (
	"fmt"
	"net/http"
	"os"
	"strings"
)

// AddHeader parses one `Key: Value` header for an MCP server reached over
// HTTP and adds it to h. A value that starts with @ names a file whose
// contents (trimmed) are the value, so that a bearer token need not appear
// in the command line, where every local user can read it.
func AddHeader(h http.Header, spec string) error {
	key, value, ok := strings.Cut(spec, ":")
	key, value = strings.TrimSpace(key), strings.TrimSpace(value)
	if !ok || key == "" || value == "" {
		return fmt.Errorf("header %q: want Key:Value or Key:@FILE", spec)
	}
	if strings.ContainsAny(key, " \t\r\n") {
		return fmt.Errorf("header %q: the name may not contain white space", spec)
	}
	if file, ok := strings.CutPrefix(value, "@"); ok {
		b, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("header %s: %w", key, err)
		}
		if value = strings.TrimSpace(string(b)); value == "" {
			return fmt.Errorf("header %s: file %s is empty", key, file)
		}
	}
	if strings.ContainsAny(value, "\r\n") {
		return fmt.Errorf("header %s: the value may not span lines", key)
	}
	h.Add(key, value)
	return nil
}
