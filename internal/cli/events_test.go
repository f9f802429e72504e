package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/internal/archive"
)

// archiveOfDeliveries records, in a new archive, the deliveries of two
// operators: ci (sources github and gitlab) and billing (stripe), one of
// each outcome, refused ones for a bad signature and for a replay, and one
// three hours old. It returns the archive's path, the deliveries' ids by
// name and the id of the one run recorded (push's).
func archiveOfDeliveries(t *testing.T) (path string, ids map[string]string, runID string) {
	t.Helper()
	ctx := t.Context()
	path = filepath.Join(t.TempDir(), "runs.db")
	store, err := archive.OpenSQLite(ctx, path, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	now := time.Now()
	run := &archive.Run{ID: archive.NewID(now.Add(-5 * time.Minute)), Operator: "ci", Handler: "build", Namespace: "ci", Name: "build-1",
		StartedAt: now.Add(-5 * time.Minute), Attempt: 1}
	if err := store.Insert(ctx, run); err != nil {
		t.Fatal(err)
	}
	ids = map[string]string{}
	for _, d := range []struct {
		name, op, source, event, deliveryID string
		ago                                 time.Duration
		outcome                             archive.DeliveryOutcome
		reason                              string
		runs                                []string
	}{
		{"old", "ci", "github", "push", "d-0", 3 * time.Hour, archive.DeliveryHandled, "", nil},
		{"push", "ci", "github", "push", "d-1", 5 * time.Minute, archive.DeliveryHandled, "", []string{run.ID}},
		// A redelivery of d-1: refused by the archive, recorded as such.
		{"replay", "ci", "github", "push", "d-1", 4 * time.Minute, archive.DeliveryRefused, "", nil},
		{"forged", "ci", "github", "push", "d-2", 3 * time.Minute, archive.DeliveryRefused, "bad signature", nil},
		{"comment", "ci", "github", "issue_comment", "d-3", 150 * time.Second, archive.DeliveryHandled, "",
			[]string{archive.NewID(now), archive.NewID(now)}},
		{"mr", "ci", "gitlab", "Merge Request Hook", "", 2 * time.Minute, archive.DeliveryFailed,
			"creating ConfigMap ci/mr-7: admission webhook \"policy.example.com\" denied the request: the label team is required on every object", nil},
		// Accepted, and refused by its handler: Handled, nothing done.
		{"turned", "ci", "github", "issue_comment", "d-4", 170 * time.Second, archive.DeliveryHandled,
			"refused by handler deploy: mallory is not a member of ci/deployers, who alone may deploy to production", []string{run.ID}},
		{"invoice", "billing", "stripe", "invoice.paid", "evt_1", time.Minute, archive.DeliveryPending, "", nil},
	} {
		rec := &archive.Delivery{Operator: d.op, Source: d.source, Event: d.event, DeliveryID: d.deliveryID, ReceivedAt: now.Add(-d.ago),
			Headers: map[string][]string{"Content-Type": {"application/json"}}, Payload: []byte(`{"n":1}`)}
		if d.outcome == archive.DeliveryRefused && d.name != "replay" {
			rec.Outcome, rec.Reason = archive.DeliveryRefused, d.reason
		}
		err := store.RecordDelivery(ctx, rec)
		if errors.Is(err, archive.ErrDuplicateDelivery) && d.name == "replay" {
			rec.ID, rec.Outcome, rec.Reason = "", archive.DeliveryRefused, "replay of delivery "+d.deliveryID
			err = store.RecordDelivery(ctx, rec)
		} else if d.name == "replay" {
			t.Fatalf("a redelivery of d-1 was not refused: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		if d.outcome == archive.DeliveryHandled || d.outcome == archive.DeliveryFailed {
			rec.Outcome, rec.Reason, rec.Runs = d.outcome, d.reason, d.runs
			if err := store.FinishDelivery(ctx, rec); err != nil {
				t.Fatal(err)
			}
		}
		ids[d.name] = rec.ID
	}
	return path, ids, run.ID
}

// opkit runs Main with args and fails the test unless it exits 0.
func opkit(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := Main(args, &stdout, &stderr); code != 0 {
		t.Fatalf("opkit %s: exit %d: %s", strings.Join(args, " "), code, stderr.String())
	}
	return stdout.String()
}

func TestEventsFilterByOperatorSourceOutcomeAndAge(t *testing.T) {
	path, ids, _ := archiveOfDeliveries(t)
	for _, tc := range []struct {
		flags []string
		want  []string // newest first
	}{
		{nil, []string{"invoice", "mr", "comment", "turned", "forged", "replay", "push", "old"}},
		{[]string{"--operator", "billing"}, []string{"invoice"}},
		{[]string{"--source", "github"}, []string{"comment", "turned", "forged", "replay", "push", "old"}},
		// Every refusal: the handler's and the source's.
		{[]string{"--refused"}, []string{"turned", "forged", "replay"}},
		{[]string{"--operator", "ci", "--refused"}, []string{"turned", "forged", "replay"}},
		{[]string{"--refused", "--outcome", "Handled"}, []string{"turned"}},
		{[]string{"--outcome", "Handled"}, []string{"comment", "turned", "push", "old"}},
		// Outcomes are read in any case.
		{[]string{"--outcome", "failed"}, []string{"mr"}},
		{[]string{"--refused", "--outcome", "Refused"}, []string{"forged", "replay"}},
		{[]string{"--since", "1h"}, []string{"invoice", "mr", "comment", "turned", "forged", "replay", "push"}},
		{[]string{"--since", "165s", "--source", "github"}, []string{"comment"}},
		{[]string{"--operator", "ci", "--source", "gitlab", "--outcome", "Failed"}, []string{"mr"}},
		{[]string{"--operator", "billing", "--refused"}, nil},
		{[]string{"--operator", "nobody"}, nil},
	} {
		out := opkit(t, append([]string{"events", "--archive", path, "-o", "json"}, tc.flags...)...)
		var page archive.DeliveryPage
		if err := json.Unmarshal([]byte(out), &page); err != nil {
			t.Fatalf("%v: %v in %s", tc.flags, err, out)
		}
		var got, want []string
		for _, d := range page.Deliveries {
			got = append(got, d.ID)
		}
		for _, name := range tc.want {
			want = append(want, ids[name])
		}
		if !slices.Equal(got, want) {
			t.Errorf("opkit events %s: deliveries %v, want %v (%q)", strings.Join(tc.flags, " "), got, want, tc.want)
		}
	}
}

func TestEventsRejectFlagsThatSelectNothingOrAreNotUnderstood(t *testing.T) {
	path, _, _ := archiveOfDeliveries(t)
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--outcome", "Done"}, `--outcome "Done": want one of Pending, Handled, Failed, Refused`},
		{[]string{"--refused", "--outcome", "Failed"}, "--refused and --outcome Failed select nothing together"},
		{[]string{"--refused", "--outcome", "pending"}, "--refused and --outcome Pending select nothing together"},
		{[]string{"--since", "2d"}, `--since "2d": want how far back to look`},
		{[]string{"--since", "-1h"}, `--since "-1h"`},
		{[]string{"-o", "yaml"}, `-o "yaml": want table, wide or json`},
		// A delivery's id is shown with show, as a run's log with logs.
		{[]string{"01JABCDEFGHJKMNPQR"}, "opkit events show 01JABCDEFGHJKMNPQR"},
	} {
		var stdout, stderr bytes.Buffer
		args := append([]string{"events", "--archive", path}, tc.flags...)
		if code := Main(args, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("opkit events %s: exit %d, stderr %q; want 1 and %q", strings.Join(tc.flags, " "), code, stderr.String(), tc.want)
		}
	}
}

// rowsByID reads an opkit events table: each row's fields by its ID.
func rowsByID(t *testing.T, table string) (header []string, rows map[string]string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(table), "\n")
	header = strings.Fields(lines[0])
	rows = map[string]string{}
	for _, line := range lines[1:] {
		rows[strings.Fields(line)[0]] = line
	}
	return header, rows
}

