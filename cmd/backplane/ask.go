package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/agentbackplane/backplane/backend/builtin"
	"github.com/agentbackplane/backplane/internal/termtext"
)

// terminalAsker is ask_user_question's interaction channel for "backplane
// call" run from a terminal: the question goes to the terminal, the answer
// comes back from it. It is used only when the process has a controlling
// terminal (/dev/tty opens); stdin may carry the arguments.
type terminalAsker struct {
	in  io.Reader
	out io.Writer
}

// openTerminalAsker returns an asker on /dev/tty, or nil when there is no
// terminal (a CI run, a pipeline): the tool then says there is no channel.
func openTerminalAsker() (builtin.Asker, func()) {
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return nil, func() {}
	}
	return &terminalAsker{in: tty, out: tty}, func() { tty.Close() }
}

// Ask prints the question and its numbered options, and reads a line: a
// number picks an option, other text is a free-form answer where allowed,
// end of input declines.
func (a *terminalAsker) Ask(ctx context.Context, q builtin.Question) (builtin.Answer, error) {
	type reply struct {
		ans builtin.Answer
		err error
	}
	done := make(chan reply, 1)
	go func() {
		ans, err := a.dialogue(q)
		done <- reply{ans, err}
	}()
	select {
	case r := <-done:
		return r.ans, r.err
	case <-ctx.Done():
		fmt.Fprintln(a.out, "\n(no answer in time)")
		return builtin.Answer{}, ctx.Err()
	}
}

func (a *terminalAsker) dialogue(q builtin.Question) (builtin.Answer, error) {
	fmt.Fprintf(a.out, "\nThe agent asks: %s\n", termtext.Block(q.Question))
	for i, o := range q.Options {
		fmt.Fprintf(a.out, "  %d) %s", i+1, termtext.Line(o.Label))
		if o.Description != "" {
			fmt.Fprintf(a.out, " (%s)", termtext.Line(o.Description))
		}
		fmt.Fprintln(a.out)
	}
	lines := bufio.NewScanner(a.in)
	for {
		switch {
		case len(q.Options) > 0 && q.AllowFreeform:
			fmt.Fprintf(a.out, "Pick 1-%d or type an answer: ", len(q.Options))
		case len(q.Options) > 0:
			fmt.Fprintf(a.out, "Pick 1-%d: ", len(q.Options))
		default:
			fmt.Fprint(a.out, "Your answer: ")
		}
		if !lines.Scan() {
			return builtin.Answer{}, builtin.ErrDeclined
		}
		text := strings.TrimSpace(lines.Text())
		if n, err := strconv.Atoi(text); err == nil && n >= 1 && n <= len(q.Options) {
			o := q.Options[n-1]
			return builtin.Answer{Value: o.Value, Label: o.Label}, nil
		}
		if text != "" && q.AllowFreeform {
			return builtin.Answer{Value: text, Freeform: true}, nil
		}
	}
}
