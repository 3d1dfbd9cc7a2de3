package bench

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	santhosh "github.com/santhosh-tekuri/jsonschema/v6"
)

// TestFixtures checks that every implementation accepts every fixture (a
// benchmark of a rejected call would time the error path) and rejects a
// broken variant of it (so no implementation is timed ignoring the schema).
func TestFixtures(t *testing.T) {
	broken := map[string][]string{
		"read": {
			`{"offset":1}`,
			`{"path":"x","offset":0}`,
			`{"path":"x","limit":1.5}`,
			`{"path":"x","mode":"r"}`,
			`{"path":7}`,
		},
		"ask_user_question": {
			`{"question":"q","options":[{"value":"v"}]}`,
			`{"question":"q","options":["a",5]}`,
			`{"question":"q","timeout_ms":999}`,
			`{"question":"q","allow_freeform":"yes"}`,
			`{"question":"q","extra":true}`,
		},
	}
	for _, f := range Fixtures() {
		if f.Name == "memory1000" {
			n := len(f.Args)
			t.Logf("memory1000 arguments: %d bytes", n)
			if n < 80<<10 || n > 130<<10 {
				t.Errorf("memory1000 arguments are %d bytes, want 80-130 KiB", n)
			}
			// Break the last entity only, so a validator must walk the whole array.
			last := bytes.LastIndex(f.Args, []byte(`"terse"`))
			withNumber := string(f.Args[:last]) + "7" + string(f.Args[last+len(`"terse"`):])
			lastType := bytes.LastIndex(f.Args, []byte(`"entityType"`))
			withExtra := string(f.Args[:lastType]) + `"extra":1,` + string(f.Args[lastType:])
			broken[f.Name] = []string{withNumber, withExtra, `{"entities":[{"name":"n","entityType":"t"}]}`, `{}`}
		}
		if !json.Valid(f.Args) {
			t.Fatalf("%s: arguments are not valid JSON", f.Name)
		}

		bp := mustBackplane(t, f)
		sa := mustSanthosh(t, f)
		gg := mustGoogle(t, f)
		check := func(args []byte, wantValid bool) {
			t.Helper()
			label := string(args)
			if len(label) > 120 {
				label = label[:60] + "..." + label[len(label)-60:]
			}
			verdict := func(impl string, err error) {
				t.Helper()
				if (err == nil) != wantValid {
					t.Errorf("%s: %s on %s: got err=%v, want valid=%v", f.Name, impl, label, err, wantValid)
				}
			}
			verdict("backplane ValidateJSON", bp.ValidateJSON(args))
			decoded, err := decodeUseNumber(args)
			if err != nil {
				t.Fatal(err)
			}
			verdict("backplane Validate", bp.Validate(decoded))
			sv, err := santhosh.UnmarshalJSON(bytes.NewReader(args))
			if err != nil {
				t.Fatal(err)
			}
			verdict("santhosh", sa.Validate(sv))
			var gv any
			if err := json.Unmarshal(args, &gv); err != nil {
				t.Fatal(err)
			}
			verdict("google", gg.Validate(gv))
		}
		check(f.Args, true)
		if len(broken[f.Name]) == 0 {
			t.Fatalf("%s: no broken variants", f.Name)
		}
		for _, b := range broken[f.Name] {
			check([]byte(b), false)
		}
	}
}

// TestZeroAllocs holds the product targets: validating decoded arguments
// allocates nothing, and validating JSON bytes allocates nothing once warm
// (testing.AllocsPerRun runs the function once before measuring).
func TestZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race: the race detector makes sync.Pool drop items at random; scripts/test runs this module without -race")
	}
	if testing.CoverMode() != "" {
		t.Skip("coverage instrumentation changes allocation counts")
	}
	for _, f := range Fixtures() {
		t.Run(f.Name, func(t *testing.T) {
			s := mustBackplane(t, f)
			args, err := decodeUseNumber(f.Args)
			if err != nil {
				t.Fatal(err)
			}
			runs := 100
			if strings.HasPrefix(f.Name, "memory") {
				runs = 10
			}
			var validateErr, jsonErr error
			decoded := testing.AllocsPerRun(runs, func() { validateErr = s.Validate(args) })
			if validateErr != nil {
				t.Fatalf("Validate rejected the fixture: %v", validateErr)
			}
			if decoded != 0 {
				t.Errorf("Validate on decoded arguments: %v allocs per call, want 0", decoded)
			}
			raw := testing.AllocsPerRun(runs, func() { jsonErr = s.ValidateJSON(f.Args) })
			if jsonErr != nil {
				t.Fatalf("ValidateJSON rejected the fixture: %v", jsonErr)
			}
			if raw != 0 {
				t.Errorf("ValidateJSON on bytes: %v allocs per call after warm-up, want 0", raw)
			}
		})
	}
}
