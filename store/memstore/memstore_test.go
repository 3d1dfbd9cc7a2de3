package memstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/memstore"
	"github.com/agentbackplane/backplane/store/storetest"
)

// TestConformance holds the reference implementation to the shared store
// contract.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s := memstore.New()
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return s
	})
}

// Each store has its own incarnation.
func TestIncarnationsDiffer(t *testing.T) {
	if a, b := memstore.New().Incarnation(), memstore.New().Incarnation(); a == b || a == "" {
		t.Errorf("two stores share incarnation %q / %q", a, b)
	}
}

// The store keeps at most MaxRefusals refusals: the oldest recorded go.
func TestRefusalsCapped(t *testing.T) {
	t.Cleanup(memstore.SetMaxRefusals(5))
	s := memstore.New()
	ctx := context.Background()
	base := time.Now()
	for n := range 9 {
		if err := s.RecordRefusals(ctx, []store.Refusal{{CallID: fmt.Sprintf("call_%02d", n), Caller: "a", Tool: "t", Class: "forbidden", At: base.Add(time.Duration(n) * time.Second)}}); err != nil {
			t.Fatal(err)
		}
	}
	rs, err := s.ListRefusals(ctx, store.RefusalFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 5 || rs[0].CallID != "call_08" || rs[4].CallID != "call_04" {
		t.Errorf("after 9 refusals with a cap of 5: %d kept: %+v", len(rs), rs)
	}
	// A call id that was dropped may be recorded again.
	if err := s.RecordRefusals(ctx, []store.Refusal{{CallID: "call_00", At: base.Add(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	if rs, _ := s.ListRefusals(ctx, store.RefusalFilter{}); rs[0].CallID != "call_00" {
		t.Errorf("a dropped call id recorded again: newest is %s", rs[0].CallID)
	}
}