func TestEventsListRefusedDeliveriesWithWhy(t *testing.T) {
	path, ids, _ := archiveOfDeliveries(t)
	out := opkit(t, "events", "--archive", path, "--refused")
	header, rows := rowsByID(t, out)
	if want := []string{"ID", "OPERATOR", "SOURCE", "EVENT", "DELIVERY", "OUTCOME", "REASON", "RUNS", "AGE"}; !slices.Equal(header, want) {
		t.Errorf("columns %v, want %v", header, want)
	}
	if len(rows) != 3 {
		t.Fatalf("%d rows, want the 3 refused deliveries (2 by the source, 1 by a handler):\n%s", len(rows), out)
	}
	for name, want := range map[string]string{
		"forged": "d-2 Refused bad signature -",
		"replay": "d-1 Refused replay of delivery d-1 -",
		"turned": "d-4 Handled refused by handler deploy: mallory is not a member of ci/...",
	} {
		if row := rows[ids[name]]; !strings.Contains(strings.Join(strings.Fields(row), " "), want) {
			t.Errorf("the %s delivery reads %q, want %q in it:\n%s", name, row, want, out)
		}
	}
}

func TestEventsTableCutsALongReasonAndCountsRuns(t *testing.T) {
	path, ids, runID := archiveOfDeliveries(t)
	out := opkit(t, "events", "--archive", path)
	_, rows := rowsByID(t, out)
	mr := rows[ids["mr"]]
	if !strings.Contains(mr, "creating ConfigMap ci/mr-7: admission webhook") || !strings.Contains(mr, "...") ||
		strings.Contains(mr, "on every object") {
		t.Errorf("the failed delivery's reason is not cut to the table's width:\n%s", out)
	}
	// RUNS is the run's id when one, the count when several, - when none.
	for name, want := range map[string]string{"push": runID, "comment": "2", "invoice": "-", "forged": "-"} {
		f := strings.Fields(rows[ids[name]])
		if got := f[len(f)-2]; got != want {
			t.Errorf("the %s delivery's RUNS reads %q, want %q:\n%s", name, got, want, out)
		}
	}
	if f := strings.Fields(rows[ids["old"]]); f[len(f)-1] != "3h" {
		t.Errorf("a delivery of three hours ago is %s old:\n%s", f[len(f)-1], out)
	}
}

