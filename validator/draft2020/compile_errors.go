package draft2020

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/agentbackplane/backplane/inputschema"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// knownDrafts are the metaschema URLs (scheme and empty fragment stripped)
// whose drafts the library implements and embeds. The undated
// json-schema.org/schema is left out on purpose: it means "the latest",
// which changes under a schema that names it.
var knownDrafts = map[string]bool{
	"json-schema.org/draft/2020-12/schema": true,
	"json-schema.org/draft/2019-09/schema": true,
	"json-schema.org/draft-07/schema":      true,
	"json-schema.org/draft-06/schema":      true,
	"json-schema.org/draft-04/schema":      true,
}

func knownDraft(s string) bool {
	s = strings.TrimSuffix(s, "#")
	rest, ok := strings.CutPrefix(s, "https://")
	if !ok {
		rest, ok = strings.CutPrefix(s, "http://")
	}
	return ok && knownDrafts[rest]
}

func isDraft4(root map[string]any) bool {
	s, _ := root["$schema"].(string)
	return strings.HasSuffix(strings.TrimSuffix(s, "#"), "json-schema.org/draft-04/schema")
}

// checkDialect refuses a root $schema that names no draft the library
// implements, before the compiler would ask the loader for it. A $schema
// that is not a string is left to the compiler (the metaschema refuses it).
func checkDialect(root map[string]any) *inputschema.Error {
	s, ok := root["$schema"].(string)
	if !ok || knownDraft(s) {
		return nil
	}
	return schemaErr(inputschema.ClassUnsupported, "/$schema", "$schema",
		fmt.Sprintf("unsupported $schema %q: this validator knows the metaschemas of drafts 2020-12, 2019-09, 07, 06 and 04 and loads no other", s),
		map[string]any{"schema": s})
}

// checkOpaqueBases refuses a relative reference (or a relative $id) whose
// base URI is opaque (a urn:, tag: or mailto: $id). Such a reference has no
// meaning in the document, yet the library resolves it to the base document
// itself (its workaround for golang/go#66084 keeps the base's opaque part):
// {"$id":"urn:x:y","properties":{"a":{"$ref":"other.json"}}} would compile
// with "a" checked against the root schema, a silently different schema.
// Found while testing this package; refused here before the library runs.
func checkOpaqueBases(doc any, draft4 bool) *inputschema.Error {
	base, _ := url.Parse(baseURL)
	var bad *inputschema.Error
	var walk func(x any, base *url.URL, path []string)
	walk = func(x any, base *url.URL, path []string) {
		if bad != nil {
			return
		}
		switch x := x.(type) {
		case map[string]any:
			idKeys := []string{"$id"}
			if draft4 {
				idKeys = []string{"id"}
			}
			for _, k := range idKeys {
				id, ok := x[k].(string)
				if !ok {
					continue
				}
				u, err := url.Parse(id)
				if err != nil {
					continue
				}
				if relativePart(u) && base.Opaque != "" {
					bad = opaqueError(k, id, base, append(path, k))
					return
				}
				base = base.ResolveReference(u)
			}
			for _, kw := range []string{"$ref", "$dynamicRef", "$recursiveRef"} {
				v, ok := x[kw].(string)
				if !ok {
					continue
				}
				if u, err := url.Parse(v); err == nil && relativePart(u) && base.Opaque != "" {
					bad = opaqueError(kw, v, base, append(path, kw))
					return
				}
			}
			keys := make([]string, 0, len(x))
			for k := range x {
				if !notSchemas[k] {
					keys = append(keys, k)
				}
			}
			slices.Sort(keys)
			for _, k := range keys {
				walk(x[k], base, append(path, k))
			}
		case []any:
			for i, v := range x {
				walk(v, base, append(path, fmt.Sprint(i)))
			}
		}
	}
	walk(doc, base, nil)
	return bad
}

// relativePart reports whether a reference has a part to resolve beyond a
// fragment: no scheme, and a path or an authority.
func relativePart(u *url.URL) bool {
	return u.Scheme == "" && (u.Path != "" || u.Host != "" || u.Opaque != "")
}

