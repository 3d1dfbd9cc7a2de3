package gateway

import (
	"encoding/json"
	"maps"
	"slices"

	"github.com/agentbackplane/backplane/inputschema"
)

// An answer rebuilt from the journal (a task whose runner died after its
// call settled: TaskView.Orphaned) is to be the one the call gave. Its
// class and message are the settlement's; what its error carried beside
// them is the settlement's ErrorDetail (store.Intent.ErrorDetail):
// settledDetail, written with the settlement and read by settledAnswer.
//
// What deliberately does not survive: what reaches the caller only
// (tool.DetailedError's details, such as an upstream login's
// authorization_url: whoever opens it connects an account for the caller,
// so it is kept out of the journal and the audit, and its flow's state is
// sealed in the store, not recoverable as a URL). The journal keeps the
// names of those details; the rebuilt answer lists them under
// details.withheld, and the call made again gets a fresh login URL. Nor
// an upstream's input requests and their state: the client answers them
// by calling again, which a task's runner does not; the server that asked
// survives (details.server).
type settledDetail struct {
	// Errors are every violation of the error (a refused result's).
	Errors []*inputschema.Error `json:"errors,omitempty"`
	// Details are the error's details but its status (the settlement's).
	Details map[string]any `json:"details,omitempty"`
	// Withheld names the details the caller got that are not kept.
	Withheld []string `json:"withheld,omitempty"`
}

// errorDetail is e's settledDetail as the journal keeps it, nil when e
// carries nothing beyond its class, message and status.
func errorDetail(e *Error) []byte {
	d := settledDetail{Errors: e.Errors}
	for k, v := range e.Details {
		if k == "status" {
			continue
		}
		if d.Details == nil {
			d.Details = map[string]any{}
		}
		d.Details[k] = v
	}
	return encodeDetail(d)
}

// withheldDetail is the settledDetail of an error whose details (a
// tool.DetailedError's) are its caller's only: their names.
func withheldDetail(details map[string]any) []byte {
	return encodeDetail(settledDetail{Withheld: slices.Sorted(maps.Keys(details))})
}

func encodeDetail(d settledDetail) []byte {
	if len(d.Errors) == 0 && len(d.Details) == 0 && len(d.Withheld) == 0 {
		return nil
	}
	b, err := json.Marshal(d)
	if err != nil {
		return nil // a detail not kept: the class and message are
	}
	return b
}

// withDetail adds to e, rebuilt from a settlement, what detail (its
// ErrorDetail) kept of the live error: e then answers as the live one
// did, but for what was withheld. An unreadable detail adds nothing.
func (e *Error) withDetail(detail []byte) *Error {
	if len(detail) == 0 {
		return e
	}
	var d settledDetail
	if json.Unmarshal(detail, &d) != nil {
		return e
	}
	for k, v := range d.Details {
		if _, taken := e.Details[k]; !taken {
			e.Details[k] = v
		}
	}
	if len(d.Withheld) > 0 {
		e.Details["withheld"] = d.Withheld
	}
	if len(d.Errors) > 0 {
		first := d.Errors[0]
		e.Errors = d.Errors
		e.Stage, e.Path, e.Pointer, e.SchemaPointer, e.Keyword = string(first.Stage), first.Path, first.Pointer, first.SchemaPointer, first.Keyword
	}
	return e
}
