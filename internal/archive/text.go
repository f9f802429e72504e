package archive

import (
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
