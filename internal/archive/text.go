package archive

import (
	"bytes"
	"io"
	"regexp"
	"strings"
	"unicode/utf8"
)

// controlSequences are ANSI escapes (CSI, OSC, two-character) and the other
// control characters a terminal would interpret.
var controlSequences = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-_]|[\x00-\x08\x0b-\x1f\x7f]`)

// CleanLog makes a log, as a handler wrote it, readable text: terminal
// control sequences stripped, newlines and tabs kept, \r\n read as a
// newline, valid UTF-8. Logs are stored as written; readers clean them.
func CleanLog(raw []byte) string {
	s := strings.ReplaceAll(string(raw), "\r\n", "\n")
	s = controlSequences.ReplaceAllString(s, "")
	return strings.ToValidUTF8(s, "\uFFFD")
}

// UnfinishedControlSequence is the length of the end of a log chunk that
// may be the start of a terminal control sequence the next chunk finishes
// (a lone ESC, a CSI without its final byte, an OSC without its
// terminator); 0 when there is none. A reader that cleans a log chunk by
// chunk keeps that end for the next chunk, so that CleanLog sees each
// sequence whole.
func UnfinishedControlSequence(data []byte) int {
	hold := 0
	if i := bytes.LastIndex(data, []byte("\x1b]")); i >= 0 {
		osc := data[i+2:]
		if bytes.IndexByte(osc, '\a') < 0 && !bytes.Contains(osc, []byte("\x1b\\")) {
			hold = len(data) - i
		}
	}
	if i := bytes.LastIndexByte(data, 0x1b); i >= 0 && len(data)-i > hold {
		seq := data[i:]
		switch {
		case len(seq) == 1:
			hold = len(seq)
		case seq[1] == '[':
			j := 2
			for j < len(seq) && (seq[j] >= '0' && seq[j] <= '9' || seq[j] == ';' || seq[j] == '?') {
				j++
			}
			for j < len(seq) && seq[j] >= ' ' && seq[j] <= '/' {
				j++
			}
			if j == len(seq) {
				hold = len(seq)
			}
		}
	}
	return hold
}

// CleanWriter writes a log through CleanLog. A write that ends
// inside a control sequence or a UTF-8 character keeps that end back until
// the next write completes it, or Flush: a log read in chunks (opkit logs
// -f, the runs API's log) is cleaned as the whole would be.
type CleanWriter struct {
	w       io.Writer
	pending []byte
}

// NewCleanWriter returns a CleanWriter that writes on w.
func NewCleanWriter(w io.Writer) *CleanWriter { return &CleanWriter{w: w} }

// maxHeldBack bounds what a write may keep back: a longer unfinished
// "sequence" is not one, and is cleaned as it is.
const maxHeldBack = 4096

// Write writes p cleaned, but for an unfinished end it keeps back.
func (c *CleanWriter) Write(p []byte) (int, error) {
	data := append(c.pending, p...)
	cut := len(data) - unfinishedTail(data)
	if len(data)-cut > maxHeldBack {
		cut = len(data)
	}
	c.pending = append([]byte(nil), data[cut:]...)
	if _, err := io.WriteString(c.w, CleanLog(data[:cut])); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes what was kept back.
func (c *CleanWriter) Flush() error {
	data := c.pending
	c.pending = nil
	_, err := io.WriteString(c.w, CleanLog(data))
	return err
}

// unfinishedTail is the length of data's end that may be the start of a
// control sequence, a \r\n or a UTF-8 character that the next bytes
// finish.
func unfinishedTail(data []byte) int {
	if n := UnfinishedControlSequence(data); n > 0 {
		return n
	}
	if n := len(data); n > 0 && data[n-1] == '\r' {
		return 1
	}
	for n := 1; n < utf8.UTFMax && n <= len(data); n++ {
		if b := data[len(data)-n]; utf8.RuneStart(b) {
			if !utf8.FullRune(data[len(data)-n:]) {
				return n
			}
			break
		}
	}
	return 0
}
