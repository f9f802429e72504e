package packed

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"
)

// ErrDuplicateKey is returned by [FromJSON] for a JSON object, at any
// depth outside the skipped entry, that holds one key twice, or for the
// skipped key appearing twice at the top. The JSON is otherwise valid:
// decoding it to maps (where the last value wins) and packing that is the
// way through.
var ErrDuplicateKey = errors.New("duplicate key in a JSON object")

// FromJSON packs the JSON object data as AppendMapWithout would pack the
// map that k8s.io/apimachinery/pkg/util/json.Unmarshal decodes it into,
// without the top-level entry skip, appending to b. It also returns the
// raw JSON of the top-level skip entry (nil when absent), and the
// top-level "apiVersion" and "kind" string values (empty when absent or
// not strings).
//
// [Unpack] of the result equals that map without skip, each value of the
// same type: a number without '.' that fits an int64 is an int64, any other
// a float64; strings are unescaped, and bytes that are not UTF-8 become
// U+FFFD, as encoding/json does. The entries keep their JSON order, so the
// bytes may differ from AppendMapWithout's. skipped is a slice of data, no
// copy, from the first byte of the value to its last; it is checked to be
// valid JSON, not decoded.
//
// Data that util/json.Unmarshal refuses, or that is not an object, is an
// error, as is nesting deeper than 10,000 objects and arrays; leading and
// trailing whitespace is allowed. A key twice in one object, outside the
// skipped entry, is [ErrDuplicateKey] (wrapped). On an error packed is b,
// as it was.
func FromJSON(b, data []byte, skip string) (packed []byte, skipped []byte, apiVersion, kind string, err error) {
	p := jsonPacker{data: data, b: b, skip: skip}
	p.space()
	if p.i >= len(data) || data[p.i] != '{' {
		return b, nil, "", "", p.fail("a JSON object")
	}
	err = p.object(1, true)
	if err == nil {
		p.space()
		if p.i < len(data) {
			err = p.fail("nothing after the object")
		}
	}
	if err == nil && p.duplicated {
		err = fmt.Errorf("%w: %q", ErrDuplicateKey, p.duplicate)
	}
	if err != nil {
		return b, nil, "", "", err
	}
	return p.b, p.skipped, p.apiVersion, p.kind, nil
}

// jsonPacker packs the JSON data to b. i is the next byte of data to read.
type jsonPacker struct {
	data []byte
	i    int
	b    []byte

	// keys holds where each key of the objects being packed with more
	// than maxDuplicateScan keys went in b, innermost object last, to find
	// a key twice.
	keys []keySpan
	// duplicate is the first key found twice (which may be ""), when
	// duplicated.
	duplicate  string
	duplicated bool

	skip             string
	skipSeen         bool
	skipped          []byte
	apiVersion, kind string
}

type keySpan struct{ start, end int }

// The indexes of the top-level keys FromJSON reads the values of.
var (
	apiVersionIndex = commonIndex["apiVersion"]
	kindIndex       = commonIndex["kind"]
)

// commonSlots finds a common string's index from its bytes faster than
// commonIndex: it holds index+1 at commonHash of each, or the next free
// slot after. A free slot ends a search, so the table must never fill.
var commonSlots, commonMinLen, commonMaxLen = func() (t [256]byte, minLen, maxLen int) {
	if len(commonStrings) > len(t)/2 {
		panic("packed: commonStrings outgrew commonSlots")
	}
	minLen = len(commonStrings[0])
	for i, s := range commonStrings {
		minLen, maxLen = min(minLen, len(s)), max(maxLen, len(s))
		h := commonHash([]byte(s))
		for t[h] != 0 {
			h++
		}
		t[h] = byte(i + 1)
	}
	return t, minLen, maxLen
}()

// commonHash hashes s for commonSlots.
func commonHash(s []byte) byte {
	n := len(s)
	if n == 0 {
		return 0
	}
	x := uint32(n)<<24 | uint32(s[0])<<16 | uint32(s[n/2])<<8 | uint32(s[n-1])
	return byte(x * 0x9e3779b1 >> 24)
}

// commonLookup is commonIndex[string(s)].
func commonLookup(s []byte) (byte, bool) {
	if len(s) < commonMinLen || len(s) > commonMaxLen {
		return 0, false
	}
	for h := commonHash(s); ; h++ {
		i := commonSlots[h]
		if i == 0 {
			return 0, false
		}
		if commonStrings[i-1] == string(s) {
			return i - 1, true
		}
	}
}

// maxDuplicateScan is the most keys an object may have for each key to be
// compared with the others; past it the keys are sorted.
const maxDuplicateScan = 16

