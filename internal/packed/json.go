package packed

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode"
	"unicode/utf16"
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
	if err == nil && p.duplicate != "" {
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
	// duplicate is the first key found twice.
	duplicate string

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
	case p.duplicate != "":
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
		p.duplicate = p.skip
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

// scanString reads the string at p.i, its opening quote, and gives its
// bytes between the quotes. They are plain when they are the string as
// they are: no escapes, and all UTF-8.
func (p *jsonPacker) scanString() (raw []byte, plain bool, err error) {
	d := p.data
	start := p.i + 1
	plain = true
	for i := start; ; {
		for i < len(d) && plainASCII[d[i]] {
			i++
		}
		if i >= len(d) {
			p.i = i
			return nil, false, p.fail("the end of the string")
		}
		switch c := d[i]; {
		case c == '"':
			p.i = i + 1
			return d[start:i], plain, nil
		case c == '\\':
			plain = false
			if i+1 < len(d) {
				switch d[i+1] {
				case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
					i += 2
					continue
				case 'u':
					if getu4(d[i:]) >= 0 {
						i += 6
						continue
					}
				}
			}
			p.i = i
			return nil, false, p.fail("an escape")
		case c < ' ':
			p.i = i
			return nil, false, p.fail("no control character")
		default:
			r, size := utf8.DecodeRune(d[i:])
			if r == utf8.RuneError && size == 1 {
				plain = false
			}
			i += size
		}
	}
}

// packString packs the string scanString read, as the function
// appendString packs it.
func (p *jsonPacker) packString(raw []byte, plain bool) {
	if plain {
		if i, ok := commonLookup(raw); ok {
			p.b = append(p.b, tagCommon, i)
			return
		}
		p.b = binary.AppendUvarint(append(p.b, tagString), uint64(len(raw)))
		p.b = append(p.b, raw...)
		return
	}
	at := len(p.b) + 1
	p.b = appendUnquoted(append(p.b, tagString, 0), raw)
	s := p.b[at+1:]
	if i, ok := commonLookup(s); ok {
		p.b = append(p.b[:at-1], tagCommon, i)
		return
	}
	p.putCount(at, len(s))
}

// appendUnquoted appends the string s, the valid bytes of a JSON string
// between its quotes, unescaped as encoding/json unquotes it: an invalid
// surrogate and each byte that is not UTF-8 become U+FFFD.
func appendUnquoted(b, s []byte) []byte {
	for r := 0; r < len(s); {
		c := s[r]
		switch {
		case c == '\\':
			switch s[r+1] {
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				rr := getu4(s[r:])
				r += 6
				if utf16.IsSurrogate(rr) {
					if dec := utf16.DecodeRune(rr, getu4(s[r:])); dec != unicode.ReplacementChar {
						b = utf8.AppendRune(b, dec)
						r += 6
						continue
					}
					rr = unicode.ReplacementChar
				}
				b = utf8.AppendRune(b, rr)
				continue
			default: // '"', '\\', '/'
				b = append(b, s[r+1])
			}
			r += 2
		case c < utf8.RuneSelf:
			end := r + 1
			for end < len(s) && s[end] != '\\' && s[end] < utf8.RuneSelf {
				end++
			}
			b = append(b, s[r:end]...)
			r = end
		default:
			rr, size := utf8.DecodeRune(s[r:])
			b = utf8.AppendRune(b, rr)
			r += size
		}
	}
	return b
}

// getu4 decodes \uXXXX at the start of s, or gives -1.
func getu4(s []byte) rune {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range s[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// scanNumber reads the number at p.i. It is an integer when it has no
// fraction and no exponent.
func (p *jsonPacker) scanNumber() (raw []byte, integer bool, err error) {
	d := p.data
	i := p.i
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && '1' <= d[i] && d[i] <= '9':
		i = digits(d, i+1)
	default:
		p.i = i
		return nil, false, p.fail("a value")
	}
	integer = true
	if i < len(d) && d[i] == '.' {
		integer = false
		j := digits(d, i+1)
		if j == i+1 {
			p.i = j
			return nil, false, p.fail("a digit")
		}
		i = j
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		integer = false
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		j := digits(d, i)
		if j == i {
			p.i = j
			return nil, false, p.fail("a digit")
		}
		i = j
	}
	raw = d[p.i:i]
	p.i = i
	return raw, integer, nil
}

// digits gives the index of the first byte from i on in d that is not a
// digit.
func digits(d []byte, i int) int {
	for i < len(d) && '0' <= d[i] && d[i] <= '9' {
		i++
	}
	return i
}

// packNumber packs the number scanNumber read: an integer that fits in
// an int64 as an int64, any other as a float64, as util/json decodes it.
func (p *jsonPacker) packNumber(raw []byte, integer bool) error {
	if integer {
		if n, ok := parseInt(raw); ok {
			p.b = binary.AppendVarint(append(p.b, tagInt), n)
			return nil
		}
	}
	f, err := parseFloat(raw)
	if err != nil {
		return err
	}
	p.b = binary.LittleEndian.AppendUint64(append(p.b, tagFloat), math.Float64bits(f))
	return nil
}

// parseInt parses a valid JSON integer, and says whether it fits an int64.
func parseInt(raw []byte) (int64, bool) {
	neg := raw[0] == '-'
	d := raw
	if neg {
		d = raw[1:]
	}
	if len(d) > 19 {
		return 0, false
	}
	var u uint64 // at most 19 digits: no overflow
	for _, c := range d {
		u = u*10 + uint64(c-'0')
	}
	switch {
	case !neg && u <= math.MaxInt64:
		return int64(u), true
	case neg && u <= -math.MinInt64:
		return -int64(u), true
	}
	return 0, false
}

// fitsInt says whether the valid JSON integer raw fits an int64.
func fitsInt(raw []byte) bool {
	_, ok := parseInt(raw)
	return ok
}

// parseFloat parses a valid JSON number; out of a float64's range it is
// an error, as for util/json.
func parseFloat(raw []byte) (float64, error) {
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil {
		return 0, fmt.Errorf("JSON number %s: %w", raw, err)
	}
	return f, nil
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
					p.duplicate = packedString(ki)
					return
				}
			}
		}
		return
	}
	slices.SortFunc(keys, func(x, y keySpan) int { return bytes.Compare(key(x), key(y)) })
	for i := 1; i < len(keys); i++ {
		if bytes.Equal(key(keys[i]), key(keys[i-1])) {
			p.duplicate = packedString(key(keys[i]))
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
