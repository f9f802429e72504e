package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// kubectlApply applies manifest in the test's namespace as a user does,
// with kubectl apply -f, and returns what kubectl printed: its output, or
// on failure an error holding its standard error.
func kubectlApply(t *testing.T, env *clustertest.Env, manifest string) (string, error) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "manifest.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	return clustertest.Kubectl(t, clustertest.Cluster(t).KubeconfigPath(), "apply", "-n", env.Namespace, "-f", file)
}

// applyFirst applies manifest, trying again while kubectl does not know
// the kind yet (a CRD just installed), and fails the test if it is
// refused.
func applyFirst(t *testing.T, env *clustertest.Env, manifest string) {
	t.Helper()
	var last error
	eventually(t, 30*time.Second, "kubectl apply of a valid object", func(context.Context) (bool, error) {
		_, last = kubectlApply(t, env, manifest)
		if last != nil && !strings.Contains(last.Error(), "no matches for kind") && !strings.Contains(last.Error(), "the server could not find the requested resource") {
			return false, last
		}
		return last == nil, nil
	})
}

// refused applies manifest, which the API server must refuse, and
// checks that kubectl's output holds every one of want.
func refused(t *testing.T, env *clustertest.Env, what, manifest string, want ...string) {
	t.Helper()
	out, err := kubectlApply(t, env, manifest)
	if err == nil {
		t.Errorf("%s: kubectl apply passed: %s", what, out)
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: kubectl's output lacks %q:\n%v", what, w, err)
		}
	}
}

// websiteManifest is a Website named name with this spec, as YAML.
func websiteManifest(name, spec string) string {
	return "apiVersion: demo.example.com/v1\nkind: Website\nmetadata: {name: " + name + "}\nspec: " + spec + "\n"
}

// TestWebsiteRulesRefuseABadKubectlApplyWithTheirMessage: the Website
// example's CEL rules (one with a messageExpression, one on spec with a
// fieldPath and a reason), its transition rule and its immutable field
// each refuse a bad kubectl apply with their message in kubectl's output,
// and leave the object as it was; valid applies pass.
func TestWebsiteRulesRefuseABadKubectlApplyWithTheirMessage(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	startEngine(t, env, "../../examples/website/operator.yaml")
	applyFirst(t, env, websiteManifest("hello", `{content: "<h1>hi</h1>", domain: www.example.com}`))
	if out, err := kubectlApply(t, env, websiteManifest("hello", `{content: "<h1>hi</h1>", domain: www.example.com, https: true}`)); err != nil {
		t.Fatalf("turning https on: %v", err)
	} else if !strings.Contains(out, "website.demo.example.com/hello configured") {
		t.Errorf("turning https on: %s", out)
	}

	refused(t, env, "a CEL rule's messageExpression", websiteManifest("bad", `{content: x, domain: Not_A_Domain}`),
		`The Website "bad" is invalid`,
		`spec.domain: Invalid value: "Not_A_Domain": "Not_A_Domain" is not a domain name: use lower-case letters, digits, dots and dashes, like www.example.com`)
	refused(t, env, "a rule on spec, with fieldPath and reason", websiteManifest("bare", `{content: x, https: true}`),
		`spec.domain: Required value: https needs a domain of its own, not localhost`)
	refused(t, env, "a transition rule", websiteManifest("hello", `{content: "<h1>hi</h1>", domain: www.example.com, https: false}`),
		`The Website "hello" is invalid`,
		`spec.https: Invalid value: false: https cannot be turned off once on (browsers that saw it keep asking for it)`)
	refused(t, env, "an immutable field", websiteManifest("hello", `{content: "<h1>hi</h1>", domain: other.example.com, https: true}`),
		`spec.domain: Invalid value: "other.example.com": spec.domain is immutable: it cannot change once the object is created; delete and re-create the object to change it`)

	got := kubectl(t, "get", "-n", env.Namespace, "websites.demo.example.com", "-o", `jsonpath={range .items[*]}{.metadata.name} {.spec.domain} {.spec.https}{"\n"}{end}`)
	if got != "hello www.example.com true\n" {
		t.Errorf("websites after the refusals:\n%s\nwant only hello, as last accepted", got)
	}
}

// volumeOperator has an optional object storage whose optional field
// class is immutable.
const volumeOperator = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: volume}
spec:
  resource:
    group: validation.example.com
    kind: Volume
    versions:
    - name: v1
      schema:
        type: object
        properties:
          storage:
            type: object
            properties:
              class: {type: string}
              size: {type: string}
      immutable: [spec.storage.class]
`

// TestAnImmutableFieldCannotBeAddedRemovedOrChanged: an immutable field
// inside an optional object cannot be set after creation, nor removed
// (alone or with its object), nor changed; its neighbours can.
func TestAnImmutableFieldCannotBeAddedRemovedOrChanged(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	file := filepath.Join(t.TempDir(), "volume.yaml")
	if err := os.WriteFile(file, []byte(volumeOperator), 0o600); err != nil {
		t.Fatal(err)
	}
	startEngine(t, env, file)
	volume := func(name, spec string) string {
		return "apiVersion: validation.example.com/v1\nkind: Volume\nmetadata: {name: " + name + "}\nspec: " + spec + "\n"
	}
	const addedOrRemoved = "spec.storage.class is immutable: it cannot be added or removed once the object is created; delete and re-create the object to change it"
	const changed = "spec.storage.class is immutable: it cannot change once the object is created; delete and re-create the object to change it"

	applyFirst(t, env, volume("a", `{}`))
	refused(t, env, "class added with its object", volume("a", `{storage: {class: fast}}`), "spec.storage.class: Invalid value", addedOrRemoved)
	if _, err := kubectlApply(t, env, volume("a", `{storage: {size: 1Gi}}`)); err != nil {
		t.Errorf("storage without a class added: %v", err)
	}
	refused(t, env, "class added to its object", volume("a", `{storage: {size: 1Gi, class: fast}}`), addedOrRemoved)

	if _, err := kubectlApply(t, env, volume("b", `{storage: {class: fast, size: 1Gi}}`)); err != nil {
		t.Fatal(err)
	}
	refused(t, env, "class changed", volume("b", `{storage: {class: slow, size: 1Gi}}`), "spec.storage.class: Invalid value", changed)
	refused(t, env, "class removed", volume("b", `{storage: {size: 1Gi}}`), addedOrRemoved)
	refused(t, env, "class removed with its object", volume("b", `{}`), addedOrRemoved)
	if _, err := kubectlApply(t, env, volume("b", `{storage: {class: fast, size: 2Gi}}`)); err != nil {
		t.Errorf("a neighbour of the class changed: %v", err)
	}

	got := kubectl(t, "get", "-n", env.Namespace, "volumes.validation.example.com", "-o", `jsonpath={range .items[*]}{.metadata.name} {.spec.storage}{"\n"}{end}`)
	if got != "a {\"size\":\"1Gi\"}\nb {\"class\":\"fast\",\"size\":\"2Gi\"}\n" {
		t.Errorf("volumes after the refusals:\n%s", got)
	}
}