// plainASCII marks the bytes a JSON string holds as they are: ASCII, not a
// control character, a quote or a backslash.
var plainASCII = func() (t [256]bool) {
	for c := ' '; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// fail says what was expected at p.i.
func (p *jsonPacker) fail(expected string) error {
	if p.i >= len(p.data) {
		return fmt.Errorf("JSON ends at byte %d where %s was expected", p.i, expected)
	}
	return fmt.Errorf("JSON at byte %d: %q where %s was expected", p.i, p.data[p.i], expected)
}

func (p *jsonPacker) tooDeep() error {
	return fmt.Errorf("JSON at byte %d: nested deeper than %d objects and arrays", p.i, maxPackedDepth)
}

func (p *jsonPacker) space() {
	for p.i < len(p.data) && p.data[p.i] <= ' ' {
		switch p.data[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// next skips whitespace and gives the next byte, 0 at the end.
func (p *jsonPacker) next() byte {
	p.space()
	if p.i < len(p.data) {
		return p.data[p.i]
	}
	return 0
}

// value packs the value at p.i, inside depth objects and arrays.
func (p *jsonPacker) value(depth int) error {
	switch c := p.next(); c {
	case '{':
		return p.object(depth+1, false)
	case '[':
		return p.list(depth + 1)
	case '"':
		raw, plain, err := p.scanString()
		if err != nil {
			return err
		}
		p.packString(raw, plain)
		return nil
	case 't':
		p.b = append(p.b, tagTrue)
		return p.literal("true")
	case 'f':
		p.b = append(p.b, tagFalse)
		return p.literal("false")
	case 'n':
		p.b = append(p.b, tagNil)
		return p.literal("null")
	default:
		raw, integer, err := p.scanNumber()
		if err != nil {
			return err
		}
		return p.packNumber(raw, integer)
	}
}

// object packs the object at p.i, its '{', at depth.
func (p *jsonPacker) object(depth int, top bool) error {
	if depth > maxPackedDepth {
		return p.tooDeep()
	}
	p.i++
	at := len(p.b) + 1
	p.b = append(p.b, tagMap, 0)
	// The keys so far: in small up to maxDuplicateScan of them, then from
	// p.keys[first] on.
	var small [maxDuplicateScan]keySpan
	first := -1
	n := 0
	if p.next() == '}' {
		p.i++
		return nil
	}
	for {
		if p.next() != '"' {
			return p.fail("a key")
		}
		raw, plain, err := p.scanString()
		if err != nil {
			return err
		}
		key := len(p.b)
		p.packString(raw, plain)
		if p.next() != ':' {
			return p.fail("':'")
		}
		p.i++
		if top && packedStringIs(p.b[key:], p.skip) {
			p.b = p.b[:key]
			if err := p.skipEntry(depth); err != nil {
				return err
			}
		} else {
			k := keySpan{key, len(p.b)}
			switch {
			case n < maxDuplicateScan:
				small[n] = k
			case n == maxDuplicateScan:
				if p.keys == nil {
					p.keys = make([]keySpan, 0, 4*maxDuplicateScan)
				}
				first = len(p.keys)
				p.keys = append(append(p.keys, small[:]...), k)
			default:
				p.keys = append(p.keys, k)
			}
			n++
			if err := p.value(depth); err != nil {
				return err
			}
			if top && p.b[key] == tagCommon && (p.b[key+1] == apiVersionIndex || p.b[key+1] == kindIndex) {
				s, _ := packedStringValue(p.b[k.end:])
				if p.b[key+1] == kindIndex {
					p.kind = s
				} else {
					p.apiVersion = s
				}
			}
		}
		switch p.next() {
		case ',':
			p.i++
			continue
		case '}':
			p.i++
		default:
			return p.fail("',' or '}'")
		}
		break
	}
	switch {
	case p.duplicated:
	case first < 0:
		p.findDuplicate(small[:n])
	default:
		p.findDuplicate(p.keys[first:])
	}
	if first >= 0 {
		p.keys = p.keys[:first]
	}
	p.putCount(at, n)
	return nil
}

// skipEntry checks the value of the top-level entry skip and keeps it as
// it is in data. A skipped "apiVersion" or "kind" is still read.
func (p *jsonPacker) skipEntry(depth int) error {
	if p.skipSeen {
		p.duplicate, p.duplicated = p.skip, true
	}
	p.skipSeen = true
	if p.next() == 0 {
		return p.fail("a value")
	}
	start, keep := p.i, len(p.b)
	var err error
	switch p.skip {
	case "apiVersion", "kind":
		if err = p.value(depth); err == nil {
			s, _ := packedStringValue(p.b[keep:])
			if p.skip == "kind" {
				p.kind = s
			} else {
				p.apiVersion = s
			}
		}
		p.b = p.b[:keep]
	default:
		err = p.check(depth)
	}
	p.skipped = p.data[start:p.i]
	return err
}

// list packs the array at p.i, its '[', at depth.
func (p *jsonPacker) list(depth int) error {
	if depth > maxPackedDepth {
		return p.tooDeep()
	}
	p.i++
	at := len(p.b) + 1
	p.b = append(p.b, tagList, 0)
	if p.next() == ']' {
		p.i++
		return nil
	}
	n := 0
	for {
		if err := p.value(depth); err != nil {
			return err
		}
		n++
		switch p.next() {
		case ',':
			p.i++
			continue
		case ']':
			p.i++
		default:
			return p.fail("',' or ']'")
		}
		break
	}
	p.putCount(at, n)
	return nil
}

// check reads the value at p.i, inside depth objects and arrays, as value
// does, without packing it.
func (p *jsonPacker) check(depth int) error {
	var closing byte
	switch c := p.next(); c {
	case '"':
		_, _, err := p.scanString()
		return err
	case 't':
		return p.literal("true")
	case 'f':
		return p.literal("false")
	case 'n':
		return p.literal("null")
	case '{':
		closing = '}'
	case '[':
		closing = ']'
	default:
		raw, integer, err := p.scanNumber()
		if err == nil && (!integer || !fitsInt(raw)) {
			_, err = parseFloat(raw)
		}
		return err
	}
	if depth++; depth > maxPackedDepth {
		return p.tooDeep()
	}
	p.i++
	if p.next() == closing {
		p.i++
		return nil
	}
	for {
		if closing == '}' {
			if p.next() != '"' {
				return p.fail("a key")
			}
			if _, _, err := p.scanString(); err != nil {
				return err
			}
			if p.next() != ':' {
				return p.fail("':'")
			}
			p.i++
		}
		if err := p.check(depth); err != nil {
			return err
		}
		switch p.next() {
		case ',':
			p.i++
		case closing:
			p.i++
			return nil
		default:
			return p.fail("',' or '" + string(closing) + "'")
		}
	}
}

// literal reads word at p.i.
func (p *jsonPacker) literal(word string) error {
	if len(p.data)-p.i < len(word) || string(p.data[p.i:p.i+len(word)]) != word {
		return p.fail("a value")
	}
	p.i += len(word)
	return nil
}

// putCount writes n, the entries of a map or list or the bytes of a
// string, at b[at], the one byte kept for it, moving what follows to make
// room if it takes more.
func (p *jsonPacker) putCount(at, n int) {
	if n < 0x80 {
		p.b[at] = byte(n)
		return
	}
	var count [binary.MaxVarintLen64]byte
	w := binary.PutUvarint(count[:], uint64(n))
	end := len(p.b)
	p.b = append(p.b, count[1:w]...)
	copy(p.b[at+w:], p.b[at+1:end])
	copy(p.b[at:], count[:w])
}

// findDuplicate records the first of keys, spans of p.b, found twice.
func (p *jsonPacker) findDuplicate(keys []keySpan) {
	key := func(k keySpan) []byte { return p.b[k.start:k.end] }
	if len(keys) <= maxDuplicateScan {
		for i := 1; i < len(keys); i++ {
			ki := p.b[keys[i].start:keys[i].end]
			for _, kj := range keys[:i] {
				if string(ki) == string(p.b[kj.start:kj.end]) {
					p.duplicate, p.duplicated = packedString(ki), true
					return
				}
			}
		}
		return
	}
	slices.SortFunc(keys, func(x, y keySpan) int { return bytes.Compare(key(x), key(y)) })
	for i := 1; i < len(keys); i++ {
		if bytes.Equal(key(keys[i]), key(keys[i-1])) {
			p.duplicate, p.duplicated = packedString(key(keys[i])), true
			return
		}
	}
}

// packedStringIs says whether the packed string at the start of b is s.
func packedStringIs(b []byte, s string) bool {
	if b[0] == tagCommon {
		return commonStrings[b[1]] == s
	}
	n, w := binary.Uvarint(b[1:])
	return n == uint64(len(s)) && string(b[1+w:1+w+len(s)]) == s
}

// packedStringValue gives the packed value at the start of b if it is a
// string.
func packedStringValue(b []byte) (string, bool) {
	if len(b) == 0 || (b[0] != tagString && b[0] != tagCommon) {
		return "", false
	}
	return packedString(b), true
}

// packedString gives the string packed at the start of b.
func packedString(b []byte) string {
	if b[0] == tagCommon {
		return commonStrings[b[1]]
	}
	n, w := binary.Uvarint(b[1:])
	return string(b[1+w : 1+w+int(n)])
}
