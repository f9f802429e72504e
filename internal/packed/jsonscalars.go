package packed

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// The JSON packer's scalars: strings and numbers, scanned and packed.

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
