package deferred

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// CanonicalJSON re-encodes one JSON text canonically: object keys sorted
// by their UTF-8 bytes (recursively), no insignificant whitespace, numbers
// exactly as written (1.0 stays 1.0, big integers keep every digit),
// strings re-encoded by encoding/json without HTML escaping: '"' and '\'
// escaped, \b \f \n \r \t short, other control characters as \u00xx
// (lowercase hex), U+2028 and U+2029 as \u2028 and \u2029, invalid UTF-8
// and lone surrogates as U+FFFD, everything else as UTF-8. An object with
// a duplicate key is an error: parsers disagree on which copy wins, and a
// digest must not hide that. schemas/canonical_json_vectors.json holds
// test vectors; docs/protocol.md says why this is not RFC 8785.
func CanonicalJSON(raw []byte) ([]byte, error) {
	if err := checkDuplicateKeys(raw); err != nil {
		return nil, fmt.Errorf("canonical json: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("canonical json: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("canonical json: trailing data")
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("canonical json: %w", err)
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}

// ArgsDigest is the hex SHA-256 of CanonicalJSON(args): the args_digest an
// approval request carries and its decision must return unchanged (D36).
// Empty or null args digest as {}, the args of a call the model sent without
// any.
func ArgsDigest(args json.RawMessage) (string, error) {
	if len(bytes.TrimSpace(args)) == 0 || isNull(args) {
		args = emptyObject
	}
	c, err := CanonicalJSON(args)
	if err != nil {
		return "", fmt.Errorf("args digest: %w", err)
	}
	sum := sha256.Sum256(c)
	return hex.EncodeToString(sum[:]), nil
}

func checkDuplicateKeys(raw []byte) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return walkValue(dec)
}

// walkValue consumes one value from dec, failing on a duplicate object key.
func walkValue(dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return err
			}
			key, _ := k.(string)
			if seen[key] {
				return fmt.Errorf("duplicate key %q", key)
			}
			seen[key] = true
			if err := walkValue(dec); err != nil {
				return err
			}
		}
		_, err = dec.Token()
		return err
	case json.Delim('['):
		for dec.More() {
			if err := walkValue(dec); err != nil {
				return err
			}
		}
		_, err = dec.Token()
		return err
	}
	return nil
}
