package storetest

import (
	"errors"

	"github.com/agentbackplane/backplane/store"
)

func testPinFirstSight(f *fixture) {
	if _, err := f.s.GetPin(f.ctx, "up.echo"); !errors.Is(err, store.ErrNotFound) {
		f.t.Fatalf("GetPin of an unseen tool: %v, want ErrNotFound", err)
	}
	p, err := f.s.SeePin(f.ctx, "up.echo", "h1", f.base)
	if err != nil {
		f.t.Fatal(err)
	}
	if p.AcceptedHash != "h1" || p.SeenHash != "h1" || p.Held() || !p.FirstSeen.Equal(f.base) {
		f.t.Fatalf("first sight: %+v, want h1 accepted and seen at %v", p, f.base)
	}
	// Seeing the same definition again changes nothing.
	p, err = f.s.SeePin(f.ctx, "up.echo", "h1", f.base.Add(hour))
	if err != nil || p.Held() || !p.FirstSeen.Equal(f.base) {
		f.t.Fatalf("second sight of the same hash: %+v, %v", p, err)
	}
	if err := f.s.AcceptPin(f.ctx, "up.none", "h", "ops", f.base); !errors.Is(err, store.ErrNotFound) {
		f.t.Fatalf("AcceptPin of an unseen tool: %v, want ErrNotFound", err)
	}
}

func testPinChangeHeld(f *fixture) {
	if _, err := f.s.SeePin(f.ctx, "up.echo", "h1", f.base); err != nil {
		f.t.Fatal(err)
	}
	p, err := f.s.SeePin(f.ctx, "up.echo", "h2", f.base.Add(ms))
	if err != nil {
		f.t.Fatal(err)
	}
	if !p.Held() || p.AcceptedHash != "h1" || p.SeenHash != "h2" {
		f.t.Fatalf("after a change: %+v, want h1 accepted, h2 seen (held)", p)
	}
	got, err := f.s.GetPin(f.ctx, "up.echo")
	if err != nil || *got != *p {
		f.t.Fatalf("GetPin = %+v, %v; want %+v", got, err, p)
	}
	if err := f.s.AcceptPin(f.ctx, "up.echo", "h2", "ops", f.base.Add(2*ms)); err != nil {
		f.t.Fatal(err)
	}
	got, err = f.s.GetPin(f.ctx, "up.echo")
	if err != nil || got.Held() || got.AcceptedHash != "h2" || got.AcceptedBy != "ops" {
		f.t.Fatalf("after accept: %+v, %v", got, err)
	}
	// A change back to the old definition is a change too.
	if p, _ := f.s.SeePin(f.ctx, "up.echo", "h1", f.base.Add(3*ms)); p == nil || !p.Held() {
		f.t.Fatalf("a return to an earlier definition must be held: %+v", p)
	}
	pins, err := f.s.ListPins(f.ctx)
	if err != nil || len(pins) != 1 || pins[0].Tool != "up.echo" {
		f.t.Fatalf("ListPins = %+v, %v", pins, err)
	}
}

func testPinAcceptOtherHash(f *fixture) {
	f.s.SeePin(f.ctx, "up.echo", "h1", f.base)
	f.s.SeePin(f.ctx, "up.echo", "h2", f.base.Add(ms))
	// The operator reviewed h2 but the server has since moved to h3.
	f.s.SeePin(f.ctx, "up.echo", "h3", f.base.Add(2*ms))
	if err := f.s.AcceptPin(f.ctx, "up.echo", "h2", "ops", f.base.Add(3*ms)); !errors.Is(err, store.ErrPinChanged) {
		f.t.Fatalf("AcceptPin of a stale hash: %v, want ErrPinChanged", err)
	}
	if p, _ := f.s.GetPin(f.ctx, "up.echo"); p == nil || p.AcceptedHash != "h1" {
		f.t.Fatalf("a refused accept must change nothing: %+v", p)
	}
}
