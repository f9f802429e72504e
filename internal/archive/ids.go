package archive

import (
	"crypto/rand"
	"strings"
	"time"
)

// crockford is Crockford's base32 alphabet, lower-cased: sortable and
// without ambiguous letters.
const crockford = "0123456789abcdefghjkmnpqrstvwxyz"

// NewID returns a run id for a run started at t: 10 characters of
// milliseconds since the epoch, then 8 random ones. Ids sort by start time.
func NewID(t time.Time) string {
	return idPrefix(t) + randomSuffix()
}

func idPrefix(t time.Time) string {
	ms := uint64(max(t.UnixMilli(), 0))
	var b [10]byte
	for i := 9; i >= 0; i-- {
		b[i] = crockford[ms&31]
		ms >>= 5
	}
	return string(b[:])
}

func randomSuffix() string {
	var r [8]byte
	_, _ = rand.Read(r[:])
	for i := range r {
		r[i] = crockford[r[i]&31]
	}
	return string(r[:])
}

// ValidID reports whether s has the form of a run id.
func ValidID(s string) bool {
	if len(s) != 18 {
		return false
	}
	for _, c := range s {
		if !strings.ContainsRune(crockford, c) {
			return false
		}
	}
	return true
}

// TimeOfID returns the start time encoded in a run id, to the millisecond.
func TimeOfID(id string) (time.Time, bool) {
	if !ValidID(id) {
		return time.Time{}, false
	}
	var ms uint64
	for _, c := range id[:10] {
		ms = ms<<5 | uint64(strings.IndexRune(crockford, c))
	}
	return time.UnixMilli(int64(ms)), true
}