func opaqueError(keyword, value string, base *url.URL, path []string) *inputschema.Error {
	b := *base
	b.Fragment, b.RawFragment = "", ""
	return schemaErr(inputschema.ClassUnsupported, pointerOf(path), keyword,
		fmt.Sprintf("relative reference %q cannot be resolved against the non-hierarchical base URI %q", value, b.String()),
		map[string]any{"reference": value, "base": b.String()})
}

// compileError converts a library compile error: everything is
// unsupported_capability at stage schema (fail closed), with the keyword and
// pointer found where the error says where.
func compileError(doc any, err error) *inputschema.Error {
	var load *jsonschema.LoadURLError
	if errors.As(err, &load) {
		return loadError(doc, load)
	}
	var sve *jsonschema.SchemaValidationError
	var ve *jsonschema.ValidationError
	if errors.As(err, &sve) && errors.As(sve.Err, &ve) {
		return metaschemaError(ve)
	}
	e := schemaErr(inputschema.ClassUnsupported, "", "",
		"the draft 2020-12 validator cannot compile this schema: "+internalURLs(err.Error()), nil)
	var (
		regex  *jsonschema.InvalidRegexError
		ptr    *jsonschema.JSONPointerNotFoundError
		anchor *jsonschema.AnchorNotFoundError
	)
	switch {
	case errors.As(err, &regex):
		e.Keyword, e.SchemaPointer = "pattern", fragmentOf(regex.URL)
		e.Details["pattern"] = regex.Regex
	case errors.As(err, &ptr):
		e.Keyword = "$ref"
		e.Details["reference"] = internalURLs(ptr.URL)
	case errors.As(err, &anchor):
		e.Keyword = "$ref"
		e.Details["reference"] = internalURLs(anchor.Reference)
	}
	return e
}

// internalURLs shows references into the schema document as the fragments
// they are, not under the compiler's private base URL.
func internalURLs(s string) string { return strings.ReplaceAll(s, baseURL, "") }

// fragmentOf returns the JSON pointer of a URL into the schema document, or
// "" for any other URL.
func fragmentOf(u string) string {
	frag, ok := strings.CutPrefix(u, baseURL+"#")
	if !ok {
		return ""
	}
	if p, err := url.PathUnescape(frag); err == nil {
		return p
	}
	return frag
}

// loadError reports a reference the loader refused.
func loadError(doc any, load *jsonschema.LoadURLError) *inputschema.Error {
	target := load.URL
	ref, found := findReference(doc, target)
	details := map[string]any{"url": internalURLs(target)}
	if !found {
		ref = reference{keyword: "$ref"}
	} else {
		details["reference"] = ref.value
	}
	if ref.keyword == "$schema" {
		details["schema"] = ref.value
		return schemaErr(inputschema.ClassUnsupported, ref.pointer, "$schema",
			fmt.Sprintf("unsupported $schema %q: this validator knows the metaschemas of drafts 2020-12, 2019-09, 07, 06 and 04 and loads no other", ref.value),
			details)
	}
	what := fmt.Sprintf("%q", internalURLs(target))
	if found && ref.value != internalURLs(target) {
		what = fmt.Sprintf("%q (resolved to %q)", ref.value, internalURLs(target))
	}
	return schemaErr(inputschema.ClassUnsupported, ref.pointer, ref.keyword,
		"external reference "+what+" is not supported: this validator resolves references only within the schema document and loads no file or URL",
		details)
}

type reference struct {
	keyword, value, pointer string
}

// notSchemas are keywords whose values are data, never searched for
// references.
var notSchemas = map[string]bool{"const": true, "enum": true, "default": true, "examples": true}