func TestEventsWideTableShowsTheReasonWhole(t *testing.T) {
	path, ids, _ := archiveOfDeliveries(t)
	out := opkit(t, "events", "--archive", path, "--refused", "-o", "wide")
	_, rows := rowsByID(t, out)
	for name, want := range map[string]string{
		"turned": "refused by handler deploy: mallory is not a member of ci/deployers, who alone may deploy to production",
		"forged": "bad signature",
	} {
		if row := strings.Join(strings.Fields(rows[ids[name]]), " "); !strings.Contains(row, want) || strings.Contains(row, "...") {
			t.Errorf("the %s delivery reads %q in -o wide, want its reason whole, %q:\n%s", name, row, want, out)
		}
	}
	out = opkit(t, "events", "--archive", path, "-o", "wide")
	if _, rows = rowsByID(t, out); !strings.Contains(rows[ids["mr"]], "the label team is required on every object") {
		t.Errorf("the failed delivery's reason is cut in -o wide:\n%s", out)
	}
}

func TestEventsPrintThePageAsJSONWithoutPayloads(t *testing.T) {
	path, ids, _ := archiveOfDeliveries(t)
	out := opkit(t, "events", "--archive", path, "-o", "json", "--limit", "2")
	var page archive.DeliveryPage
	if err := json.Unmarshal([]byte(out), &page); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if len(page.Deliveries) != 2 || page.Deliveries[0].ID != ids["invoice"] || page.Deliveries[1].ID != ids["mr"] || page.Next == "" {
		t.Fatalf("a page of 2: %s", out)
	}
	if mr := page.Deliveries[1]; mr.Outcome != archive.DeliveryFailed || !strings.HasPrefix(mr.Reason, "creating ConfigMap") ||
		mr.Operator != "ci" || mr.Source != "gitlab" || mr.Event != "Merge Request Hook" || mr.HandledAt.IsZero() {
		t.Errorf("the failed delivery in JSON: %+v", mr)
	}
	if strings.Contains(out, `"payload"`) {
		t.Errorf("the list carries payloads: %s", out)
	}
	// The next page follows from the cursor.
	out = opkit(t, "events", "--archive", path, "-o", "json", "--limit", "2", "--cursor", page.Next)
	page = archive.DeliveryPage{}
	if err := json.Unmarshal([]byte(out), &page); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if len(page.Deliveries) != 2 || page.Deliveries[0].ID != ids["comment"] {
		t.Errorf("the second page: %s", out)
	}
}

