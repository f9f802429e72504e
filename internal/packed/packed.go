// Package packed is a compact binary form of unstructured values: the tree
// of map[string]any, []any, string, int64, float64, bool and nil that
// JSON decodes into (k8s.io/apimachinery/pkg/util/json, as unstructured
// objects hold them). The engine's cache keeps objects in it.
//
// The contract: [Unpack] of what [Append] wrote gives back a value equal to
// the one packed, each value of the same type (the float 4.0 stays a
// float, where JSON would give it back an integer). [Unpack] of damaged
// bytes is an error, never a panic. The form is for one process's memory,
// not for storage: it may change between versions. [FromJSON] packs a JSON
// object straight from its bytes, to the value decoding it would give.
//
// Against JSON it takes no escaping and decodes without reflection; a
// string it gives back is a slice of the packed form, not a copy, and the
// keys and values most Kubernetes objects repeat take two bytes and decode
// to one shared string.
package packed

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
)

// The form:
//
//	nil              tagNil
//	false, true      tagFalse, tagTrue
//	int64            tagInt, zig-zag varint
//	float64          tagFloat, 8 bytes (IEEE 754, little endian)
//	string           tagString, length (uvarint), bytes
//	a common string  tagCommon, its index in commonStrings
//	map[string]any   tagMap, entries (uvarint), then each key (a string) and value
//	[]any            tagList, elements (uvarint), then each element
const (
	tagNil byte = iota
	tagFalse
	tagTrue
	tagInt
	tagFloat
	tagString
	tagCommon
	tagMap
	tagList
)

// commonStrings are the keys and values most objects have; each packs to
// two bytes and decodes to the one string here. The order is the format:
// append only.
var commonStrings = [...]string{
	"apiVersion", "kind", "metadata", "spec", "status", "data", "binaryData",
	"name", "namespace", "labels", "annotations", "uid", "generation",
	"conditions", "type", "reason", "message", "lastTransitionTime",
	"observedGeneration", "True", "False", "Unknown", "Ready", "Degraded",
	"Stalled", "Paused", "opkit", "children", "id", "handlers", "state",
	"template", "containers", "image", "command", "args", "env", "value",
	"resources", "requests", "limits", "cpu", "memory", "ports",
	"containerPort", "protocol", "TCP", "replicas", "selector",
	"matchLabels", "items", "key", "path", "port", "targetPort",
	"securityContext", "volumeMounts", "volumes", "mountPath",
}

var commonIndex = func() map[string]byte {
	m := make(map[string]byte, len(commonStrings))
	for i, s := range commonStrings {
		m[s] = byte(i)
	}
	return m
}()

// maxPackedDepth bounds nesting, as JSON decoders do.
const maxPackedDepth = 10_000

// ErrNotUnstructured is returned for a value holding a type JSON does not
// decode into.
var ErrNotUnstructured = errors.New("not an unstructured value")

// Append appends v, packed, to b.
func Append(b []byte, v any) ([]byte, error) {
	return appendValue(b, v, 0)
}

// AppendMapWithout appends the map m without its entry skip, as Append
// would append a copy of m without it.
func AppendMapWithout(b []byte, m map[string]any, skip string) ([]byte, error) {
	return appendMap(b, m, 0, skip, true)
}

// appendMap appends m at depth, without its entry skip when skipping.
func appendMap(b []byte, m map[string]any, depth int, skip string, skipping bool) ([]byte, error) {
	n := len(m)
	if _, ok := m[skip]; ok && skipping {
		n--
	}
	b = binary.AppendUvarint(append(b, tagMap), uint64(n))
	var err error
	for k, v := range m {
		if skipping && k == skip {
			continue
		}
		b = appendString(b, k)
		if b, err = appendValue(b, v, depth+1); err != nil {
			return b, err
		}
	}
	return b, nil
}

