package bus

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"

	"github.com/vmihailenco/msgpack/v5"
)

// Content types of message bodies, carried in the Content-Type header.
const (
	ContentTypeMsgpack = "application/msgpack"
	ContentTypeJSON    = "application/json"
)

// ErrUnsupportedContentType is returned for a Content-Type that is neither
// msgpack nor JSON.
var ErrUnsupportedContentType = errors.New("unsupported content type")

// normalizeContentType maps a Content-Type header value to one of ours; an
// empty value means msgpack, the default.
func normalizeContentType(ct string) (string, error) {
	if ct == "" {
		return ContentTypeMsgpack, nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return "", fmt.Errorf("%w: %q", ErrUnsupportedContentType, ct)
	}
	switch mt {
	case ContentTypeMsgpack, "application/x-msgpack", "application/vnd.msgpack":
		return ContentTypeMsgpack, nil
	case ContentTypeJSON:
		return ContentTypeJSON, nil
	}
	return "", fmt.Errorf("%w: %q", ErrUnsupportedContentType, ct)
}

// Encode marshals v as contentType ("" means msgpack). A Validator is
// validated first, so a malformed message is refused at the sender.
func Encode(v any, contentType string) ([]byte, error) {
	ct, err := normalizeContentType(contentType)
	if err != nil {
		return nil, err
	}
	if val, ok := v.(Validator); ok {
		if err := val.Validate(); err != nil {
			return nil, err
		}
	}
	if ct == ContentTypeJSON {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("encode json: %w", err)
		}
		return b, nil
	}
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode msgpack: %w", err)
	}
	return buf.Bytes(), nil
}

// DecodeError is an undecodable body (as opposed to a decodable but invalid
// message, a *ValidationError).
type DecodeError struct {
	ContentType string
	Err         error
}

func (e *DecodeError) Error() string { return fmt.Sprintf("decode %s: %v", e.ContentType, e.Err) }
func (e *DecodeError) Unwrap() error { return e.Err }

// Decode unmarshals data of contentType ("" means msgpack) into v and, if v
// is a Validator, validates it. Unknown fields are ignored so that senders
// may add fields; trailing data is an error.
func Decode(data []byte, contentType string, v any) error {
	ct, err := normalizeContentType(contentType)
	if err != nil {
		return &DecodeError{ContentType: contentType, Err: err}
	}
	if ct == ContentTypeJSON {
		dec := json.NewDecoder(bytes.NewReader(data))
		if err := dec.Decode(v); err != nil {
			return &DecodeError{ContentType: ct, Err: err}
		}
		if trailing(data, dec) {
			return &DecodeError{ContentType: ct, Err: errors.New("trailing data")}
		}
	} else if err := decodeMsgpack(data, v); err != nil {
		return &DecodeError{ContentType: ct, Err: err}
	}
	if val, ok := v.(Validator); ok {
		return val.Validate()
	}
	return nil
}

// decodeMsgpack recovers the decoder's panics: msgpack v5 panics on some
// malformed input (nil for a time.Time field, found by fuzzing), and a body
// from the network must not take a consumer down.
func decodeMsgpack(data []byte, v any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("malformed msgpack: %v", r)
		}
	}()
	r := bytes.NewReader(data)
	if err := msgpack.NewDecoder(r).Decode(v); err != nil {
		return err
	}
	if r.Len() != 0 {
		return errors.New("trailing data")
	}
	return nil
}

// trailing reports whether anything but whitespace follows the value dec
// has decoded from data.
func trailing(data []byte, dec *json.Decoder) bool {
	return len(bytes.TrimLeft(data[dec.InputOffset():], " \t\r\n")) != 0
}
