package archive_test

import (
	"testing"

	"github.com/opkit-dev/opkit/internal/archive"
)

func TestCleanLogStripsTerminalControl(t *testing.T) {
	raw := "\x1b[1;31mred\x1b[0m and \x1b]0;title\x07plain\r\nnext\tline\x00\x08 \xff end\n"
	want := "red and plain\nnext\tline \uFFFD end\n"
	if got := archive.CleanLog([]byte(raw)); got != want {
		t.Errorf("CleanLog: %q, want %q", got, want)
	}
}
