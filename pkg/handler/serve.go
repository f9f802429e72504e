package handler

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Main runs p as the handler program's main and exits. With
// OPKIT_MODE=Serve in the environment it answers a binding context per
// line of stdin until its end (Serve), else the one binding context of
// stdin (Once), exiting with Once's status.
//
// Main keeps the process's standard output for the answers and points
// file descriptor 1 at standard error (the run's log), so that a
// fmt.Println, a logger made on os.Stdout or a child process writing to
// its stdout cannot break the protocol; on a system without dup2
// (Windows, Plan 9) it replaces only the variable os.Stdout. A SIGTERM or
// an interrupt cancels the runs' ctx; a second one kills the process.
func Main(p Program) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	go func() {
		<-ctx.Done()
		stop() // the next signal kills
	}()
	out, err := keepStdout()
	if err != nil {
		fmt.Fprintf(os.Stderr, "handler: keeping stdout for the answers: %v; only os.Stdout writes to stderr\n", err)
		out, os.Stdout = os.Stdout, os.Stderr
	}
	if os.Getenv("OPKIT_MODE") == "Serve" {
		if err := Serve(ctx, p, os.Stdin, out, os.Stderr); err != nil {
			fmt.Fprintf(os.Stderr, "handler: %v\n", err)
			os.Exit(exitBug)
		}
		os.Exit(exitOK)
	}
	os.Exit(Once(ctx, p, os.Stdin, out, os.Stderr))
}

// Once answers the one binding context of in (all of it) with one result
// on out, and returns the status a process per run exits with: 0 for a
// result (an error in it permanent, or none), 75 (EX_TEMPFAIL) for a
// temporary error, 1 for any other error or a panic (its message or stack
// in log). Input that is not a binding context is answered with a
// permanent error naming what is wrong.
func Once(ctx context.Context, p Program, in io.Reader, out, log io.Writer) (exit int) {
	l := &runLog{w: log}
	input, err := io.ReadAll(in)
	var answer []byte
	if err != nil {
		answer, exit = failed(ctx, l, Temporary(fmt.Errorf("reading the binding context: %w", err)))
	} else {
		answer, exit = p.run(ctx, input, l)
	}
	if err := write(out, answer); err != nil {
		l.printf("handler: writing the answer: %v", err)
		return exitBug
	}
	return exit
}

// Serve answers each line of in, a binding context, with one line of out,
// its result, flushed (when out has a Flush method) before the next line
// is read; a run's log is written to log before its answer. It returns nil
// at the end of in, and the cause of ctx's end when ctx is done: a run in
// flight is answered first, then no other is started. An error, a panic,
// or a line that is not a binding context is answered with an error result
// and the loop goes on.
//
// A goroutine reads in ahead of the runs; when ctx ends Serve, it stays
// blocked in in's Read until in is closed.
func Serve(ctx context.Context, p Program, in io.Reader, out, log io.Writer) error {
	type line struct {
		b   []byte
		err error
	}
	lines := make(chan line)
	done := make(chan struct{})
	defer close(done)
	go func() {
		r := bufio.NewReaderSize(in, 64<<10)
		for {
			b, err := r.ReadBytes('\n')
			select {
			case lines <- line{b, err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	l := &runLog{w: log}
	for {
		var next line
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case next = <-lines:
		}
		if len(next.b) > 0 { // a last line may have no newline
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			answer, _ := p.run(ctx, bytes.TrimSuffix(next.b, []byte("\n")), l)
			if err := write(out, answer); err != nil {
				return fmt.Errorf("writing an answer: %w", err)
			}
		}
		switch {
		case errors.Is(next.err, io.EOF):
			return nil
		case next.err != nil:
			return fmt.Errorf("reading the binding contexts: %w", next.err)
		}
	}
}

// write writes answer as one line, in one Write, and flushes it.
func write(out io.Writer, answer []byte) error {
	if _, err := out.Write(append(answer, '\n')); err != nil {
		return err
	}
	if f, ok := out.(interface{ Flush() error }); ok {
		return f.Flush()
	}
	return nil
}