// bigJSON is a JSON payload of about size bytes.
func bigJSON(size int) []byte {
	b := []byte(`{"action":"created","commits":[`)
	for i := 0; len(b) < size; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `{"n":%d,"message":"fix the \"flaky\" test {%d} [again]","added":[]}`, i, i)
	}
	return append(b, "]}"...)
}

func TestEventsShowWhatADeliveryCausedWithItsSecretsRedacted(t *testing.T) {
	ctx := t.Context()
	path, _, runID := archiveOfDeliveries(t)
	store, err := archive.OpenSQLite(ctx, path, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The payload as received, secrets and all; the headers as an engine
	// that did not redact them would have recorded them.
	payload := `{"action":"created","installation":{"id":7,"access_tokens_url":"https://api.github.com/app/installations/7/access_tokens"},` +
		`"token":"ghs_16C7e42F292c6912E7710c838347Ae178B4a","comment":{"body":"/deploy with password=hunter2"}}`
	d := &archive.Delivery{Operator: "ci", Source: "github", Event: "issue_comment", DeliveryID: "72d3162e-cc78-11e3-81ab-4c9367dc0958",
		Headers: map[string][]string{"Content-Type": {"application/json"}, "X-Hub-Signature-256": {"sha256=0123abcd"}, "Authorization": {"Bearer s3cr3t"}},
		Payload: []byte(payload)}
	if err := store.RecordDelivery(ctx, d); err != nil {
		t.Fatal(err)
	}
	gone := archive.NewID(time.Now())
	d.Outcome, d.Runs, d.Objects = archive.DeliveryHandled, []string{runID, gone}, []string{"ConfigMap ci/build-1"}
	d.Reason = "refused by handler deploy: alice is not a member of packit/deployers"
	if err := store.FinishDelivery(ctx, d); err != nil {
		t.Fatal(err)
	}
	_ = store.Close()

	out := opkit(t, "events", "show", d.ID, "--archive", path)
	for _, want := range []string{
		"Delivery:     " + d.ID,
		"Sender's id:  72d3162e-cc78-11e3-81ab-4c9367dc0958",
		"Outcome:      Handled",
		"Reason:       refused by handler deploy: alice is not a member of packit/deployers\n",
		"  Authorization: [redacted]\n",
		"  X-Hub-Signature-256: [redacted]\n",
		"  Content-Type: application/json\n",
		"  run " + runID + "  build",
		"opkit logs " + runID + "\n",
		"  run " + gone + "  no longer in the archive\n",
		"  ConfigMap ci/build-1\n",
		"Payload (JSON, " + fmt.Sprint(len(payload)) + " B, secrets redacted):\n{\n  \"action\": \"created\",\n  \"installation\": {\n    \"id\": 7,\n" +
			"    \"access_tokens_url\": \"https://api.github.com/app/installations/7/access_tokens\"\n  },\n  \"token\": \"[redacted]\",\n" +
			"  \"comment\": {\n    \"body\": \"/deploy with password=[redacted]\"\n  }\n}\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("opkit events show lacks %q:\n%s", want, head(out))
		}
	}
	for _, secret := range []string{"ghs_16C7", "hunter2", "s3cr3t", "0123abcd"} {
		if strings.Contains(out, secret) {
			t.Errorf("opkit events show prints the secret %q:\n%s", secret, out)
		}
	}
}

