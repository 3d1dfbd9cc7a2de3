package schematool

import (
	"bufio"
	"container/list"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/agentbackplane/backplane/inputschema"
	"github.com/agentbackplane/backplane/internal/jsonstrict"
)

// batchResult is one output line.
type batchResult struct {
	ID    json.RawMessage    `json:"id"` // nil encodes as null
	OK    bool               `json:"ok"`
	Error *inputschema.Error `json:"error,omitempty"`
}

// RunBatch answers every JSON Lines request of in on out, in order:
//
//	in:  {"id":..., "schema":{...} | "schema_text":"...",
//	      "arguments":{...} | "arguments_text":"..."}
//	out: {"id":...,"ok":true}
//	     {"id":...,"ok":false,"error":{class,stage,message,path,pointer,
//	                                   schema_pointer,keyword,details}}
//
// "schema" and "arguments" are handed to the validator byte for byte;
// "schema_text" and "arguments_text" are JSON strings whose decoded text is
// handed over instead. "id" is optional and echoed (null when absent). Each
// line reports the first error only. A line whose envelope is wrong (not an
// object, both or neither of a pair, a duplicate or unknown member, longer
// than MaxBatchLine) gets an error at StageInput and processing goes on;
// blank lines produce no output. Schemas are compiled through cache (nil: a
// new one with default options). Only I/O errors (wrapping ErrIO) stop it.
func RunBatch(in io.Reader, out io.Writer, cache *Cache) error {
	if cache == nil {
		cache = NewCache(nil, nil)
	}
	r := bufio.NewReaderSize(in, 64<<10)
	w := bufio.NewWriterSize(out, 64<<10)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	var buf []byte
	for lineNo := 1; ; lineNo++ {
		line, tooLong, err := readLine(r, buf, MaxBatchLine)
		if err == io.EOF {
			break
		}
		if err != nil {
			w.Flush()
			return fmt.Errorf("%w: reading the input: %v", ErrIO, err)
		}
		buf = line[:0]
		var res batchResult
		if tooLong {
			res = inputFailure(nil, lineNo, fmt.Sprintf("input line is longer than %d bytes", MaxBatchLine))
		} else if isBlank(line) {
			continue
		} else {
			res = answerLine(line, lineNo, cache)
		}
		if err := enc.Encode(&res); err != nil {
			// Only a detail the validator put in an error could fail to
			// encode; answer the line all the same.
			res = batchResult{ID: res.ID, Error: envelopeError(lineNo, "cannot encode the result: "+err.Error())}
			if err := enc.Encode(&res); err != nil {
				return fmt.Errorf("%w: writing the output: %v", ErrIO, err)
			}
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("%w: writing the output: %v", ErrIO, err)
	}
	return nil
}

// readLine returns the next line without its "\n". A line longer than max
// is read to its end but not kept: tooLong reports it. buf is reused.
func readLine(r *bufio.Reader, buf []byte, max int) (line []byte, tooLong bool, err error) {
	line = buf[:0]
	read := 0
	for {
		chunk, err := r.ReadSlice('\n')
		read += len(chunk)
		content := chunk
		if n := len(content); n > 0 && content[n-1] == '\n' {
			content = content[:n-1]
		}
		if !tooLong {
			if len(line)+len(content) > max {
				tooLong = true
				line = line[:0]
			} else {
				line = append(line, content...)
			}
		}
		switch {
		case err == nil:
			return line, tooLong, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF && read > 0:
			return line, tooLong, nil // a last line without "\n"
		default:
			return line, tooLong, err
		}
	}
}

func isBlank(line []byte) bool {
	for _, c := range line {
		if c != ' ' && c != '\t' && c != '\r' {
			return false
		}
	}
	return true
}

// batchRequest is a decoded envelope.
type batchRequest struct {
	id        json.RawMessage
	schema    []byte
	arguments []byte
}

// answerLine gives the verdict for one non-blank input line.
func answerLine(line []byte, lineNo int, cache *Cache) batchResult {
	req, res, ok := parseRequest(line, lineNo)
	if !ok {
		return res
	}
	schema, err := cache.get(req.schema)
	if err == nil {
		err = schema.ValidateJSON(req.arguments)
	}
	if err == nil {
		return batchResult{ID: req.id, OK: true}
	}
	e, convErr := SchemaError(err)
	if convErr != nil {
		return inputFailure(req.id, lineNo, convErr.Error())
	}
	return batchResult{ID: req.id, Error: Wire(e)}
}

// parseRequest takes an envelope apart. On failure it returns the input
// error line to write, echoing the id when it could be read unambiguously.
func parseRequest(line []byte, lineNo int) (batchRequest, batchResult, bool) {
	var req batchRequest
	members, err := jsonstrict.Members(line, envelopeOpts)
	if err != nil {
		msg := "input line is not a valid JSON object: " + err.Error()
		if errors.Is(err, jsonstrict.ErrKind) {
			msg = "input line is not a JSON object"
		}
		return req, inputFailure(nil, lineNo, msg), false
	}
	seen := map[string]json.RawMessage{}
	var problem string
	for _, m := range members {
		if _, dup := seen[m.Name]; dup {
			if problem == "" {
				problem = fmt.Sprintf("duplicate member %q", m.Name)
			}
			continue
		}
		seen[m.Name] = m.Raw
		switch m.Name {
		case "id", "schema", "schema_text", "arguments", "arguments_text":
		default:
			if problem == "" {
				problem = fmt.Sprintf("unknown member %q (expected id, schema or schema_text, arguments or arguments_text)", m.Name)
			}
		}
	}
	if raw, ok := seen["id"]; ok && !isDuplicated(members, "id") {
		if err := jsonstrict.Valid(raw, &jsonstrict.Options{MaxBytes: MaxBatchLine}); err != nil {
			return req, inputFailure(nil, lineNo, "id is not strict JSON: "+err.Error()), false
		}
		req.id = raw
	}
	if problem != "" {
		return req, inputFailure(req.id, lineNo, problem), false
	}
	if req.schema, problem = pickDocument(seen, "schema", "schema_text"); problem != "" {
		return req, inputFailure(req.id, lineNo, problem), false
	}
	if req.arguments, problem = pickDocument(seen, "arguments", "arguments_text"); problem != "" {
		return req, inputFailure(req.id, lineNo, problem), false
	}
	return req, batchResult{}, true
}

func isDuplicated(members []jsonstrict.Member, name string) bool {
	n := 0
	for _, m := range members {
		if m.Name == name {
			n++
		}
	}
	return n > 1
}

// pickDocument returns the document given either as raw JSON (member raw)
// or as text in a JSON string (member text): exactly one must be present.
func pickDocument(seen map[string]json.RawMessage, raw, text string) ([]byte, string) {
	r, hasRaw := seen[raw]
	t, hasText := seen[text]
	switch {
	case hasRaw && hasText:
		return nil, fmt.Sprintf("both %q and %q are present; give exactly one", raw, text)
	case hasRaw:
		return r, ""
	case hasText:
		// Strict decoding: a text carried with invalid UTF-8 or a lone
		// surrogate would otherwise be silently altered before validation.
		v, err := jsonstrict.Decode(t, &jsonstrict.Options{MaxBytes: MaxBatchLine})
		if err != nil {
			return nil, fmt.Sprintf("%q is not a strict JSON string: %v", text, err)
		}
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Sprintf("%q must be a JSON string holding the document's text", text)
		}
		return []byte(s), ""
	}
	return nil, fmt.Sprintf("neither %q nor %q is present; give exactly one", raw, text)
}

