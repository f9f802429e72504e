package archive_test

import (
	"bytes"
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

func TestCleanWriterCleansALogSplitAnywhereAsAWhole(t *testing.T) {
	log := "\x1b[31mred\x1b[0m \x1b]0;pwned title\x07plain\x1b[2Jcleared\a done\n" + "\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\ é ü 日本\r\nend"
	want := archive.CleanLog([]byte(log))
	for cut := range len(log) + 1 {
		for second := cut; second <= len(log); second += 7 {
			var out bytes.Buffer
			w := archive.NewCleanWriter(&out)
			for _, part := range []string{log[:cut], log[cut:second], log[second:]} {
				if _, err := w.Write([]byte(part)); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			if out.String() != want {
				t.Fatalf("split at %d and %d: %q, want %q", cut, second, out.String(), want)
			}
		}
	}
}