func appendValue(b []byte, v any, depth int) ([]byte, error) {
	if depth > maxPackedDepth {
		return b, errors.New("nested too deeply")
	}
	switch v := v.(type) {
	case nil:
		return append(b, tagNil), nil
	case bool:
		if v {
			return append(b, tagTrue), nil
		}
		return append(b, tagFalse), nil
	case int64:
		return binary.AppendVarint(append(b, tagInt), v), nil
	case float64:
		return binary.LittleEndian.AppendUint64(append(b, tagFloat), math.Float64bits(v)), nil
	case string:
		return appendString(b, v), nil
	case map[string]any:
		return appendMap(b, v, depth, "", false)
	case []any:
		b = binary.AppendUvarint(append(b, tagList), uint64(len(v)))
		var err error
		for _, e := range v {
			if b, err = appendValue(b, e, depth+1); err != nil {
				return b, err
			}
		}
		return b, nil
	}
	return b, fmt.Errorf("%w: %T", ErrNotUnstructured, v)
}

func appendString(b []byte, s string) []byte {
	if i, ok := commonIndex[s]; ok {
		return append(b, tagCommon, i)
	}
	b = binary.AppendUvarint(append(b, tagString), uint64(len(s)))
	return append(b, s...)
}

// Unpack decodes a value Append packed. Its strings are slices of p, which
// is why p is a string: a packed form is immutable.
func Unpack(p string) (any, error) {
	d := unpacker{p: p}
	v, err := d.value(0)
	if err == nil && d.i != len(p) {
		err = errors.New("bytes after the value")
	}
	if err != nil {
		return nil, fmt.Errorf("packed value at byte %d: %w", d.i, err)
	}
	return v, nil
}

type unpacker struct {
	p string
	i int
}

var errTruncated = errors.New("truncated")

func (d *unpacker) value(depth int) (any, error) {
	if depth > maxPackedDepth {
		return nil, errors.New("nested too deeply")
	}
	if d.i >= len(d.p) {
		return nil, errTruncated
	}
	tag := d.p[d.i]
	d.i++
	switch tag {
	case tagNil:
		return nil, nil
	case tagFalse:
		return false, nil
	case tagTrue:
		return true, nil
	case tagInt:
		n, w := varint(d.p[d.i:])
		if w <= 0 {
			return nil, errTruncated
		}
		d.i += w
		return n, nil
	case tagFloat:
		if len(d.p)-d.i < 8 {
			return nil, errTruncated
		}
		bits := uint64(0)
		for k := 7; k >= 0; k-- {
			bits = bits<<8 | uint64(d.p[d.i+k])
		}
		d.i += 8
		return math.Float64frombits(bits), nil
	case tagString, tagCommon:
		d.i--
		return d.string()
	case tagMap:
		n, err := d.count()
		if err != nil {
			return nil, err
		}
		m := make(map[string]any, n)
		for range n {
			k, err := d.string()
			if err != nil {
				return nil, err
			}
			if m[k], err = d.value(depth + 1); err != nil {
				return nil, err
			}
		}
		return m, nil
	case tagList:
		n, err := d.count()
		if err != nil {
			return nil, err
		}
		l := make([]any, n)
		for k := range l {
			if l[k], err = d.value(depth + 1); err != nil {
				return nil, err
			}
		}
		return l, nil
	}
	return nil, fmt.Errorf("unknown tag %d", tag)
}

func (d *unpacker) string() (string, error) {
	if d.i >= len(d.p) {
		return "", errTruncated
	}
	switch d.p[d.i] {
	case tagCommon:
		if d.i+1 >= len(d.p) || int(d.p[d.i+1]) >= len(commonStrings) {
			return "", errors.New("no such common string")
		}
		s := commonStrings[d.p[d.i+1]]
		d.i += 2
		return s, nil
	case tagString:
		d.i++
		n, err := d.count()
		if err != nil {
			return "", err
		}
		s := d.p[d.i : d.i+n]
		d.i += n
		return s, nil
	}
	return "", errors.New("a string was expected")
}

// count reads a length, which the bytes left must be able to hold (each
// entry takes at least one byte).
func (d *unpacker) count() (int, error) {
	n, w := uvarint(d.p[d.i:])
	if w <= 0 {
		return 0, errTruncated
	}
	d.i += w
	if n > uint64(len(d.p)-d.i) {
		return 0, errTruncated
	}
	return int(n), nil
}

