// Package fuzzcheck holds helpers for Go fuzz targets, used by tests
// only: a watchdog that bounds how long one input may take (Within),
// encoding/json's own reading of data, which a target checks opkit's
// decoders against (JSONDepth, AsJSON), and the form of the ids opkit
// keys deliveries by (PrintableID). It imports nothing of opkit, so that
// the tests of any package, internal or external, can use it.
package fuzzcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"
)

// Within runs f and fails t when it took longer than bound. One that has
// not returned after 5×bound panics with the stacks of all goroutines:
// the fuzz worker dies on it, and go test keeps the input that hung.
func Within(t testing.TB, what string, bound time.Duration, f func()) {
	t.Helper()
	start := time.Now()
	hung := time.AfterFunc(5*bound, func() {
		buf := make([]byte, 1<<20)
		panic(fmt.Sprintf("%s has not returned after %s:\n%s", what, 5*bound, buf[:runtime.Stack(buf, true)]))
	})
	f()
	hung.Stop()
	if d := time.Since(start); d > bound {
		t.Fatalf("%s took %s, more than %s", what, d, bound)
	}
}

// JSONDepth is how deeply valid JSON nests objects and arrays, as
// encoding/json's tokenizer sees it; ok is false for data that is not
// valid JSON (or nests past encoding/json's own 10,000).
func JSONDepth(data []byte) (depth int, ok bool) {
	if !json.Valid(data) {
		return 0, false
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber() // 1e400 is JSON
	level := 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return depth, true
		}
		if err != nil {
			return 0, false
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			level++
			depth = max(depth, level)
		case json.Delim('}'), json.Delim(']'):
			level--
		}
	}
}

// AsJSON is s as it reads back from JSON: encoding/json writes each byte
// of s that is not UTF-8 as U+FFFD, as string([]rune(s)) does.
func AsJSON(s string) string { return string([]rune(s)) }

// PrintableID reports whether s is an id as opkit's archive keys it (a
// delivery's, a source.Message's): 1 to 200 bytes of visible ASCII, no
// slash or backslash.
func PrintableID(s string) bool {
	if s == "" || len(s) > 200 {
		return false
	}
	for _, c := range []byte(s) {
		if c <= ' ' || c >= 0x7f || c == '/' || c == '\\' {
			return false
		}
	}
	return true
}
