package server

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The requestState of a 2026-07-28 input_required answer passes through
// the client, which must echo it unchanged: it is attacker-controlled
// input. Backplane's names what it stands for (the approval request put to
// the client, or the call whose upstream asked for input, with that
// upstream's own state) and binds it to the exact call (caller, tool,
// definition hash, argument digest) and an expiry, signed with HMAC-SHA256
// under the server's request-state key (Options.RequestStateKey, the same
// on every replica). A state that does not verify, or that names another
// caller, tool, definition or arguments than the retry's, is refused; one
// whose approval was already decided (the decision is taken once, in the
// store) is refused as a replay, and one whose call was already continued
// replays that continuation's outcome (the continuation key, "continues:" and the attempt's id).

// ErrRequestState is the refusal of a requestState that fails verification.
var ErrRequestState = errors.New("server: request state refused")

// stateVersion is the layout of the signed payload.
const stateVersion = 1

// maxRequestStateBytes caps the requestState read: a signed state is a
// few hundred bytes, more with an upstream's own state in it (at most
// maxUpstreamStateBytes, base64 of JSON-escaped text).
const maxRequestStateBytes = 4<<10 + 3*maxUpstreamStateBytes

// maxUpstreamStateBytes caps the upstream's requestState that Backplane
// carries in its own: an upstream with a larger one gets no relay.
const maxUpstreamStateBytes = 16 << 10

// requestState is the signed payload.
type requestState struct {
	V        int    `json:"v"`
	Method   string `json:"m"`           // tools/call
	Approval string `json:"a,omitempty"` // the approval request's id
	// Of an upstream's input requests relayed (relayinput.go): the call
	// (its journal entry) that the retry continues, the upstream server
	// and its own state, the ids of the requests asked, and how many
	// rounds came before.
	Call     string   `json:"k,omitempty"`
	Server   string   `json:"s,omitempty"`
	Upstream string   `json:"u,omitempty"`
	Keys     []string `json:"i,omitempty"`
	Round    int      `json:"r,omitempty"`
	Caller   string   `json:"c"`
	Tool     string   `json:"t"`
	DefHash  string   `json:"d"`
	Digest   string   `json:"g"` // the arguments' digest
	Expires  int64    `json:"e"` // Unix seconds
}

// stateSigner signs and verifies request states under one key.
type stateSigner struct{ key []byte }

// newStateSigner uses key, or a random key of this process when key is
// empty (states then verify only on the process that issued them).
func newStateSigner(key []byte) stateSigner {
	if len(key) == 0 {
		key = make([]byte, 32)
		rand.Read(key)
	}
	return stateSigner{key: append([]byte(nil), key...)}
}

func (s stateSigner) mac(payload []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte("backplane request state\x00"))
	m.Write(payload)
	return m.Sum(nil)
}

// sign returns the opaque requestState for st.
func (s stateSigner) sign(st requestState) string {
	st.V = stateVersion
	payload, _ := json.Marshal(st)
	enc := base64.RawURLEncoding
	return enc.EncodeToString(payload) + "." + enc.EncodeToString(s.mac(payload))
}

// verify returns the payload of a state this server signed, unexpired at
// now; any other is ErrRequestState, saying why.
func (s stateSigner) verify(state string, now time.Time) (requestState, error) {
	var st requestState
	if len(state) > maxRequestStateBytes {
		return st, fmt.Errorf("%w: longer than %d bytes", ErrRequestState, maxRequestStateBytes)
	}
	p64, m64, ok := strings.Cut(state, ".")
	enc := base64.RawURLEncoding
	payload, perr := enc.DecodeString(p64)
	mac, merr := enc.DecodeString(m64)
	if !ok || perr != nil || merr != nil {
		return st, fmt.Errorf("%w: not a state this server issued", ErrRequestState)
	}
	if !hmac.Equal(mac, s.mac(payload)) {
		return st, fmt.Errorf("%w: its signature does not verify (altered, or issued under another key)", ErrRequestState)
	}
	if err := json.Unmarshal(payload, &st); err != nil || st.V != stateVersion {
		return st, fmt.Errorf("%w: unknown layout", ErrRequestState)
	}
	if now.Unix() > st.Expires {
		return st, fmt.Errorf("%w: expired at %s", ErrRequestState, time.Unix(st.Expires, 0).UTC().Format(time.RFC3339))
	}
	return st, nil
}