// inputFailure is the answer to a line whose envelope is wrong.
func inputFailure(id json.RawMessage, lineNo int, msg string) batchResult {
	return batchResult{ID: id, Error: envelopeError(lineNo, msg)}
}

func envelopeError(lineNo int, msg string) *inputschema.Error {
	return &inputschema.Error{
		Class:   inputschema.ClassValidation,
		Stage:   StageInput,
		Message: msg,
		Details: map[string]any{"line": lineNo},
	}
}

// Cache compiles each distinct schema text once. It is keyed by the exact
// bytes, keeps failures as well as schemas, and forgets the least recently
// used entry past its bounds (Options.CacheEntries, Options.CacheBytes). It
// is not safe for concurrent use: one batch run owns it.
type Cache struct {
	maxEntries int
	maxBytes   int
	bytes      int
	compile    func([]byte) (*inputschema.Schema, error)
	entries    map[string]*list.Element
	order      *list.List // front: most recently used
}

type cacheEntry struct {
	key    string
	schema *inputschema.Schema
	err    error
}

// NewCache makes a cache. compile nil means inputschema.Compile under
// opts.Limits (tests inject a counting compile).
func NewCache(opts *Options, compile func([]byte) (*inputschema.Schema, error)) *Cache {
	o := opts.orDefault()
	if compile == nil {
		copts := &inputschema.CompileOptions{Limits: o.Limits}
		compile = func(data []byte) (*inputschema.Schema, error) { return inputschema.Compile(data, copts) }
	}
	return &Cache{
		maxEntries: o.CacheEntries,
		maxBytes:   o.CacheBytes,
		compile:    compile,
		entries:    map[string]*list.Element{},
		order:      list.New(),
	}
}

// get returns the compiled schema for text, or its compile error.
func (c *Cache) get(text []byte) (*inputschema.Schema, error) {
	if el, ok := c.entries[string(text)]; ok {
		c.order.MoveToFront(el)
		e := el.Value.(*cacheEntry)
		return e.schema, e.err
	}
	schema, err := c.compile(text)
	if len(text) > c.maxBytes {
		return schema, err // too big to keep
	}
	e := &cacheEntry{key: string(text), schema: schema, err: err}
	c.entries[e.key] = c.order.PushFront(e)
	c.bytes += len(e.key)
	for c.order.Len() > c.maxEntries || c.bytes > c.maxBytes {
		oldest := c.order.Back()
		old := oldest.Value.(*cacheEntry)
		c.order.Remove(oldest)
		delete(c.entries, old.key)
		c.bytes -= len(old.key)
	}
	return schema, err
}

// Len is the number of cached schema texts.
func (c *Cache) Len() int { return c.order.Len() }
