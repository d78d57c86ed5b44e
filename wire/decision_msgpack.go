package wire

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// DecodeMsgpack reads a Decision in its msgpack form (decided_at a msgpack
// timestamp, signature 64 bytes of bin, override_args and metadata bin
// holding JSON text) and also in the forms decision.schema.json gives for
// JSON, which a bot that builds its msgpack body from the schema sends:
// decided_at as an RFC 3339 string, signature as a base64 string,
// override_args and metadata as a string of JSON text. Each of these has
// exactly one meaning, so accepting it costs nothing; override_args or
// metadata as a msgpack map is refused, since a map does not say which
// JSON text was signed (1.0 or 1, key order).
func (d *Decision) DecodeMsgpack(dec *msgpack.Decoder) error {
	var w struct {
		RunID        string       `msgpack:"run_id"`
		ToolCallID   string       `msgpack:"tool_call_id"`
		ArgsDigest   string       `msgpack:"args_digest"`
		Approved     bool         `msgpack:"approved"`
		OverrideArgs jsonText     `msgpack:"override_args"`
		Message      string       `msgpack:"message"`
		Metadata     metadataText `msgpack:"metadata"`
		ApproverID   string       `msgpack:"approver_id"`
		DecidedAt    timeOrString `msgpack:"decided_at"`
		Signature    binOrBase64  `msgpack:"signature"`
	}
	if err := dec.Decode(&w); err != nil {
		return err
	}
	*d = Decision{
		RunID: w.RunID, ToolCallID: w.ToolCallID, ArgsDigest: w.ArgsDigest, Approved: w.Approved,
		OverrideArgs: json.RawMessage(w.OverrideArgs), Message: w.Message, Metadata: json.RawMessage(w.Metadata), ApproverID: w.ApproverID,
		DecidedAt: time.Time(w.DecidedAt), Signature: []byte(w.Signature),
	}
	return nil
}

// timeOrString is a msgpack timestamp or an RFC 3339 string.
type timeOrString time.Time

func (t *timeOrString) DecodeMsgpack(dec *msgpack.Decoder) error {
	c, err := dec.PeekCode()
	if err != nil {
		return err
	}
	switch {
	case c == msgpcode.Nil:
		*t = timeOrString{}
		return dec.DecodeNil()
	case msgpcode.IsString(c):
		s, err := dec.DecodeString()
		if err != nil {
			return err
		}
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return fmt.Errorf("decided_at %q is not an RFC 3339 time", s)
		}
		*t = timeOrString(v)
		return nil
	}
	v, err := dec.DecodeTime()
	if err != nil {
		return fmt.Errorf("decided_at: want a msgpack timestamp or an RFC 3339 string: %w", err)
	}
	*t = timeOrString(v)
	return nil
}

// binOrBase64 is bin, or a string of standard base64 (with padding).
type binOrBase64 []byte

func (b *binOrBase64) DecodeMsgpack(dec *msgpack.Decoder) error {
	c, err := dec.PeekCode()
	if err != nil {
		return err
	}
	if msgpcode.IsString(c) {
		s, err := dec.DecodeString()
		if err != nil {
			return err
		}
		v, err := base64.StdEncoding.Strict().DecodeString(s)
		if err != nil {
			return fmt.Errorf("signature: a string that is not standard base64: %w", err)
		}
		*b = v
		return nil
	}
	if !msgpcode.IsBin(c) && c != msgpcode.Nil {
		return fmt.Errorf("signature: want bin or a base64 string, got msgpack code 0x%02x", c)
	}
	v, err := dec.DecodeBytes()
	*b = v
	return err
}

// jsonText is JSON text held in bin or str: override_args.
type jsonText []byte

func (j *jsonText) DecodeMsgpack(dec *msgpack.Decoder) error {
	return decodeJSONText(dec, "override_args", (*[]byte)(j))
}

// metadataText is jsonText for the field metadata.
type metadataText []byte

func (j *metadataText) DecodeMsgpack(dec *msgpack.Decoder) error {
	return decodeJSONText(dec, "metadata", (*[]byte)(j))
}

func decodeJSONText(dec *msgpack.Decoder, field string, dst *[]byte) error {
	c, err := dec.PeekCode()
	if err != nil {
		return err
	}
	if !msgpcode.IsBin(c) && !msgpcode.IsString(c) && c != msgpcode.Nil {
		return fmt.Errorf("%s: want JSON text as bin (or str), got msgpack code 0x%02x", field, c)
	}
	v, err := dec.DecodeBytes()
	*dst = v
	return err
}
