package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/tool"
)

func TestAskWithoutChannelIsUnsupported(t *testing.T) {
	f := newFixture(t, nil)
	e := mustFail(t, f.set, "ask_user_question", args("question", "Proceed?"), tool.ClassUnsupported)
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
	mustFail(t, f.set, "ask_user_question", q, tool.ClassCancelled)

	answer = func(context.Context, Question) (Answer, error) {
		return Answer{}, fmt.Errorf("client lacks elicitation: %w", ErrNoChannel)
	}
	mustFail(t, f.set, "ask_user_question", q, tool.ClassUnsupported)

	// No answer within timeout_ms: the Asker sees the deadline.
	answer = func(ctx context.Context, q Question) (Answer, error) {
		<-ctx.Done()
		return Answer{}, ctx.Err()
	}
	start := time.Now()
	e := mustFail(t, f.set, "ask_user_question", q, tool.ClassTimeout)
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
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, tool.ErrNotStarted) {
		t.Errorf("cancelled while open: %v", err)
	}

	// An answer that is none of the options, not marked free-form.
	answer = func(context.Context, Question) (Answer, error) { return Answer{Value: "maybe"}, nil }
	_, err = call(t, f.set, "ask_user_question", q)
	if !errors.Is(err, tool.ErrMalformedResult) {
		t.Errorf("an answer outside the options: %v", err)
	}
	answer = func(context.Context, Question) (Answer, error) { return Answer{Value: "maybe", Freeform: true}, nil }
	_, err = call(t, f.set, "ask_user_question", q)
	if !errors.Is(err, tool.ErrMalformedResult) {
		t.Errorf("a free-form answer where none is allowed: %v", err)
	}

	// Any other failure of the channel: unknown whether it was seen.
	answer = func(context.Context, Question) (Answer, error) { return Answer{}, errors.New("connection reset") }
	_, err = call(t, f.set, "ask_user_question", q)
	if err == nil || errors.Is(err, tool.ErrNotStarted) {
		t.Errorf("a channel failure: %v", err)
	}
}

// answering is an Asker that picks the option whose value is value, and
// counts its questions.
type answering struct {
	value string
	mu    sync.Mutex
	asked int
}

func (a *answering) Ask(_ context.Context, q Question) (Answer, error) {
	a.mu.Lock()
	a.asked++
	a.mu.Unlock()
	return Answer{Value: a.value}, nil
}

func (a *answering) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.asked
}

// invokeAsking runs a call that carries a as its interaction channel
// (tool.Call.Asker), as the gateway hands it on.
func invokeAsking(s *Set, a Asker, q json.RawMessage) (*tool.Result, error) {
	t, ok := s.Tool("ask_user_question")
	if !ok {
		return nil, errors.New("no ask_user_question")
	}
	return t.Backend.Invoke(context.Background(), &tool.Call{
		CallID: "call_test", Tool: "ask_user_question", Caller: "tester", Arguments: q, Asker: a})
}

func TestCallCarriesItsAsker(t *testing.T) {
	q := args("question", "Which?", "options", []string{"own", "call-1", "call-2"})
	answerOf := func(t *testing.T, s *Set, a Asker) askResult {
		t.Helper()
		res, err := invokeAsking(s, a, q)
		if err != nil || res.IsError {
			t.Fatalf("ask: %v %s", err, resultText(res))
		}
		var r askResult
		if err := json.Unmarshal(res.Content, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}

	// A Set without a channel of its own asks the call's.
	bare := newFixture(t, nil)
	callAsker := &answering{value: "call-1"}
	if r := answerOf(t, bare.set, callAsker); r.Answer != "call-1" {
		t.Errorf("answer %+v, want the call asker's call-1", r)
	}
	if callAsker.count() != 1 {
		t.Errorf("the call's asker was asked %d times", callAsker.count())
	}
	// Without one in the call, it still has no channel.
	mustFail(t, bare.set, "ask_user_question", q, tool.ClassUnsupported)

	// The call's Asker is preferred to the Set's own; none leaves the Set's.
	own := &answering{value: "own"}
	f := newFixture(t, &Options{Asker: own})
	if r := answerOf(t, f.set, callAsker); r.Answer != "call-1" {
		t.Errorf("answer %+v, want the call asker's", r)
	}
	if own.count() != 0 {
		t.Errorf("the Set's asker was asked %d times while the call carried one", own.count())
	}
	if r := answerOf(t, f.set, nil); r.Answer != "own" || own.count() != 1 {
		t.Errorf("a call without an asker: answer %+v, Set's asker asked %d times", r, own.count())
	}

	// Concurrent calls each reach their own channel.
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := []string{"call-1", "call-2"}[i%2]
			res, err := invokeAsking(f.set, &answering{value: want}, q)
			if err != nil || res.IsError || !strings.Contains(string(res.Content), `"answer":"`+want+`"`) {
				t.Errorf("call %d: %v %s, want answer %s", i, err, resultText(res), want)
			}
		}()
	}
	wg.Wait()
	if own.count() != 1 {
		t.Errorf("the Set's asker was asked by calls carrying their own: %d", own.count())
	}
}

func resultText(r *tool.Result) string {
	if r == nil {
		return "<nil result>"
	}
	return string(r.Content)
}
