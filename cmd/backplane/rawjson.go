package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// The envelopes this command reads (a batch line, a tools/list catalog, one
// tool) are taken apart without decoding what they carry: a schema or an
// argument document inside them is handed to the validator byte for byte, so
// that its own faults (a duplicate member, a lone surrogate, a huge number)
// are judged by the validator, at the right stage, and not smoothed over by
// a lenient decoder here. Only the envelope's own syntax is checked.

// member is one name/value pair of a JSON object, the value as its exact text.
type member struct {
	name string // unescaped
	raw  json.RawMessage
}

// Errors of the envelope readers.
var (
	errNotJSON   = errors.New("not valid JSON")
	errNotObject = errors.New("not a JSON object")
	errNotArray  = errors.New("not a JSON array")
)

// checkJSON reports whether data is one JSON document (RFC 8259 syntax only;
// strictness about names and strings is the validator's business).
func checkJSON(data []byte) error {
	// Unmarshalling into an empty struct checks the syntax of the whole
	// document first and then skips every value cheaply.
	err := json.Unmarshal(data, &struct{}{})
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) {
		return fmt.Errorf("%w: %v (offset %d)", errNotJSON, syntax, syntax.Offset)
	}
	if err != nil && !errors.As(err, new(*json.UnmarshalTypeError)) {
		return fmt.Errorf("%w: %v", errNotJSON, err)
	}
	return nil
}

// objectMembers returns the members of the JSON object data, in document
// order, duplicates included (the caller decides what a duplicate means).
func objectMembers(data []byte) ([]member, error) {
	if err := checkJSON(data); err != nil {
		return nil, err
	}
	if k := jsonKind(data); k != '{' {
		return nil, fmt.Errorf("%w: found %s", errNotObject, describeKind(k))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("%w: %v", errNotJSON, err)
	}
	var members []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errNotJSON, err)
		}
		name, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("%w: %v", errNotJSON, err)
		}
		members = append(members, member{name: name, raw: raw})
	}
	if err := closeDocument(dec); err != nil {
		return nil, err
	}
	return members, nil
}

// arrayElements returns the elements of the JSON array data as exact text.
func arrayElements(data []byte) ([]json.RawMessage, error) {
	if err := checkJSON(data); err != nil {
		return nil, err
	}
	if k := jsonKind(data); k != '[' {
		return nil, fmt.Errorf("%w: found %s", errNotArray, describeKind(k))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("%w: %v", errNotJSON, err)
	}
	elems := []json.RawMessage{}
	for dec.More() {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("%w: %v", errNotJSON, err)
		}
		elems = append(elems, raw)
	}
	if err := closeDocument(dec); err != nil {
		return nil, err
	}
	return elems, nil
}

// closeDocument consumes the closing delimiter and insists nothing follows.
func closeDocument(dec *json.Decoder) error {
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("%w: %v", errNotJSON, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: trailing data after the value", errNotJSON)
	}
	return nil
}

// describeKind names the kind of a JSON value from its first byte.
func describeKind(first byte) string {
	switch first {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// jsonKind returns the first byte of a JSON document after white space,
// which tells its kind once the document is known to be valid; 0 if empty.
func jsonKind(data []byte) byte {
	for _, c := range data {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c
	}
	return 0
}