// uvarint and varint are binary.Uvarint and binary.Varint over a string.
func uvarint(s string) (uint64, int) {
	var x uint64
	var shift uint
	for i := 0; i < len(s) && i < binary.MaxVarintLen64; i++ {
		c := s[i]
		if c < 0x80 {
			if i == binary.MaxVarintLen64-1 && c > 1 {
				return 0, -(i + 1) // overflow
			}
			return x | uint64(c)<<shift, i + 1
		}
		x |= uint64(c&0x7f) << shift
		shift += 7
	}
	return 0, 0
}

func varint(s string) (int64, int) {
	ux, n := uvarint(s)
	x := int64(ux >> 1)
	if ux&1 != 0 {
		x = ^x
	}
	return x, n
}

// EqualWithout reports whether the packed maps a and b hold the same
// entries but for their entries of the keys skip: entries of the same
// keys whose values are [Equal] as [Unpack] gives them back. Entries of equal bytes
// are equal without being unpacked; others, which may hold maps packed in
// another order, are unpacked and compared. Damaged bytes, or a value
// that is not a map, are an error.
func EqualWithout(a, b string, skip ...string) (bool, error) {
	ea, err := entries(a, skip)
	if err != nil {
		return false, err
	}
	eb, err := entries(b, skip)
	if err != nil {
		return false, err
	}
	if len(ea) != len(eb) {
		return false, nil
	}
	for _, x := range ea {
		i := slices.IndexFunc(eb, func(y entry) bool { return y.key == x.key })
		if i < 0 {
			return false, nil
		}
		if x.value == eb[i].value {
			continue
		}
		vx, err := Unpack(x.value)
		if err != nil {
			return false, err
		}
		vy, err := Unpack(eb[i].value)
		if err != nil {
			return false, err
		}
		if !Equal(vx, vy) {
			return false, nil
		}
	}
	return true, nil
}

// Equal reports whether two unstructured values are the same: of the same
// types, their float64s of the same bits (0 and -0 differ, as their JSON
// does). It is reflect.DeepEqual but for the floats' signs of zero.
func Equal(a, b any) bool {
	switch a := a.(type) {
	case float64:
		b, ok := b.(float64)
		return ok && math.Float64bits(a) == math.Float64bits(b)
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) || (a == nil) != (b == nil) {
			return false
		}
		for k, v := range a {
			w, ok := b[k]
			if !ok || !Equal(v, w) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) || (a == nil) != (b == nil) {
			return false
		}
		for i := range a {
			if !Equal(a[i], b[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

// entry is a packed map's entry: its key, and its value still packed.
type entry struct{ key, value string }

// entries reads the packed map p's entries but those of the keys skip.
func entries(p string, skip []string) ([]entry, error) {
	d := unpacker{p: p}
	if len(p) == 0 || p[0] != tagMap {
		return nil, errors.New("a packed map was expected")
	}
	d.i++
	n, err := d.count()
	if err != nil {
		return nil, err
	}
	out := make([]entry, 0, n)
	for range n {
		k, err := d.string()
		if err != nil {
			return nil, err
		}
		start := d.i
		if err := d.skip(1); err != nil {
			return nil, fmt.Errorf("packed value at byte %d: %w", d.i, err)
		}
		if !slices.Contains(skip, k) {
			out = append(out, entry{key: k, value: p[start:d.i]})
		}
	}
	if d.i != len(p) {
		return nil, errors.New("bytes after the value")
	}
	return out, nil
}

// skip passes over one value, as value would read it, without building it.
func (d *unpacker) skip(depth int) error {
	if depth > maxPackedDepth {
		return errors.New("nested too deeply")
	}
	if d.i >= len(d.p) {
		return errTruncated
	}
	tag := d.p[d.i]
	d.i++
	switch tag {
	case tagNil, tagFalse, tagTrue:
		return nil
	case tagInt:
		_, w := varint(d.p[d.i:])
		if w <= 0 {
			return errTruncated
		}
		d.i += w
		return nil
	case tagFloat:
		if len(d.p)-d.i < 8 {
			return errTruncated
		}
		d.i += 8
		return nil
	case tagString, tagCommon:
		d.i--
		_, err := d.string()
		return err
	case tagMap, tagList:
		n, err := d.count()
		if err != nil {
			return err
		}
		for range n {
			if tag == tagMap {
				if _, err := d.string(); err != nil {
					return err
				}
			}
			if err := d.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("unknown tag %d", tag)
}