func TestEventsShowACutJSONPayloadIndentedRedactedAndMarked(t *testing.T) {
	ctx := t.Context()
	path, _, _ := archiveOfDeliveries(t)
	store, err := archive.OpenSQLite(ctx, path, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Refused as too large: the archive keeps its first 256 KiB.
	payload := bigJSON(1258291) // 1.2 MiB
	payload = append([]byte(`{"secret":{"nested":"s3cr3t"},`), payload[1:]...)
	d := &archive.Delivery{Operator: "ci", Source: "github", Event: "push", Outcome: archive.DeliveryRefused,
		Reason: "body of 1.2 MiB is larger than the source's limit of 1.0 MiB", Payload: payload}
	if err := store.RecordDelivery(ctx, d); err != nil {
		t.Fatal(err)
	}
	_ = store.Close()

	out := opkit(t, "events", "show", d.ID, "--archive", path)
	for _, want := range []string{
		"Outcome:      Refused",
		"Reason:       body of 1.2 MiB is larger than the source's limit of 1.0 MiB\n",
		"Caused: nothing; a refused delivery is never handled\n",
		"Payload (JSON, 1.2 MiB, cut at 256 KiB, secrets redacted):\n{\n  \"secret\": \"[redacted]\",\n  \"action\": \"created\",\n  \"commits\": [\n    {\n      \"n\": 0,\n" +
			"      \"message\": \"fix the \\\"flaky\\\" test {0} [again]\",\n      \"added\": []\n    },\n    {\n",
		"\n[opkit: payload cut at 256 KiB of 1.2 MiB; the archive keeps a refused payload's start]\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("opkit events show lacks %q:\n%s", want, head(out))
		}
	}
	if strings.Contains(out, "s3cr3t") {
		t.Error("opkit events show prints a secret member's value")
	}
	if !strings.HasSuffix(out, "payload's start]\n") {
		t.Errorf("the payload's cut is not marked at its end:\n...%s", out[max(len(out)-300, 0):])
	}
}

// head is the start of a long output, for a failure's message.
func head(s string) string {
	if len(s) > 2000 {
		return s[:2000] + "..."
	}
	return s
}

