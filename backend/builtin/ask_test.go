package builtin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/backend"
	"github.com/agentbackplane/backplane/gateway"
)

func TestAskWithoutChannelIsUnsupported(t *testing.T) {
	f := newFixture(t, nil)
	e := mustFail(t, f.set, "ask_user_question", args("question", "Proceed?"), gateway.ClassUnsupported)
	if !strings.Contains(e.Message, "no interaction channel") {
		t.Errorf("message %q does not say there is no interaction channel", e.Message)
	}
}

// recorder is an Asker that records the question and answers with answer.
type recorder struct {
	mu     sync.Mutex
	got    []Question
	answer func(ctx context.Context, q Question) (Answer, error)
}

func (r *recorder) Ask(ctx context.Context, q Question) (Answer, error) {
	r.mu.Lock()
	r.got = append(r.got, q)
	r.mu.Unlock()
	return r.answer(ctx, q)
}

func TestAskThroughTheChannel(t *testing.T) {
	rec := &recorder{answer: func(ctx context.Context, q Question) (Answer, error) {
		return Answer{Value: q.Options[1].Value}, nil
	}}
	f := newFixture(t, &Options{Asker: rec})
	var r askResult
	mustOK(t, f.set, "ask_user_question", []byte(`{"question":"Which database?","options":["sqlite",{"label":"PostgreSQL","value":"pg","description":"a server"},{"label":"None"}],"placeholder":"type here","timeout_ms":2000}`), &r)
	if r.Answer != "pg" || r.Label != "PostgreSQL" || r.Freeform {
		t.Errorf("answer %+v", r)
	}
	q := rec.got[0]
	want := Question{Question: "Which database?", Options: []Option{
		{Label: "sqlite", Value: "sqlite"},
		{Label: "PostgreSQL", Value: "pg", Description: "a server"},
		{Label: "None", Value: "None"},
	}, Placeholder: "type here", Timeout: 2 * time.Second}
	if fmt.Sprint(q) != fmt.Sprint(want) {
		t.Errorf("question\n%+v\nwant\n%+v", q, want)
	}

	// No options: a free-form answer, allowed whatever allow_freeform says.
	rec.answer = func(ctx context.Context, q Question) (Answer, error) {
		return Answer{Value: "my own words", Freeform: true}, nil
	}
	mustOK(t, f.set, "ask_user_question", args("question", "Anything else?"), &r)
	if r.Answer != "my own words" || !r.Freeform {
		t.Errorf("free-form: %+v", r)
	}
	if q := rec.got[1]; !q.AllowFreeform || q.Timeout != DefaultAskTimeout {
		t.Errorf("question without options: %+v", q)
	}
}

func TestAskOutcomes(t *testing.T) {
	var answer func(ctx context.Context, q Question) (Answer, error)
	f := newFixture(t, &Options{Asker: AskerFunc(func(ctx context.Context, q Question) (Answer, error) { return answer(ctx, q) })})
	q := args("question", "Go on?", "options", []string{"yes", "no"}, "timeout_ms", 1000)

	answer = func(context.Context, Question) (Answer, error) {
		return Answer{}, fmt.Errorf("user pressed escape: %w", ErrDeclined)
	}
	mustFail(t, f.set, "ask_user_question", q, gateway.ClassCancelled)

	answer = func(context.Context, Question) (Answer, error) {
		return Answer{}, fmt.Errorf("client lacks elicitation: %w", ErrNoChannel)
	}
	mustFail(t, f.set, "ask_user_question", q, gateway.ClassUnsupported)

	// No answer within timeout_ms: the Asker sees the deadline.
	answer = func(ctx context.Context, q Question) (Answer, error) {
		<-ctx.Done()
		return Answer{}, ctx.Err()
	}
	start := time.Now()
	e := mustFail(t, f.set, "ask_user_question", q, gateway.ClassTimeout)
	if d := time.Since(start); d < time.Second || d > 4*time.Second {
		t.Errorf("timeout_ms 1000 took %v", d)
	}
	if !strings.Contains(e.Message, "no answer") {
		t.Errorf("%q", e.Message)
	}

	// The call's own end while the question is open: unknown outcome.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := invoke(ctx, f.set, "ask_user_question", args("question", "Go on?"))
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, backend.ErrNotStarted) {
		t.Errorf("cancelled while open: %v", err)
	}

	// An answer that is none of the options, not marked free-form.
	answer = func(context.Context, Question) (Answer, error) { return Answer{Value: "maybe"}, nil }
	_, err = call(t, f.set, "ask_user_question", q)
	if !errors.Is(err, backend.ErrMalformedResult) {
		t.Errorf("an answer outside the options: %v", err)
	}
	answer = func(context.Context, Question) (Answer, error) { return Answer{Value: "maybe", Freeform: true}, nil }
	_, err = call(t, f.set, "ask_user_question", q)
	if !errors.Is(err, backend.ErrMalformedResult) {
		t.Errorf("a free-form answer where none is allowed: %v", err)
	}

	// Any other failure of the channel: unknown whether it was seen.
	answer = func(context.Context, Question) (Answer, error) { return Answer{}, errors.New("connection reset") }
	_, err = call(t, f.set, "ask_user_question", q)
	if err == nil || errors.Is(err, backend.ErrNotStarted) {
		t.Errorf("a channel failure: %v", err)
	}
}
