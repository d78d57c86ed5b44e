package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"sync"

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

// NormalizeContentType maps a Content-Type header value to one of ours
// (ContentTypeMsgpack or ContentTypeJSON); an empty value means msgpack,
// the default.
func NormalizeContentType(ct string) (string, error) {
	switch ct {
	case "":
		return ContentTypeMsgpack, nil
	case ContentTypeMsgpack, ContentTypeJSON:
		// What toolgate's own clients send, on every message: no parse.
		return ct, nil
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
func Encode(v any, contentType string) ([]byte, error) { return AppendEncode(nil, v, contentType) }

// AppendEncode is Encode appending v's encoding to dst, for a sender that
// reuses its buffers: a message published is copied into the connection's
// buffer, and its bytes are free once the stream has acknowledged it.
func AppendEncode(dst []byte, v any, contentType string) ([]byte, error) {
	ct, err := NormalizeContentType(contentType)
	if err != nil {
		return nil, err
	}
	if val, ok := v.(Validator); ok {
		if err := val.Validate(); err != nil {
			return nil, err
		}
	}
	e := encoders.Get().(*pooledEncoder)
	defer e.put()
	if ct == ContentTypeJSON {
		if err := e.json.Encode(v); err != nil {
			return nil, fmt.Errorf("encode json: %w", err)
		}
		// json.Marshal's bytes: the encoder ends a value with a newline.
		b := e.buf.Bytes()
		return append(dst, b[:len(b)-1]...), nil
	}
	if err := e.msgpack.Encode(v); err != nil {
		return nil, fmt.Errorf("encode msgpack: %w", err)
	}
	return append(dst, e.buf.Bytes()...), nil
}

// pooledEncoder is a msgpack and a JSON encoder writing into one buffer,
// kept for reuse: an encoder writing into a fresh buffer grows it by
// doubling, and that garbage was a fifth of the bytes the orchestrator
// allocated. The message is copied out, to dst.
type pooledEncoder struct {
	buf     bytes.Buffer
	msgpack *msgpack.Encoder
	json    *json.Encoder
}

var encoders = sync.Pool{New: func() any {
	e := &pooledEncoder{}
	e.msgpack = msgpack.NewEncoder(&e.buf)
	e.msgpack.UseCompactInts(true)
	e.json = json.NewEncoder(&e.buf)
	return e
}}

// put returns e to the pool, unless one large message grew its buffer past
// what is worth keeping.
func (e *pooledEncoder) put() {
	if e.buf.Cap() > 1<<20 {
		return
	}
	e.buf.Reset()
	encoders.Put(e)
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
	ct, err := NormalizeContentType(contentType)
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
	if err := checkMsgpackLengths(data); err != nil {
		return err
	}
	d := decoders.Get().(*pooledDecoder)
	d.r.Reset(data)
	d.dec.Reset(&d.r)
	if err := d.dec.Decode(v); err != nil {
		// Not given back: a decoder that failed half-way (or panicked,
		// recovered above) is not worth trusting again.
		return err
	}
	trailing := d.r.Len() != 0
	d.put(len(data))
	if trailing {
		return errors.New("trailing data")
	}
	return nil
}

// pooledDecoder is a msgpack decoder with its reader, kept for reuse as
// msgpack.Unmarshal keeps its own: a decoder and a reader made for every
// message were a tenth of the bytes a reply's delivery allocated. Decoded
// strings and byte slices are copied out of the body and the decoder's
// scratch, so nothing decoded refers to them.
type pooledDecoder struct {
	r   bytes.Reader
	dec *msgpack.Decoder
}

var decoders = sync.Pool{New: func() any {
	d := &pooledDecoder{}
	d.dec = msgpack.NewDecoder(&d.r)
	return d
}}

// maxPooledDecode bounds the bodies whose decoder is kept: the decoder's
// scratch grows to the body's longest string, which a large result must
// not leave in the pool.
const maxPooledDecode = 64 << 10

// put returns d to the pool after a body of n bytes, letting go of it.
func (d *pooledDecoder) put(n int) {
	d.r.Reset(nil)
	d.dec.ResetReader(nil)
	if n <= maxPooledDecode {
		decoders.Put(d)
	}
}

// trailing reports whether anything but whitespace follows the value dec
// has decoded from data.
func trailing(data []byte, dec *json.Decoder) bool {
	return len(bytes.TrimLeft(data[dec.InputOffset():], " \t\r\n")) != 0
}

// checkMsgpackLengths walks the first msgpack value of data and refuses an
// array or map that declares more elements than bytes are left to hold
// them (each takes at least one), and a string, binary or extension longer
// than what is left. The decoder allocates a slice of the declared length
// up front (its allocation limit does not take effect in v5.4.1), so a
// five-byte body declaring four billion elements would otherwise exhaust
// memory. Found by fuzzing.
func checkMsgpackLengths(data []byte) error {
	sc := &msgpackScan{data: data}
	for pending := 1; pending > 0; {
		pending--
		b, err := sc.need(1)
		if err != nil {
			return err
		}
		items, skip, err := sc.head(b[0])
		if err != nil {
			return err
		}
		if _, err := sc.need(skip); err != nil {
			return err
		}
		pending += items
		if left := len(data) - sc.pos; pending > left {
			return fmt.Errorf("malformed msgpack: %d more values declared at offset %d, %d bytes left", pending, sc.pos, left)
		}
	}
	return nil
}

// msgpackScan walks a msgpack body by its type bytes and lengths only.
type msgpackScan struct {
	data []byte
	pos  int
}

// need takes the next n bytes.
func (sc *msgpackScan) need(n int) ([]byte, error) {
	if n < 0 || n > len(sc.data)-sc.pos {
		return nil, fmt.Errorf("malformed msgpack: %d bytes needed at offset %d, %d left", n, sc.pos, len(sc.data)-sc.pos)
	}
	b := sc.data[sc.pos : sc.pos+n]
	sc.pos += n
	return b, nil
}

// size reads a big-endian length of width bytes, which no body of this
// size can exceed.
func (sc *msgpackScan) size(width int) (int, error) {
	b, err := sc.need(width)
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, c := range b {
		n = n<<8 | uint64(c)
	}
	if n > uint64(len(sc.data)) {
		return 0, fmt.Errorf("malformed msgpack: length %d at offset %d exceeds the %d-byte body", n, sc.pos-width, len(sc.data))
	}
	return int(n), nil
}

// head reads what follows the type byte t of a value: the number of
// values a container holds (items) and the payload bytes to skip.
func (sc *msgpackScan) head(t byte) (items, skip int, err error) {
	switch {
	case t <= 0x7f || t >= 0xe0, t == 0xc0, t == 0xc2, t == 0xc3:
	case t >= 0x80 && t <= 0x8f:
		items = 2 * int(t&0x0f)
	case t >= 0x90 && t <= 0x9f:
		items = int(t & 0x0f)
	case t >= 0xa0 && t <= 0xbf:
		skip = int(t & 0x1f)
	case t == 0xc4 || t == 0xd9:
		skip, err = sc.size(1)
	case t == 0xc5 || t == 0xda:
		skip, err = sc.size(2)
	case t == 0xc6 || t == 0xdb:
		skip, err = sc.size(4)
	case t == 0xc7, t == 0xc8, t == 0xc9:
		w := map[byte]int{0xc7: 1, 0xc8: 2, 0xc9: 4}[t]
		if skip, err = sc.size(w); err == nil {
			skip++ // the extension type
		}
	case t == 0xca || t == 0xce || t == 0xd2:
		skip = 4
	case t == 0xcb || t == 0xcf || t == 0xd3:
		skip = 8
	case t == 0xcc || t == 0xd0:
		skip = 1
	case t == 0xcd || t == 0xd1:
		skip = 2
	case t >= 0xd4 && t <= 0xd8:
		skip = 1 + 1<<(t-0xd4)
	case t == 0xdc:
		items, err = sc.size(2)
	case t == 0xdd:
		items, err = sc.size(4)
	case t == 0xde:
		items, err = sc.size(2)
		items *= 2
	case t == 0xdf:
		items, err = sc.size(4)
		items *= 2
	default:
		err = fmt.Errorf("malformed msgpack: byte 0x%02x at offset %d starts no value", t, sc.pos-1)
	}
	return items, skip, err
}
