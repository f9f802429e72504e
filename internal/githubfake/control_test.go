package githubfake_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/opkit-dev/opkit/internal/githubfake"
)

// The control API sets up the world and reads it over HTTP, as the
// command serves it: a repository, a merged pull request, a team member,
// a comment whose signed issue_comment delivery is posted where asked;
// a misuse is a 400 naming it, and GitHub's own API still wants the
// token.
func TestTheControlAPISetsUpTheWorldAndSendsACommentsDelivery(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := githubfake.Serve(ln, githubfake.Options{Control: true})
	defer s.Close()
	call := func(method, path, body string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(method, s.URL+githubfake.ControlPath+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		var out map[string]any
		if len(data) > 0 && data[0] == '{' {
			if err := json.Unmarshal(data, &out); err != nil {
				t.Fatalf("%s %s answered %s", method, path, data)
			}
		} else {
			out = map[string]any{"list": string(data)}
		}
		return resp.StatusCode, out
	}

	code, repo := call("POST", "repos", `{"repo":"packit/packit-service"}`)
	if code != http.StatusCreated || len(repo["head"].(string)) != 40 {
		t.Fatalf("POST repos: %d %v", code, repo)
	}
	code, pr := call("POST", "pulls", `{"repo":"packit/packit-service","author":"alice","title":"Fix the worker","commits":2,"merge":true}`)
	if code != http.StatusCreated || pr["merged"] != true || pr["number"] != float64(1) || len(pr["commits"].([]any)) != 2 {
		t.Fatalf("POST pulls: %d %v", code, pr)
	}
	if code, head := call("GET", "head?repo=packit/packit-service", ""); code != http.StatusOK || head["head"] != pr["mergeCommitSha"] {
		t.Errorf("GET head: %d %v; want the merge commit %v", code, head, pr["mergeCommitSha"])
	}
	if code, _ := call("POST", "team-members", `{"org":"packit","team":"deployers","login":"alice"}`); code != http.StatusCreated {
		t.Errorf("POST team-members: %d", code)
	}

	// A comment, delivered signed where asked, as GitHub delivers it.
	var got *http.Request
	var gotBody []byte
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, gotBody = r, must(io.ReadAll(r.Body))
		w.WriteHeader(http.StatusAccepted)
	}))
	defer hook.Close()
	code, out := call("POST", "comments", `{"repo":"packit/packit-service","number":1,"author":"alice","body":"/deploy abc","deliverTo":"`+hook.URL+`/hooks/x","secret":"s3cret"}`)
	delivery, _ := out["delivery"].(map[string]any)
	if code != http.StatusCreated || delivery["status"] != float64(http.StatusAccepted) {
		t.Fatalf("POST comments: %d %v", code, out)
	}
	if got == nil || got.Header.Get("X-GitHub-Event") != "issue_comment" || got.Header.Get("X-Hub-Signature-256") != githubfake.Sign("s3cret", gotBody) ||
		!bytes.Contains(gotBody, []byte(`"body":"/deploy abc"`)) {
		t.Errorf("the delivery came as %v\n%s", got, gotBody)
	}
	if code, list := call("GET", "comments?repo=packit/packit-service&number=1", ""); code != http.StatusOK || !strings.Contains(list["list"].(string), `"author":"alice"`) {
		t.Errorf("GET comments: %d %v", code, list)
	}

	// A misuse is a 400 naming it; the fake goes on.
	for _, c := range []struct{ method, path, body, want string }{
		{"POST", "repos", `{"repo":"packit/packit-service"}`, "exists already"},
		{"POST", "comments", `{"repo":"nobody/nothing","number":1,"author":"a","body":"b"}`, "no repository nobody/nothing"},
		{"POST", "pulls", `{"repo":"packit/packit-service"}`, "missing"},
		{"POST", "repos", `{"repository":"x/y"}`, "unknown field"},
	} {
		if code, out := call(c.method, c.path, c.body); code != http.StatusBadRequest || !strings.Contains(out["message"].(string), c.want) {
			t.Errorf("%s %s %s: %d %v; want 400 naming %q", c.method, c.path, c.body, code, out, c.want)
		}
	}
	resp, err := http.Get(s.URL + "/repos/packit/packit-service/commits/main")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GitHub's API without the token: %d; want 401", resp.StatusCode)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
