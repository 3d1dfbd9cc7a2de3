package bench

import (
	"strings"
	"testing"

	santhosh "github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agentbackplane/backplane/inputschema"
)

// TestFreshValidatorState pins a shape the differential test found: sibling
// objects where the first one's nested object makes the validator's
// per-object scratch space grow mid-walk, on a validator fresh from an empty
// pool. The second sibling must see only its own members. Each case is
// checked on fresh state and again on reused state, against the verdict that
// D14 gives (and that santhosh confirms).
func TestFreshValidatorState(t *testing.T) {
	const nested = `"a":{"type":"object","properties":{"p":{"type":"object","properties":{"x":{"type":"string"},"y":{"type":"string"}}}}}`
	cases := []struct {
		name, schema, args string
		valid              bool
	}{
		{
			name:   "required member of the later sibling is missing",
			schema: `{"properties":{` + nested + `,"b":{"type":"object","properties":{"q":{"type":"object"}},"required":["q"]}}}`,
			args:   `{"a":{"p":{}},"b":{}}`,
			valid:  false,
		},
		{
			name:   "optional member of the later sibling is absent",
			schema: `{"properties":{` + nested + `,"b":{"type":"object","properties":{"q":{"type":"string"}}}}}`,
			args:   `{"a":{"p":{}},"b":{}}`,
			valid:  true,
		},
		{
			name:   "required name without a property schema",
			schema: `{"properties":{` + nested + `,"b":{"type":"object","required":["q"]}}}`,
			args:   `{"a":{"p":{}},"b":{}}`,
			valid:  false,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			peer, err := compileSanthosh([]byte(tc.schema))
			if err != nil {
				t.Fatal(err)
			}
			pv, err := santhosh.UnmarshalJSON(strings.NewReader(tc.args))
			if err != nil {
				t.Fatal(err)
			}
			if got := peer.Validate(pv) == nil; got != tc.valid {
				t.Fatalf("santhosh says valid=%v, the case expects %v: the case is wrong", got, tc.valid)
			}
			s, err := inputschema.Compile([]byte(tc.schema), nil)
			if err != nil {
				t.Fatal(err)
			}
			decoded, err := decodeUseNumber([]byte(tc.args))
			if err != nil {
				t.Fatal(err)
			}
			for _, state := range []string{"fresh", "reused"} {
				if state == "fresh" {
					emptyPools()
				}
				if err := s.ValidateJSON([]byte(tc.args)); (err == nil) != tc.valid {
					t.Errorf("ValidateJSON on %s state: %v, want valid=%v\nschema: %s\nargs:   %s", state, verdict(err), tc.valid, tc.schema, tc.args)
				}
				if state == "fresh" {
					emptyPools()
				}
				if err := s.Validate(decoded); (err == nil) != tc.valid {
					t.Errorf("Validate on %s state: %v, want valid=%v\nschema: %s\nargs:   %s", state, verdict(err), tc.valid, tc.schema, tc.args)
				}
			}
		})
	}
}