func TestEventsShowAsJSONRedactsThePayloadAndHeaders(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "runs.db")
	store, err := archive.OpenSQLite(ctx, path, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	asJSON := &archive.Delivery{Operator: "ci", Source: "github", Event: "push", DeliveryID: "d-1",
		Headers: map[string][]string{"X-Hub-Signature-256": {"sha256=00ff"}, "Accept": {"*/*"}},
		Payload: []byte(`{"ref":"main","pusher":{"name":"alice","password":"hunter2"},"n":1.50}`)}
	asText := &archive.Delivery{Operator: "ci", Source: "form", Outcome: archive.DeliveryRefused,
		Reason: "content type application/x-www-form-urlencoded; expected application/json", Payload: []byte("token=abc&ref=main")}
	for _, d := range []*archive.Delivery{asJSON, asText} {
		if err := store.RecordDelivery(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	_ = store.Close()

	var got struct {
		archive.Delivery
		Payload     json.RawMessage `json:"payload"`
		PayloadText *string         `json:"payloadText"`
	}
	out := opkit(t, "events", "show", asJSON.ID, "--archive", path, "-o", "json")
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, got.Payload); err != nil {
		t.Fatalf("the payload is not JSON: %v in %s", err, out)
	}
	if want := `{"ref":"main","pusher":{"name":"alice","password":"[redacted]"},"n":1.50}`; compact.String() != want || got.PayloadText != nil {
		t.Errorf("-o json's payload is %s (text %v), want %s", compact.String(), got.PayloadText, want)
	}
	if got.ID != asJSON.ID || got.Event != "push" || got.DeliveryID != "d-1" || got.Outcome != archive.DeliveryPending ||
		!slices.Equal(got.Headers["X-Hub-Signature-256"], []string{"[redacted]"}) || !slices.Equal(got.Headers["Accept"], []string{"*/*"}) {
		t.Errorf("-o json's fields: %s", out)
	}

	got.Payload, got.PayloadText = nil, nil
	out = opkit(t, "events", "show", asText.ID, "--archive", path, "-o", "json")
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if got.PayloadText == nil || *got.PayloadText != "token=[redacted]&ref=main" || got.Payload != nil {
		t.Errorf("-o json of a payload that is not JSON: %s", out)
	}
	for _, secret := range []string{"hunter2", "00ff", "abc&"} {
		if strings.Contains(out, secret) {
			t.Errorf("-o json prints the secret %q: %s", secret, out)
		}
	}
	var stderr bytes.Buffer
	if code := Main([]string{"events", "show", asText.ID, "--archive", path, "-o", "yaml"}, &bytes.Buffer{}, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), `-o "yaml": want text or json`) {
		t.Errorf("opkit events show -o yaml: exit %d, %q", code, stderr.String())
	}
}

