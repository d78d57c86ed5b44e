package mcpexec

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"github.com/toolgate/toolgate/internal/worker/executor"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolgate/toolgate/wire"
)

// maxInlineData bounds the binary content (an image, audio, a blob) given
// to the model as a data URL; larger content is described instead. A reply
// must fit in its conversation (256 KiB per reply), and base64 grows by a
// third.
const maxInlineData = 96 << 10

// mcpReply maps a tools/call result to a reply:
//   - isError fails the call with the result's text, which the model sees;
//   - structured content is the return value; otherwise the text content is
//     (one JSON string, the texts joined by blank lines);
//   - content the model cannot get as text (images, audio, resource links,
//     embedded resources) goes into the return's content, which the model
//     gets as a user message after the tool results: a line describing each,
//     with a data URL for small binary content and the text of a text
//     resource.
func mcpReply(res *mcp.CallToolResult) wire.CallReply {
	var texts, other []string
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			texts = append(texts, c.Text)
		default:
			other = append(other, describeContent(c))
		}
	}
	if res.IsError {
		msg := strings.TrimSpace(strings.Join(append(texts, other...), "\n"))
		if msg == "" {
			msg = "the MCP tool reported an error without a message"
		}
		return executor.Failed("%s", msg)
	}
	r := wire.CallReply{Outcome: wire.OutcomeReturn}
	if res.StructuredContent != nil {
		v, err := json.Marshal(res.StructuredContent)
		if err != nil {
			return executor.Failed("MCP structured content: %v", err)
		}
		r.Value = executor.Compact(v)
	} else {
		switch len(texts) {
		case 0:
			r.Value = json.RawMessage("null")
		default:
			r.Value = executor.JSONString(strings.Join(texts, "\n\n"))
		}
	}
	if len(other) > 0 {
		r.Content = strings.Join(other, "\n")
	}
	return r
}

// describeContent renders one non-text content item as a line of text.
func describeContent(c mcp.Content) string {
	switch c := c.(type) {
	case *mcp.ImageContent:
		return binaryLine("image", c.MIMEType, c.Data)
	case *mcp.AudioContent:
		return binaryLine("audio", c.MIMEType, c.Data)
	case *mcp.ResourceLink:
		s := "[resource link " + c.URI
		if c.Name != "" {
			s += " name=" + c.Name
		}
		if c.MIMEType != "" {
			s += " type=" + c.MIMEType
		}
		if c.Description != "" {
			s += ": " + c.Description
		}
		return s + "]"
	case *mcp.EmbeddedResource:
		r := c.Resource
		if r == nil {
			return "[empty embedded resource]"
		}
		if r.Text != "" || len(r.Blob) == 0 {
			head := "[resource " + r.URI
			if r.MIMEType != "" {
				head += " type=" + r.MIMEType
			}
			return head + "]\n" + r.Text
		}
		return binaryLine("resource "+r.URI, r.MIMEType, r.Blob)
	default:
		b, err := json.Marshal(c)
		if err != nil {
			return fmt.Sprintf("[content %T]", c)
		}
		return "[content " + string(b) + "]"
	}
}

func binaryLine(what, mime string, data []byte) string {
	if mime == "" {
		mime = "application/octet-stream"
	}
	if len(data) > maxInlineData {
		return fmt.Sprintf("[%s %s, %d bytes, too large to include]", what, mime, len(data))
	}
	return fmt.Sprintf("[%s %s, %d bytes: data:%s;base64,%s]", what, mime, len(data), mime, base64.StdEncoding.EncodeToString(data))
}