// findReference finds the reference keyword of the document that resolves
// to target, to name it in the error. Resolution follows $id as the
// compiler does for ordinary documents; it only labels an error, the
// refusal itself does not depend on it.
func findReference(doc any, target string) (reference, bool) {
	base, _ := url.Parse(baseURL)
	var found reference
	ok := false
	var walk func(x any, base *url.URL, path []string)
	walk = func(x any, base *url.URL, path []string) {
		if ok {
			return
		}
		switch x := x.(type) {
		case map[string]any:
			if id, isStr := x["$id"].(string); isStr {
				if u, err := url.Parse(id); err == nil {
					base = base.ResolveReference(u)
				}
			}
			for _, kw := range []string{"$schema", "$ref", "$dynamicRef", "$recursiveRef"} {
				v, isStr := x[kw].(string)
				if !isStr {
					continue
				}
				u, err := url.Parse(v)
				if err != nil {
					continue
				}
				r := *base.ResolveReference(u)
				r.Fragment, r.RawFragment = "", ""
				if r.String() == target {
					found = reference{keyword: kw, value: v, pointer: pointerOf(append(path, kw))}
					ok = true
					return
				}
			}
			keys := make([]string, 0, len(x))
			for k := range x {
				if !notSchemas[k] {
					keys = append(keys, k)
				}
			}
			slices.Sort(keys)
			for _, k := range keys {
				walk(x[k], base, append(path, k))
			}
		case []any:
			for i, v := range x {
				walk(v, base, append(path, fmt.Sprint(i)))
			}
		}
	}
	walk(doc, base, nil)
	return found, ok
}

// metaschemaError reports a schema the metaschema of its draft refuses: the
// first failure, by location in the schema document.
func metaschemaError(ve *jsonschema.ValidationError) *inputschema.Error {
	type leaf struct {
		loc []string
		msg string
	}
	var leaves []leaf
	var collect func(e *jsonschema.ValidationError)
	collect = func(e *jsonschema.ValidationError) {
		if k, ok := e.ErrorKind.(*kind.PropertyNames); ok {
			// A bad member name (a patternProperties key that is no
			// regular expression): its causes are located relative to the
			// name, so the name's member is the location.
			msg := fmt.Sprintf("invalid name %q", k.Property)
			if len(e.Causes) > 0 {
				var first []string
				for _, c := range e.Causes {
					first = append(first, causeMessage(c))
				}
				msg += ": " + first[0]
			}
			leaves = append(leaves, leaf{append(slices.Clone(e.InstanceLocation), k.Property), msg})
			return
		}
		if len(e.Causes) == 0 {
			leaves = append(leaves, leaf{e.InstanceLocation, kindMessage(e.ErrorKind)})
			return
		}
		for _, c := range e.Causes {
			collect(c)
		}
	}
	collect(ve)
	slices.SortStableFunc(leaves, func(a, b leaf) int { return compareTokens(a.loc, b.loc) })
	first := leaves[0]
	ptr := pointerOf(first.loc)
	return schemaErr(inputschema.ClassUnsupported, ptr, keywordAt(first.loc),
		fmt.Sprintf("the schema is not valid against its metaschema at %q: %s", ptr, internalURLs(first.msg)),
		map[string]any{"violations": len(leaves)})
}

// causeMessage is the message of the first leaf under e.
func causeMessage(e *jsonschema.ValidationError) string {
	for len(e.Causes) > 0 {
		e = e.Causes[0]
	}
	return kindMessage(e.ErrorKind)
}

// containers are keywords whose value maps names (or indexes) to schemas:
// the token after them is not a keyword.
var containers = map[string]bool{
	"properties": true, "patternProperties": true, "$defs": true, "definitions": true,
	"dependentSchemas": true, "dependencies": true, "allOf": true, "anyOf": true, "oneOf": true,
	"prefixItems": true, "items": true, "dependentRequired": true,
}

// keywordAt guesses the keyword a location in a schema document is under:
// the last token that is not a member of a name-to-schema map or an index.
func keywordAt(tokens []string) string {
	for i := len(tokens) - 1; i >= 0; i-- {
		t := tokens[i]
		if isIndex(t) {
			continue
		}
		if i > 0 && containers[tokens[i-1]] && tokens[i-1] != "items" {
			return tokens[i-1]
		}
		return t
	}
	return ""
}

// kindMessage is the library's English message for one error kind, without
// the location prefix its Error method adds.
func kindMessage(k jsonschema.ErrorKind) string {
	s := (&jsonschema.ValidationError{ErrorKind: k}).Error()
	return strings.TrimPrefix(s, "at '': ")
}
