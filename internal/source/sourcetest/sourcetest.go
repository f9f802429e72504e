// Package sourcetest holds the checks of package source's contract that
// the fuzz targets of its consumers (ghpoll, natsjs, kafkasrc) share,
// used by tests only. Package source's own tests cannot import it (it
// imports source); they use internal/fuzzcheck for the generic parts.
package sourcetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/opkit-dev/opkit/internal/fuzzcheck"
	"github.com/opkit-dev/opkit/internal/jsondepth"
	"github.com/opkit-dev/opkit/internal/source"
)

// bound is the longest source.Payload may take to read one body.
const bound = 2 * time.Second

// CheckBody checks the sink's reading of a message's body
// (source.Payload, as internal/delivery's checkMessage decodes it): JSON
// at most jsondepth.Max deep is accepted and re-encodes as itself, but
// for a number past float64's range; anything else is a 400
// *source.Refusal saying what it is.
func CheckBody(t testing.TB, body []byte) {
	t.Helper()
	var payload any
	var err error
	fuzzcheck.Within(t, "source.Payload", bound, func() { payload, err = source.Payload(body) })
	depth, valid := fuzzcheck.JSONDepth(body)
	if err != nil {
		var ref *source.Refusal
		switch {
		case !errors.As(err, &ref):
			t.Fatalf("the body is refused with %T %v, not a *source.Refusal", err, err)
		case ref.Status != http.StatusBadRequest || ref.Reason == "" || !utf8.ValidString(ref.Reason) || len(ref.Reason) > 1024:
			t.Fatalf("the body is refused %d %.300q: want a 400 with a short reason", ref.Status, ref.Reason)
		case !valid && !strings.HasPrefix(ref.Reason, "the body is"):
			t.Errorf("a body that is not JSON refused as %q", ref.Reason)
		case valid && depth > jsondepth.Max && !strings.Contains(ref.Reason, fmt.Sprintf("nested deeper than %d", jsondepth.Max)):
			t.Errorf("a body %d deep refused as %q", depth, ref.Reason)
		case valid && depth <= jsondepth.Max && !strings.Contains(ref.Reason, "number"):
			t.Errorf("valid JSON %d deep refused as %q", depth, ref.Reason)
		}
		return
	}
	if !valid || depth > jsondepth.Max {
		t.Fatalf("accepted a body that is not JSON at most %d deep (valid %v, %d deep): %.200q", jsondepth.Max, valid, depth, body)
	}
	data, err := json.Marshal(payload)
	var back any
	if err != nil || json.Unmarshal(data, &back) != nil || !reflect.DeepEqual(back, payload) {
		t.Fatalf("the payload of %.200q does not re-encode as JSON: %.200q, %v", body, data, err)
	}
}
