package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// TestPauseAndResumeFromTheCLIAreRecordedWithWhoAndWhy pauses an object
// with opkit pause, changes it, and resumes it with opkit resume: the
// change runs only after the resume, and the engine records both in the
// archive and as Events, with the Kubernetes user the CLI ran as and the
// reasons given; what cannot apply is refused with why.
func TestPauseAndResumeFromTheCLIAreRecordedWithWhoAndWhy(t *testing.T) {
	t.Parallel()
	cl, _ := startPlane(t)
	dir := t.TempDir()
	write := func(name, data string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("handler.sh", keyHandler, 0o755)
	write("keys.yaml", fmt.Sprintf(keysOperator, dir), 0o644)
	archivePath := filepath.Join(dir, "runs.db")
	kc := cl.KubeconfigPath()
	_, out := startOpkit(t, "run", "-f", filepath.Join(dir, "keys.yaml"), "--kubeconfig", kc, "--archive", archivePath)
	waitOutput(t, out, "operator keys: running", 60*time.Second)
	apply := func(a string) {
		t.Helper()
		write("first.yaml", "apiVersion: keys.example.com/v1\nkind: Key\nmetadata: {name: first, namespace: default}\nspec: {a: "+a+"}\n", 0o644)
		if out, err := kubectl(t, kc, "apply", "-f", filepath.Join(dir, "first.yaml")); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	get := func(jsonpath string) string {
		t.Helper()
		out, err := kubectl(t, kc, "get", "key", "first", "-n", "default", "-o", "jsonpath="+jsonpath)
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return out
	}
	apply("one")
	waitRunOutcome(t, archivePath, "first", archive.Succeeded)
	uid := get("{.metadata.uid}")

	res := opkit(t, "", "pause", "default/first", "--reason", "the registry is down", "--kubeconfig", kc, "--archive", archivePath)
	if res.code != 0 || !strings.Contains(res.stdout, "Key default/first: handlers paused by ") {
		t.Fatalf("opkit pause: code %d\nstdout %s\nstderr %s", res.code, res.stdout, res.stderr)
	}
	who := strings.TrimSpace(strings.SplitN(strings.SplitN(res.stdout, "paused by ", 2)[1], ":", 2)[0])
	if who == "" {
		t.Fatalf("opkit pause names nobody: %s", res.stdout)
	}
	if p := v1alpha1.ReadRequest(get("{.metadata.annotations.opkit\\.dev/paused}")); p.By != who || p.Reason != "the registry is down" {
		t.Errorf("the pause annotation holds %+v, want by %s for the registry", p, who)
	}
	record := func(trigger string) archive.Run {
		t.Helper()
		var found archive.Run
		clustertest.Eventually(t, time.Minute, "the "+trigger+" record in the archive", func(context.Context) (bool, error) {
			for _, r := range opkitRuns(t, archivePath, "--object", "default/first") {
				if r.Handler == v1alpha1.PauseHandler && r.Trigger == trigger {
					found = r
					return true, nil
				}
			}
			return false, nil
		})
		return found
	}
	paused := record(v1alpha1.TriggerPaused)
	if paused.Actor != who || paused.Outcome != archive.Succeeded {
		t.Errorf("the pause is recorded with actor %q and outcome %s, want %s and Succeeded", paused.Actor, paused.Outcome, who)
	}
	if res := opkit(t, "", "logs", paused.ID, "--archive", archivePath); !strings.Contains(res.stdout, "handlers paused by "+who+": the registry is down") {
		t.Errorf("the pause's record says %q, want who and why", res.stdout)
	}
	clustertest.Eventually(t, time.Minute, "the Paused condition and Event", func(context.Context) (bool, error) {
		events, _ := kubectl(t, kc, "get", "events", "-n", "default", "--field-selector", "involvedObject.name=first,reason=Paused", "-o", "jsonpath={.items[*].note}{.items[*].message}")
		return get(`{.status.conditions[?(@.type=="Paused")].status}`) == "True" &&
			strings.Contains(events, "handlers paused by "+who+": the registry is down"), nil
	})

	// Paused, a change runs nothing; and a second pause is refused.
	apply("two")
	res = opkit(t, "", "pause", "default/first", "--kubeconfig", kc, "--archive", archivePath)
	if res.code == 0 || !strings.Contains(res.stderr, "is already paused (by "+who) || !strings.Contains(res.stderr, "the registry is down") {
		t.Errorf("a second opkit pause: code %d, stderr %s; want it refused, saying who paused and why", res.code, res.stderr)
	}
	clustertest.Eventually(t, time.Minute, "the change seen while paused", func(context.Context) (bool, error) {
		return get("{.metadata.generation}") == "2" && get(`{.status.conditions[?(@.type=="Paused")].observedGeneration}`) == "2", nil
	})
	if data, _ := os.ReadFile(filepath.Join(dir, "keys")); strings.Contains(string(data), uid+"/2/record") {
		t.Fatalf("the handler ran for generation 2 while the object was paused: %s", data)
	}

	res = opkit(t, "", "resume", "default/first", "--reason", "the registry is back", "--kubeconfig", kc, "--archive", archivePath)
	if res.code != 0 || !strings.Contains(res.stdout, "Key default/first: handlers resumed by "+who+": the registry is back") {
		t.Fatalf("opkit resume: code %d\nstdout %s\nstderr %s", res.code, res.stdout, res.stderr)
	}
	resumed := record(v1alpha1.TriggerResumed)
	if resumed.Actor != who {
		t.Errorf("the resume is recorded with actor %q, want %s", resumed.Actor, who)
	}
	if res := opkit(t, "", "logs", resumed.ID, "--archive", archivePath); !strings.Contains(res.stdout, "handlers resumed by "+who+": the registry is back") {
		t.Errorf("the resume's record says %q, want who and why", res.stdout)
	}
	// What came due meanwhile runs; the request is consumed.
	clustertest.Eventually(t, time.Minute, "generation 2 handled after the resume", func(context.Context) (bool, error) {
		data, _ := os.ReadFile(filepath.Join(dir, "keys"))
		return strings.Contains(string(data), uid+"/2/record") && get("{.metadata.annotations.opkit\\.dev/resumed}") == "" &&
			get(`{.status.conditions[?(@.type=="Paused")].status}`) == "", nil
	})
	if n := len(opkitRuns(t, archivePath, "--object", "default/first", "--handler", v1alpha1.PauseHandler)); n != 2 {
		t.Errorf("%d pause records, want 2: one pause, one resume", n)
	}

	// What cannot apply is refused, with why.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"resume", "default/first"}, "Key default/first is not paused: nothing to resume"},
		{[]string{"pause", "default/nosuch"}, "no runs for default/nosuch"},
		{[]string{"pause", "default/nosuch", "--operator", "nobody"}, "there is no Operator nobody in the cluster"},
		// Run from a file, the operator has no Operator to pause as a whole.
		{[]string{"pause", "--operator", "keys", "--all"}, "there is no Operator keys in the cluster"},
		{[]string{"resume", "--all"}, "name it with --operator"},
	} {
		res := opkit(t, "", append(c.args, "--kubeconfig", kc, "--archive", archivePath)...)
		if res.code == 0 || !strings.Contains(res.stderr, c.want) {
			t.Errorf("opkit %s: code %d, stderr %s; want it refused saying %q", strings.Join(c.args, " "), res.code, res.stderr, c.want)
		}
	}
}
