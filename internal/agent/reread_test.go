package agent

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A run's three requests read the token and the CA once between them; a
// rotated file is read within rereadEvery, or at once after a request
// failed (expire).
func TestTheTokenFileIsReadAgainAfterASecondOrAFailure(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("first")
	f := &reread{path: path}
	read := func() string {
		t.Helper()
		b, err := f.read()
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := read(); got != "first" {
		t.Fatalf("read %q, want first", got)
	}
	write("second")
	if got := read(); got != "first" {
		t.Errorf("read %q right after a read; want the content read then, first", got)
	}
	f.expire()
	if got := read(); got != "second" {
		t.Errorf("read %q after expire; want the file's content now, second", got)
	}
	write("third")
	f.mu.Lock()
	f.at = time.Now().Add(-rereadEvery)
	f.mu.Unlock()
	if got := read(); got != "third" {
		t.Errorf("read %q %s after the last read; want the file's content now, third", got, rereadEvery)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	f.expire()
	if _, err := f.read(); err == nil {
		t.Error("read a removed file without an error")
	}
}
