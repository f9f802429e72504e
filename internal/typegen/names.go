package typegen

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// words splits a name into its words: at every character that is not a
// letter or a digit, and where a lower-case letter or a digit is followed
// by an upper-case one (fooBar, foo-bar, foo_bar and foo.bar are all foo,
// bar).
func words(s string) []string {
	var out []string
	var cur []rune
	flush := func() {
		if len(cur) > 0 {
			out = append(out, string(cur))
			cur = nil
		}
	}
	runes := []rune(s)
	for i, r := range runes {
		switch {
		case !unicode.IsLetter(r) && !unicode.IsDigit(r):
			flush()
			continue
		case unicode.IsUpper(r) && len(cur) > 0:
			prev := cur[len(cur)-1]
			// fooBar, v1Alpha; and the last capital of HTTPServer.
			nextLower := i+1 < len(runes) && unicode.IsLower(runes[i+1])
			if unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && nextLower) {
				flush()
			}
		}
		cur = append(cur, r)
	}
	flush()
	return out
}

// pascal is s in PascalCase: each word capitalised, the rest of it kept
// (fooBar, foo-bar and foo_bar are FooBar); "" when s has no letter or
// digit.
func pascal(s string) string {
	var b strings.Builder
	for _, w := range words(s) {
		r := []rune(w)
		b.WriteString(strings.ToUpper(string(r[0])) + string(r[1:]))
	}
	return b.String()
}

// goInitialisms are the words Go spells in capitals (as golint's list).
var goInitialisms = map[string]bool{
	"acl": true, "api": true, "ascii": true, "cpu": true, "css": true, "dns": true, "eof": true, "guid": true,
	"html": true, "http": true, "https": true, "id": true, "ip": true, "json": true, "lhs": true, "qps": true,
	"ram": true, "rhs": true, "rpc": true, "sla": true, "smtp": true, "sql": true, "ssh": true, "tcp": true,
	"tls": true, "ttl": true, "udp": true, "ui": true, "uid": true, "uuid": true, "uri": true, "url": true,
	"utf8": true, "vm": true, "xml": true, "xmpp": true, "xsrf": true, "xss": true, "sha": true,
}

// goName is s as an exported Go identifier: PascalCase with Go's
// initialisms in capitals (apiVersion is APIVersion, repoUrl RepoURL),
// prefixed with X when it would not start with an upper-case letter, and
// Field when s has no letter or digit.
func goName(s string) string {
	var b strings.Builder
	for _, w := range words(s) {
		if goInitialisms[strings.ToLower(w)] {
			b.WriteString(strings.ToUpper(w))
			continue
		}
		r := []rune(w)
		b.WriteString(strings.ToUpper(string(r[0])) + string(r[1:]))
	}
	return exported(b.String(), "Field")
}

// typeName is s as a type name in every language: PascalCase, prefixed
// with X when it would not start with an upper-case letter.
func typeName(s string) string { return exported(pascal(s), "Type") }

// TypeName is a name (a handler's, an operator's) as the generated types
// spell it in theirs: answer is Answer (AnswerContext, AnswerResult),
// deploy-watcher DeployWatcher.
func TypeName(s string) string { return typeName(s) }

// exported makes name start with an upper-case letter: empty is empty,
// one that starts otherwise (a digit, a letter without case) gets an X.
func exported(name, empty string) string {
	if name == "" {
		return empty
	}
	if r := []rune(name)[0]; !unicode.IsUpper(r) {
		return "X" + name
	}
	return name
}

// snake is s in snake_case (greet-all is greet_all, fooBar foo_bar).
func snake(s string) string {
	ws := words(s)
	for i, w := range ws {
		ws[i] = strings.ToLower(w)
	}
	return strings.Join(ws, "_")
}

// pythonKeywords are Python's keywords and soft keywords that cannot name
// a TypedDict's field in the class syntax, nor a variable.
var pythonKeywords = map[string]bool{
	"False": true, "None": true, "True": true, "and": true, "as": true, "assert": true, "async": true,
	"await": true, "break": true, "class": true, "continue": true, "def": true, "del": true, "elif": true,
	"else": true, "except": true, "finally": true, "for": true, "from": true, "global": true, "if": true,
	"import": true, "in": true, "is": true, "lambda": true, "nonlocal": true, "not": true, "or": true,
	"pass": true, "raise": true, "return": true, "try": true, "while": true, "with": true, "yield": true,
}

// pythonIdentifier reports whether s can name a field of a TypedDict in
// the class syntax: an identifier (ASCII, to stay readable everywhere)
// and not a keyword.
func pythonIdentifier(s string) bool {
	return asciiIdentifier(s) && !pythonKeywords[s]
}

// tsIdentifier reports whether s can be a property name without quotes.
func tsIdentifier(s string) bool {
	return asciiIdentifier(strings.ReplaceAll(s, "$", "_"))
}

func asciiIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z':
		case '0' <= r && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// namespace hands out unique names: a name already taken gets the
// smallest suffix 2, 3... that is free, and the renaming is said.
type namespace struct {
	taken map[string]string // name -> what took it
	// warn records a renaming; goWarn one of a name only Go has.
	warn, goWarn func(format string, args ...any)
}

func newNamespace(warn, goWarn func(string, ...any), reserved ...string) *namespace {
	ns := &namespace{taken: map[string]string{}, warn: warn, goWarn: goWarn}
	for _, r := range reserved {
		ns.taken[r] = "a name the generated code uses itself"
	}
	return ns
}

// claim returns name, or name with a suffix when it is taken; what says
// what the name is for, in the warning.
func (ns *namespace) claim(name, what string) string { return ns.claimWarn(name, what, ns.warn) }

// claimGo is claim for a name only the Go file has.
func (ns *namespace) claimGo(name, what string) string { return ns.claimWarn(name, what, ns.goWarn) }

func (ns *namespace) claimWarn(name, what string, warn func(string, ...any)) string {
	if _, ok := ns.taken[name]; !ok {
		ns.taken[name] = what
		return name
	}
	for i := 2; ; i++ {
		alt := name + strconv.Itoa(i)
		if _, ok := ns.taken[alt]; ok {
			continue
		}
		if warn != nil {
			warn("%s would be named %s, as is %s: named %s instead", what, name, ns.taken[name], alt)
		}
		ns.taken[alt] = what
		return alt
	}
}

// quoted is s as a double-quoted string literal, in the JSON syntax every
// language here reads (Go, Python, TypeScript).
func quoted(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case '\n':
			b.WriteString(`\n`)
		case '\t':
			b.WriteString(`\t`)
		case '\r':
			b.WriteString(`\r`)
		default:
			if r < 0x20 || r == 0x7f || r == 0x2028 || r == 0x2029 {
				fmt.Fprintf(&b, `\u%04x`, r)
				continue
			}
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
