package githubfake_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/opkit-dev/opkit/internal/githubfake"
)

// Sign gives the X-Hub-Signature-256 GitHub computes: this is the example
// of GitHub's documentation ("Validating webhook deliveries").
func ExampleSign() {
	fmt.Println(githubfake.Sign("It's a Secret to Everybody", []byte("Hello, World!")))
	// Output: sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17
}

// A delivery carries what a receiver checks: the event, the delivery id
// and the signature of the body.
func ExampleDelivery_Send() {
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Println(r.Header.Get("Content-Type"), r.Header.Get("X-GitHub-Event"), r.Header.Get("X-GitHub-Delivery"))
		if r.Header.Get("X-Hub-Signature-256") != githubfake.Sign("s3cret", body) {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer receiver.Close()

	d := githubfake.Delivery{ID: "72d3162e-cc78-11e3-81ab-4c9367dc0958", Event: "ping", Payload: map[string]any{"zen": "Keep it logically awesome."}, Secret: "s3cret"}
	resp, err := d.Send(context.Background(), receiver.URL)
	fmt.Println(resp.Status, err)
	d.Signature = githubfake.Sign("another secret", []byte(`{"zen":"Keep it logically awesome."}`))
	resp, err = d.Send(context.Background(), receiver.URL)
	fmt.Println(resp.Status, err)
	// Output:
	// application/json ping 72d3162e-cc78-11e3-81ab-4c9367dc0958
	// 202 <nil>
	// application/json ping 72d3162e-cc78-11e3-81ab-4c9367dc0958
	// 401 <nil>
}
