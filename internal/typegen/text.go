package typegen

import (
	"strings"
	"unicode"
)

// paragraphs splits documentation into paragraphs (at blank lines), each
// one line with its spaces collapsed; a line that starts a list item
// ("- ", "* ") stays a line of its own.
func paragraphs(text string) [][]string {
	var out [][]string
	var para []string
	var line []string
	flushLine := func() {
		if len(line) > 0 {
			para = append(para, strings.Join(line, " "))
			line = nil
		}
	}
	flushPara := func() {
		flushLine()
		if len(para) > 0 {
			out = append(out, para)
			para = nil
		}
	}
	for _, l := range strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "":
			flushPara()
			continue
		case strings.HasPrefix(l, "- "), strings.HasPrefix(l, "* "):
			flushLine()
		}
		line = append(line, strings.Fields(l)...)
	}
	flushPara()
	return out
}

// wrap lays documentation out in lines of at most width characters (a
// longer word has a line of its own), paragraphs separated by an empty
// line.
func wrap(text string, width int) []string {
	var out []string
	for i, para := range paragraphs(text) {
		if i > 0 {
			out = append(out, "")
		}
		for _, l := range para {
			out = append(out, wrapLine(l, width)...)
		}
	}
	return out
}

func wrapLine(l string, width int) []string {
	var out []string
	cur := ""
	indent := ""
	if strings.HasPrefix(l, "- ") || strings.HasPrefix(l, "* ") {
		indent = "  "
	}
	for _, w := range strings.Fields(l) {
		switch {
		case cur == "":
			cur = w
		case len([]rune(cur))+1+len([]rune(w)) <= width:
			cur += " " + w
		default:
			out = append(out, cur)
			cur = indent + w
		}
	}
	if cur != "" {
		out = append(out, cur)
	}
	return out
}

// sentence is s with its first letter in capitals and a full stop.
func sentence(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return s
	}
	r := []rune(s)
	r[0] = unicode.ToUpper(r[0])
	s = string(r)
	if !strings.HasSuffix(s, ".") {
		s += "."
	}
	return s
}

// joinDoc joins documentation parts as paragraphs.
func joinDoc(parts ...string) string {
	var keep []string
	for _, p := range parts {
		if strings.TrimSpace(p) != "" {
			keep = append(keep, strings.TrimSpace(p))
		}
	}
	return strings.Join(keep, "\n\n")
}
