package runners

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// readFrame returns each line whole, its newline kept, whatever its
// length against the reader's buffer, up to MaxFrame bytes; a longer
// line is errFrameTooLarge, and a last line without its newline comes
// with io.EOF.
func TestReadFrameReturnsEachLineWholeUpToTheLimit(t *testing.T) {
	const buf = 16 << 10
	lengths := []int{0, 1, buf - 2, buf - 1, buf, buf + 1, 5*buf + 7, MaxFrame - 1}
	var in bytes.Buffer
	var want []string
	for i, n := range lengths {
		line := strings.Repeat(string(rune('a'+i)), n) + "\n"
		in.WriteString(line)
		want = append(want, line)
	}
	in.WriteString("tail")
	br := frameReaders.Get().(*bufio.Reader)
	br.Reset(&in)
	defer frameReaders.Put(br)
	for i, w := range want {
		got, err := readFrame(br)
		if err != nil || string(got) != w {
			t.Fatalf("line %d (%d bytes and its newline): %d bytes, %v", i, lengths[i], len(got), err)
		}
	}
	if got, err := readFrame(br); string(got) != "tail" || !errors.Is(err, io.EOF) {
		t.Errorf("the last line without a newline: %q, %v; want \"tail\", io.EOF", got, err)
	}

	br.Reset(strings.NewReader(strings.Repeat("x", MaxFrame) + "\nnext\n"))
	if got, err := readFrame(br); !errors.Is(err, errFrameTooLarge) {
		t.Errorf("a line of MaxFrame bytes and its newline: %d bytes, %v; want errFrameTooLarge", len(got), err)
	}
}
