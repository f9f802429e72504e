package manifests_test

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/manifests"
)

func compileExamples(t *testing.T, names ...string) []*definition.Definition {
	t.Helper()
	var files []string
	for _, name := range names {
		files = append(files, filepath.Join("..", "..", "examples", name, "operator.yaml"))
	}
	defs, err := definition.CompileFiles(files...)
	if err != nil {
		t.Fatal(err)
	}
	return defs
}

func compileYAML(t *testing.T, doc string) []*definition.Definition {
	t.Helper()
	srcs, err := definition.Load("test.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	var defs []*definition.Definition
	for _, src := range srcs {
		d, err := definition.Compile(src)
		if err != nil {
			t.Fatal(err)
		}
		defs = append(defs, d)
	}
	return defs
}

// request is what the API server authorizes: a verb on a resource (with
// its subresource) of a group, in a namespace ("" for all, or a
// cluster-scoped resource), on an object by name ("" for a list, a watch
// or a POST create).
type request struct {
	verb, group, resource, namespace, name string
}

func (r request) String() string {
	s := r.verb + " " + r.resource
	if r.group != "" {
		s += "." + r.group
	}
	if r.name != "" {
		s += " " + r.name
	}
	if r.namespace != "" {
		s += " in " + r.namespace
	}
	return s
}

func parse(s string) request {
	// "verb resource.group [name] [in namespace]"
	f := strings.Fields(s)
	r := request{verb: f[0]}
	r.resource, r.group, _ = strings.Cut(f[1], ".")
	rest := f[2:]
	if len(rest) >= 2 && rest[len(rest)-2] == "in" {
		r.namespace = rest[len(rest)-1]
		rest = rest[:len(rest)-2]
	}
	if len(rest) == 1 {
		r.name = rest[0]
	}
	return r
}

// allows decides as RBAC does: a ClusterRole's rule in any namespace, a
// Role's in its own.
func allows(rules *manifests.Rules, engineNamespace string, r request) bool {
	match := func(rs []manifests.Rule) bool {
		for _, rule := range rs {
			if slices.Contains(rule.APIGroups, r.group) && slices.Contains(rule.Resources, r.resource) && slices.Contains(rule.Verbs, r.verb) &&
				(len(rule.ResourceNames) == 0 || (r.name != "" && slices.Contains(rule.ResourceNames, r.name))) {
				return true
			}
		}
		return false
	}
	if match(rules.Cluster) {
		return true
	}
	if r.namespace == "" {
		return false
	}
	if r.namespace == engineNamespace && match(rules.Engine) {
		return true
	}
	return match(rules.Namespaces[r.namespace])
}

func TestRulesOfTheExamplesGrantWhatTheEngineDoesAndNoMore(t *testing.T) {
	for _, tc := range []struct {
		example        string
		opts           manifests.Options
		allowed        []string
		denied         []string
		namespaceRoles []string
	}{{
		example: "printer",
		allowed: []string{
			"list customresourcedefinitions.apiextensions.k8s.io", "watch customresourcedefinitions.apiextensions.k8s.io",
			"get customresourcedefinitions.apiextensions.k8s.io printers.demo.example.com",
			"create customresourcedefinitions.apiextensions.k8s.io printers.demo.example.com",
			"patch customresourcedefinitions.apiextensions.k8s.io printers.demo.example.com",
			"patch customresourcedefinitions.apiextensions.k8s.io operators.opkit.dev",
			"list printers.demo.example.com", "watch printers.demo.example.com", "patch printers/status.demo.example.com x in a",
			"update printers/finalizers.demo.example.com x in a",
			"create pods x in a", "patch pods x in a", "delete pods x in a", "get pods x in a", "list pods", "watch pods",
			"create events.events.k8s.io in a", "patch events.events.k8s.io e in default",
			"list operators.opkit.dev", "watch operators.opkit.dev", "get operators.opkit.dev printer", "patch operators/status.opkit.dev printer",
		},
		denied: []string{
			"list secrets", "get secrets x in a", "delete customresourcedefinitions.apiextensions.k8s.io printers.demo.example.com",
			"patch customresourcedefinitions.apiextensions.k8s.io others.example.com", "get customresourcedefinitions.apiextensions.k8s.io others.example.com",
			"create customresourcedefinitions.apiextensions.k8s.io", "update customresourcedefinitions.apiextensions.k8s.io printers.demo.example.com",
			"patch printers.demo.example.com x in a", "update printers.demo.example.com x in a", "create printers.demo.example.com x in a",
			"create jobs.batch in a", "create serviceaccounts/token x in a", "get leases.coordination.k8s.io opkit-engine in opkit",
			"create selfsubjectaccessreviews.authorization.k8s.io", "create tokenreviews.authentication.k8s.io",
			"create operators.opkit.dev", "get pods/log x in a",
		},
	}, {
		example: "printer",
		opts:    manifests.Options{Operators: manifests.FromFiles},
		allowed: []string{"get customresourcedefinitions.apiextensions.k8s.io printers.demo.example.com"},
		denied: []string{
			"list operators.opkit.dev", "patch operators/status.opkit.dev printer",
			"patch customresourcedefinitions.apiextensions.k8s.io operators.opkit.dev",
		},
	}, {
		example: "handlers",
		opts:    manifests.Options{AdmissionFinalizers: true},
		allowed: []string{
			"create mutatingadmissionpolicies.admissionregistration.k8s.io opkit-finalizer.greetings",
			"patch mutatingadmissionpolicybindings.admissionregistration.k8s.io opkit-finalizer.greetings",
			"patch greetings.demo.example.com g in a", // finalizer and retry annotation
			"patch greetings/status.demo.example.com g in a",
		},
		denied: []string{"update greetings/finalizers.demo.example.com g in a", "list pods", "create events in a", "get greetings.demo.example.com g in a"},
	}, {
		example: "printer",
		opts:    manifests.Options{MigrateStorage: true},
		allowed: []string{
			"list printers.demo.example.com", "update printers.demo.example.com p in a",
			"update customresourcedefinitions/status.apiextensions.k8s.io printers.demo.example.com",
		},
		denied: []string{
			"update customresourcedefinitions/status.apiextensions.k8s.io other.example.com",
			"update customresourcedefinitions.apiextensions.k8s.io printers.demo.example.com",
		},
	}, {
		// An operator-wide schedule: the engine removes, from its Operator
		// alone, the requests to run now that it answered.
		example: "calendar",
		allowed: []string{"patch operators.opkit.dev calendar", "patch operators/status.opkit.dev calendar"},
		denied:  []string{"patch operators.opkit.dev printer", "update operators.opkit.dev calendar", "create operators.opkit.dev"},
	}, {
		// Any operator from the cluster: the engine removes, from its
		// Operator alone, the record of its resume.
		example: "printer",
		allowed: []string{"patch operators.opkit.dev printer"},
		denied:  []string{"patch operators.opkit.dev calendar", "update operators.opkit.dev printer", "delete operators.opkit.dev printer"},
	}, {
		example: "printer",
		opts:    manifests.Options{Operators: manifests.FromFiles},
		denied:  []string{"patch operators.opkit.dev printer"},
	}, {
		example: "calendar",
		opts:    manifests.Options{Operators: manifests.FromFiles},
		denied:  []string{"patch operators.opkit.dev calendar", "list operators.opkit.dev"},
	}, {
		example: "rollouts",
		allowed: []string{"list deployments.apps", "watch deployments.apps", "create selfsubjectaccessreviews.authorization.k8s.io"},
		denied:  []string{"get deployments.apps web in a", "patch deployments.apps web in a", "update rollouts/finalizers.demo.example.com r in a"},
	}, {
		example: "team-watch",
		allowed: []string{
			"get deployments.apps web in team-a", "list deployments.apps in team-a", "watch deployments.apps in default",
			"get namespaces kube-system", "create selfsubjectaccessreviews.authorization.k8s.io",
		},
		denied: []string{
			"list deployments.apps", "list deployments.apps in kube-system", "patch deployments.apps web in team-a",
			"get namespaces default", "list namespaces",
		},
		namespaceRoles: []string{"default", "team-a"},
	}, {
		// The runs API: its APIService and its certificates' Secret by
		// name; the manifests make both, and the engine never creates nor
		// deletes the APIService, so that an uninstall removes it for good.
		example: "printer",
		opts:    manifests.Options{RunsAPI: true},
		allowed: []string{
			"get apiservices.apiregistration.k8s.io v1alpha1.runs.opkit.dev", "patch apiservices.apiregistration.k8s.io v1alpha1.runs.opkit.dev",
			"get secrets opkit-runs-tls in opkit", "update secrets opkit-runs-tls in opkit",
		},
		denied: []string{
			"create apiservices.apiregistration.k8s.io v1alpha1.runs.opkit.dev", "delete apiservices.apiregistration.k8s.io v1alpha1.runs.opkit.dev",
			"patch apiservices.apiregistration.k8s.io v1beta1.metrics.k8s.io", "list apiservices.apiregistration.k8s.io",
			"get secrets opkit-runs-tls in default", "get secrets other in opkit", "create secrets in opkit",
			// system:auth-delegator grants these, not the engine's rules.
			"create subjectaccessreviews.authorization.k8s.io",
		},
	}, {
		example: "printer",
		denied:  []string{"get apiservices.apiregistration.k8s.io v1alpha1.runs.opkit.dev", "get secrets opkit-runs-tls in opkit"},
	}, {
		example: "deploy-notifier",
		opts:    manifests.Options{AdmissionFinalizers: true, Console: manifests.Console{Auth: manifests.ConsoleAuthKubernetes}, Replicas: 2, ArchiveSecret: "db"},
		allowed: []string{
			"get secrets github-token in team-a", "get secrets github-webhook in default", "get secrets github-token in default",
			"create serviceaccounts/token deploy-notifier-deployer in default",
			// No delete handlers: no policy, but one an earlier version
			// had is deleted.
			"delete mutatingadmissionpolicies.admissionregistration.k8s.io opkit-finalizer.deploy-notifier",
			"delete mutatingadmissionpolicybindings.admissionregistration.k8s.io opkit-finalizer.deploy-notifier",
			"create tokenreviews.authentication.k8s.io", "create subjectaccessreviews.authorization.k8s.io",
			"list events", "get deploynotifiers.deploy.example.com d in a", "list operators.opkit.dev",
			"get leases.coordination.k8s.io opkit-engine in opkit", "update leases.coordination.k8s.io opkit-engine in opkit",
			"create leases.coordination.k8s.io in opkit", "create events in opkit",
		},
		denied: []string{
			"list secrets in default", "get secrets github-webhook in team-a", "get secrets other in default",
			"create serviceaccounts/token deploy-notifier-deployer in team-a", "create serviceaccounts/token default in default",
			"create mutatingadmissionpolicies.admissionregistration.k8s.io opkit-finalizer.deploy-notifier",
			"delete mutatingadmissionpolicies.admissionregistration.k8s.io other", "create mutatingadmissionpolicies.admissionregistration.k8s.io",
			"update leases.coordination.k8s.io other in opkit", "get leases.coordination.k8s.io opkit-engine in other",
			"create deploynotifiers.deploy.example.com d in a", "create events in a",
		},
		namespaceRoles: []string{"default"},
	}} {
		t.Run(tc.example, func(t *testing.T) {
			rules, warnings := manifests.ComputeRules(compileExamples(t, tc.example), tc.opts)
			if len(warnings) > 0 {
				t.Errorf("warnings: %v", warnings)
			}
			for _, s := range tc.allowed {
				if !allows(rules, "opkit", parse(s)) {
					t.Errorf("the rules do not allow %s", parse(s))
				}
			}
			for _, s := range tc.denied {
				if allows(rules, "opkit", parse(s)) {
					t.Errorf("the rules allow %s", parse(s))
				}
			}
			if got := slices.Sorted(func(yield func(string) bool) {
				for ns := range rules.Namespaces {
					if !yield(ns) {
						return
					}
				}
			}); !slices.Equal(got, tc.namespaceRoles) {
				t.Errorf("Roles in namespaces %v, want %v", got, tc.namespaceRoles)
			}
		})
	}
}

func TestNoRuleHasAWildcardAndEachSaysWhy(t *testing.T) {
	defs := compileExamples(t, "calendar", "deploy-notifier", "handlers", "printer", "rollouts", "team-watch", "website")
	rules, _ := manifests.ComputeRules(defs, manifests.Options{
		Replicas: 2, AdmissionFinalizers: true, Console: manifests.Console{Auth: manifests.ConsoleAuthKubernetes}, RunsAPI: true,
	})
	all := append(append([]manifests.Rule{}, rules.Cluster...), rules.Engine...)
	for _, rs := range rules.Namespaces {
		all = append(all, rs...)
	}
	for _, r := range all {
		for _, field := range [][]string{r.APIGroups, r.Resources, r.Verbs, r.ResourceNames, r.NonResourceURLs} {
			for _, v := range field {
				if strings.Contains(v, "*") {
					t.Errorf("rule %v has %q", r.PolicyRule, v)
				}
			}
		}
		if len(r.Verbs) == 0 || len(r.Resources) != 1 || len(r.APIGroups) != 1 {
			t.Errorf("rule %v: want one group, one resource and some verbs", r.PolicyRule)
		}
		if len(r.Why) == 0 {
			t.Errorf("rule %v says not why", r.PolicyRule)
		}
	}
}

func TestJobHandlersGetJobsWhereTheyRun(t *testing.T) {
	defs := compileYAML(t, `
apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: builds}
spec:
  resource:
    group: ci.example.com
    kind: Build
    versions: [{name: v1, schema: {type: object}}]
  handlers:
  - name: build
    on: [create]
    job:
      image: golang:1.26
      env:
      - {name: TOKEN, valueFrom: {secretKeyRef: {name: registry, key: token}}}
  - name: report
    on: [update]
    http:
      url: https://ci.example.com/report
      tokenSecret: {namespace: ci, name: report-token, key: token}
---
apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: nightly}
spec:
  handlers:
  - name: clean
    on: [schedule]
    schedule: {cron: "0 3 * * *"}
    job: {image: busybox, namespace: maintenance}
`)
	rules, _ := manifests.ComputeRules(defs, manifests.Options{})
	for _, s := range []string{
		"create jobs.batch in a", "get jobs.batch j in a", "watch jobs.batch in a", "delete jobs.batch j in a",
		"create configmaps in a", "delete configmaps c in a", "list pods in a", "get pods/log p in a",
		"create jobs.batch in maintenance", "get pods/log p in maintenance",
		"get secrets report-token in ci",
	} {
		if !allows(rules, "opkit", parse(s)) {
			t.Errorf("the rules do not allow %s", parse(s))
		}
	}
	for _, s := range []string{
		// A job's Secrets are read by the kubelet, never by the engine.
		"get secrets registry in a",
		"list jobs.batch in a", "update jobs.batch j in a", "get configmaps c in a", "get pods p in a",
		"get secrets report-token in a",
	} {
		if allows(rules, "opkit", parse(s)) {
			t.Errorf("the rules allow %s", parse(s))
		}
	}
	if got := rules.Namespaces["maintenance"]; len(got) != 0 {
		t.Errorf("a Role in maintenance %v: the ClusterRole grants Jobs everywhere already (build's Jobs run in any namespace)", got)
	}
}

func TestRelatedObjectsAreWatchedWhereTheirReferencesSay(t *testing.T) {
	defs := compileYAML(t, `
apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: sites}
spec:
  resource:
    group: demo.example.com
    kind: Site
    versions: [{name: v1, schema: {type: object}}]
  related:
  - {id: config, apiVersion: v1, kind: ConfigMap, name: shared, namespace: platform, namespaces: [platform]}
  - {id: flags, apiVersion: v1, kind: ConfigMap, selector: {app: flags}, namespaces: [team-a, platform]}
  - {id: app, apiVersion: apps/v1, kind: Deployment, name: web}
`)
	rules, _ := manifests.ComputeRules(defs, manifests.Options{})
	for _, s := range []string{
		"list configmaps in platform", "watch configmaps in platform", "list configmaps in team-a", "watch configmaps in team-a",
		// A reference that lists no namespaces reads in all of them.
		"list deployments.apps", "watch deployments.apps",
	} {
		if !allows(rules, "opkit", parse(s)) {
			t.Errorf("the rules do not allow %s", parse(s))
		}
	}
	for _, s := range []string{"list configmaps", "watch configmaps", "list configmaps in team-b", "get configmaps shared in platform"} {
		if allows(rules, "opkit", parse(s)) {
			t.Errorf("the rules allow %s", parse(s))
		}
	}
	if got := slices.Sorted(maps.Keys(rules.Namespaces)); !slices.Equal(got, []string{"platform", "team-a"}) {
		t.Errorf("Roles in namespaces %v, want platform and team-a", got)
	}
}

func TestAKindNeitherBuiltInNorDefinedIsWarnedAbout(t *testing.T) {
	defs := compileYAML(t, `
apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: certs}
spec:
  resource:
    group: demo.example.com
    kind: Site
    versions: [{name: v1, schema: {type: object}}]
  children:
  - id: cert
    template:
      apiVersion: cert-manager.io/v1
      kind: Certificate
      metadata: {name: "${self.metadata.name}"}
`)
	rules, warnings := manifests.ComputeRules(defs, manifests.Options{})
	if len(warnings) != 1 || !strings.Contains(warnings[0], `cert-manager.io/v1 Certificate`) || !strings.Contains(warnings[0], `"certificates"`) {
		t.Errorf("warnings %q; want one naming the kind and the resource assumed", warnings)
	}
	if !allows(rules, "opkit", parse("create certificates.cert-manager.io c in a")) {
		t.Errorf("certificates are not granted")
	}
}

func TestARolloutGetsItsRolloutAndNoOther(t *testing.T) {
	defs := compileYAML(t, `
apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: sites}
spec:
  resource:
    group: demo.example.com
    kind: Site
    versions: [{name: v1, schema: {type: object}}]
  rollout: {steps: [{count: 1}]}
`)
	rules, _ := manifests.ComputeRules(defs, manifests.Options{})
	for _, s := range []string{
		"get customresourcedefinitions.apiextensions.k8s.io rollouts.opkit.dev", "create customresourcedefinitions.apiextensions.k8s.io rollouts.opkit.dev",
		"get rollouts.opkit.dev sites", "update rollouts.opkit.dev sites", "create rollouts.opkit.dev",
	} {
		if !allows(rules, "opkit", parse(s)) {
			t.Errorf("the rules do not allow %s", parse(s))
		}
	}
	for _, s := range []string{"get rollouts.opkit.dev others", "update rollouts.opkit.dev others", "list rollouts.opkit.dev", "delete rollouts.opkit.dev sites"} {
		if allows(rules, "opkit", parse(s)) {
			t.Errorf("the rules allow %s", parse(s))
		}
	}
}
