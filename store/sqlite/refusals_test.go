package sqlite

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/store"
)

// The refusals table keeps at most maxRefusals rows: the oldest recorded go.
func TestRefusalsCapped(t *testing.T) {
	old := maxRefusals
	maxRefusals = 5
	t.Cleanup(func() { maxRefusals = old })
	s := openDir(t, t.TempDir())
	ctx := context.Background()
	base := time.Now().Truncate(time.Millisecond)
	for i := range 3 {
		var batch []store.Refusal
		for j := range 3 {
			n := i*3 + j
			batch = append(batch, store.Refusal{CallID: fmt.Sprintf("call_%02d", n), Caller: "a", Tool: "t", Class: "forbidden", At: base.Add(time.Duration(n) * time.Second)})
		}
		if err := s.RecordRefusals(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	rs, err := s.ListRefusals(ctx, store.RefusalFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 5 || rs[0].CallID != "call_08" || rs[4].CallID != "call_04" {
		t.Errorf("after 9 refusals with a cap of 5: %d kept, newest %v, oldest %v", len(rs), rs[0].CallID, rs[len(rs)-1].CallID)
	}
}