func TestEventsShowSurvivesAStoredDepthBomb(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "runs.db")
	store, err := archive.OpenSQLite(ctx, path, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Accepted by an engine before deliveries were held to a depth: 20 KB
	// that Go's encoding/json takes (its limit is 10,000 levels).
	bomb := []byte(strings.Repeat("[", 10_000) + strings.Repeat("]", 10_000))
	d := &archive.Delivery{Operator: "ci", Source: "github", Event: "push", DeliveryID: "d-deep", Payload: bomb}
	if err := store.RecordDelivery(ctx, d); err != nil {
		t.Fatal(err)
	}
	_ = store.Close()

	out := opkit(t, "events", "show", d.ID, "--archive", path)
	if len(out) > 30_000 || !strings.Contains(out, "Payload (JSON, 19.5 KiB, secrets redacted):\n[[[[") ||
		!strings.HasSuffix(out, "]]]]\n[opkit: payload nested deeper than 100 objects and arrays: shown as one line, not indented]\n") {
		t.Errorf("opkit events show of a payload 10,000 deep printed %d bytes:\n%s", len(out), head(out))
	}
	out = opkit(t, "events", "show", d.ID, "--archive", path, "-o", "json")
	var got struct {
		Payload     json.RawMessage `json:"payload"`
		PayloadText *string         `json:"payloadText"`
		PayloadNote string          `json:"payloadNote"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("-o json: %v in %s", err, head(out))
	}
	if got.Payload != nil || got.PayloadText == nil || *got.PayloadText != string(bomb) || got.PayloadNote != "nested too deep to be printed as JSON: given as text" {
		t.Errorf("-o json of a payload 10,000 deep: %s", head(out))
	}
}

func TestEventsShowAnUnknownIDSaysSo(t *testing.T) {
	path, _, runID := archiveOfDeliveries(t)
	unknown := archive.NewID(time.Now())
	missing := filepath.Join(t.TempDir(), "nothing-here.db")
	var runsErr bytes.Buffer
	Main([]string{"runs", "--archive", missing}, &bytes.Buffer{}, &runsErr)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"events", "show", unknown, "--archive", path},
			"opkit: delivery " + unknown + ": not found in " + path + "; opkit events lists the deliveries it keeps\n"},
		{[]string{"events", "show", "42", "--archive", path}, "opkit: \"42\" is not a delivery id (opkit events lists them)\n"},
		{[]string{"events", "show", runID, "--archive", path},
			"opkit: " + runID + " is a run, not a delivery: opkit logs " + runID + " prints its log\n"},
		// An archive that is not there reads as it does to opkit runs.
		{[]string{"events", "show", unknown, "--archive", missing}, runsErr.String()},
		{[]string{"events", "--archive", missing}, runsErr.String()},
	} {
		var stdout, stderr bytes.Buffer
		if code := Main(tc.args, &stdout, &stderr); code != 1 || stderr.String() != tc.want {
			t.Errorf("opkit %s: exit %d, stderr %q; want 1 and %q", strings.Join(tc.args, " "), code, stderr.String(), tc.want)
		}
	}
	if !strings.Contains(runsErr.String(), "no run archive at "+missing) {
		t.Errorf("opkit runs on a missing archive: %q", runsErr.String())
	}
}

func TestEventsStripTerminalControlFromWhatTheSenderSent(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "runs.db")
	store, err := archive.OpenSQLite(ctx, path, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := &archive.Delivery{Operator: "ci", Source: "github", Event: "push\x1b]0;pwned\x07", DeliveryID: "d\x1b[2J-1",
		Headers: map[string][]string{"User-Agent": {"\x1b[31mred\x1b[0m"}}, Payload: []byte(hostileLog)}
	if err := store.RecordDelivery(ctx, d); err != nil {
		t.Fatal(err)
	}
	_ = store.Close()
	list := opkit(t, "events", "--archive", path)
	show := opkit(t, "events", "show", d.ID, "--archive", path)
	for name, out := range map[string]string{"events": list, "events show": show} {
		if strings.ContainsAny(out, "\x1b\x07") {
			t.Errorf("opkit %s prints terminal control:\n%q", name, out)
		}
	}
	if !strings.Contains(strings.Join(strings.Fields(list), " "), "ci github push d-1 Pending") || !strings.Contains(show, "User-Agent: red\n") ||
		!strings.Contains(show, "Payload (52 B, secrets redacted):\nred plaincleared done\n") {
		t.Errorf("the cleaned text is not all there:\n%s\n%s", list, show)
	}
}

// A Pending delivery whose handler failed and is retried shows its runs
// so far: opkit events counts them, and opkit events show lists them as
// what it caused so far, rather than "nothing yet".
func TestEventsShowThePendingDeliverysRunsSoFar(t *testing.T) {
	path, ids, _ := archiveOfDeliveries(t)
	store, err := archive.OpenSQLite(t.Context(), path, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var runIDs []string
	for attempt := 1; attempt <= 2; attempt++ {
		r := &archive.Run{ID: archive.NewID(now.Add(time.Duration(attempt) * time.Millisecond)), Operator: "billing", Handler: "book", Trigger: "event",
			Kind: "Operator", Name: "billing", UID: ids["invoice"], Key: "billing/event/stripe/evt_1/book", Attempt: attempt, StartedAt: now}
		if err := store.Insert(t.Context(), r); err != nil {
			t.Fatal(err)
		}
		runIDs = append(runIDs, r.ID)
	}
	_ = store.Close()
	_, rows := rowsByID(t, opkit(t, "events", "--archive", path))
	if f := strings.Fields(rows[ids["invoice"]]); f[len(f)-2] != "2" {
		t.Errorf("the Pending delivery's RUNS reads %q, want 2 (its runs so far)", f[len(f)-2])
	}
	out := opkit(t, "events", "show", ids["invoice"], "--archive", path)
	if !strings.Contains(out, "Caused so far (it is being handled):") || !strings.Contains(out, runIDs[0]) || !strings.Contains(out, runIDs[1]) {
		t.Errorf("opkit events show of a Pending delivery with runs:\n%s\nwant its runs so far", out)
	}
}
