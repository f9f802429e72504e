package archive

import (
	"bytes"
	"regexp"
	"strings"
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
