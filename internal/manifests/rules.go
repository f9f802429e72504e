package manifests

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/definition"
)

// Rule is one RBAC rule and why the engine needs it.
type Rule struct {
	rbacv1.PolicyRule
	// Why names, for each part of the definitions or of the engine that
	// needs the rule, what it does with it.
	Why []string
}

// Rules are the engine's RBAC rules: a ClusterRole, a Role in each of
// some namespaces, and a Role in its own namespace.
type Rules struct {
	// Cluster are the rules of its ClusterRole: in every namespace, and
	// on cluster-scoped resources.
	Cluster []Rule
	// Namespaces are the rules of a Role in each namespace that a
	// definition names (the namespaces it watches, of its Jobs, of the
	// Secrets it reads), beyond what Cluster grants there.
	Namespaces map[string][]Rule
	// Engine are the rules of a Role in the engine's own namespace: its
	// Lease, with leader election, and the hooks EndpointSlice.
	Engine []Rule
}

// Verbs, in the order rules list them.
var verbOrder = []string{"get", "list", "watch", "create", "update", "patch", "delete"}

// need is one verb the engine uses on a resource.
type need struct {
	group    string
	resource string // with its subresource: pods/log
	// namespace is where: anyNamespace (a ClusterRole), engineNamespace
	// (the engine's own) or a name.
	namespace string
	name      string // the object's name, or "" for any
	verb      string
	why       string
}

// Where a need applies, beside a namespace's name.
const (
	anyNamespace    = ""
	engineNamespace = "\x00engine"
)

// needs collects what the engine does, with the resources of kinds as
// resolve finds them.
type needs struct {
	list    []need
	resolve func(schema.GroupVersionKind) string
}

func (n *needs) add(group, resource, namespace, name, why string, verbs ...string) {
	for _, v := range verbs {
		n.list = append(n.list, need{group: group, resource: resource, namespace: namespace, name: name, verb: v, why: why})
	}
}

func (n *needs) kind(gvk schema.GroupVersionKind, namespace, why string, verbs ...string) {
	n.add(gvk.Group, n.resolve(gvk), namespace, "", why, verbs...)
}

// resolver maps kinds to resources: the definitions' own custom
// resources by their plural, the built-in kinds by their scheme, and any
// other kind by the plural Kubernetes tools guess, which is reported.
type resolver struct {
	plurals  map[schema.GroupKind]string
	guessed  map[schema.GroupVersionKind]string
	warnings []string
}

func newResolver(defs []*definition.Definition) *resolver {
	r := &resolver{plurals: map[schema.GroupKind]string{}, guessed: map[schema.GroupVersionKind]string{}}
	for _, d := range defs {
		if d.Owns() {
			r.plurals[d.GVK.GroupKind()] = d.Plural
		}
	}
	return r
}

func (r *resolver) resource(gvk schema.GroupVersionKind) string {
	if p, ok := r.plurals[gvk.GroupKind()]; ok {
		return p
	}
	plural, _ := meta.UnsafeGuessKindToResource(gvk)
	if !clientgoscheme.Scheme.Recognizes(gvk) {
		if _, ok := r.guessed[gvk]; !ok {
			r.guessed[gvk] = plural.Resource
			r.warnings = append(r.warnings, fmt.Sprintf("kind %s %s is neither built in nor one of the definitions': its resource is taken to be %q; if its CRD names it otherwise, correct the rules", gvk.GroupVersion(), gvk.Kind, plural.Resource))
		}
	}
	return plural.Resource
}

// ComputeRules returns the rules the engine needs to run defs as opts
// says, and warnings on what it had to assume (a kind's resource name).
func ComputeRules(defs []*definition.Definition, opts Options) (*Rules, []string) {
	opts = opts.withDefaults()
	res := newResolver(defs)
	n := &needs{resolve: res.resource}
	n.engine(opts)
	for _, d := range defs {
		n.definition(d, opts)
	}
	if slices.ContainsFunc(defs, hasImage) {
		n.runners(defs)
	}
	return n.rules(), res.warnings
}

// hasImage reports whether an exec handler of d names an image: its
// runners call the engine's runner API.
func hasImage(d *definition.Definition) bool {
	return slices.ContainsFunc(d.Operator.Spec.Handlers, func(h v1alpha1.Handler) bool { return h.Exec != nil && h.Exec.Image != "" })
}

// runners is what the engine's runner API needs: besides tokens and
// certificates, the runners' EndpointSlice and the scale of each runner
// Deployment of defs, by name (package runners' Scaler).
func (n *needs) runners(defs []*definition.Definition) {
	n.add("authentication.k8s.io", "tokenreviews", anyNamespace, "", "runners: checks each runner's token (its audience "+RunnerAudience+", its ServiceAccount "+RunnerServiceAccount("OPERATOR")+")", "create")
	n.add("", "secrets", engineNamespace, RunnersTLSSecret, "runners: keeps the runner API's CA and serving certificate there, shared by every replica and restart, and rotates them", "get", "update")
	n.add("", "configmaps", engineNamespace, RunnersCA, "runners: publishes the runner API's CA there (key ca.crt), which the runners mount", "get", "update")
	n.add("discovery.k8s.io", "endpointslices", engineNamespace, RunnersName,
		"runners: the EndpointSlice of the runners Service, which the acting replica writes with its own address so that runners pull runs from it and no standby", "get", "update", "patch")
	for _, d := range defs {
		images := map[string]bool{}
		for _, h := range d.Operator.Spec.Handlers {
			if h.Exec == nil || h.Exec.Image == "" || images[h.Exec.Image] {
				continue
			}
			images[h.Exec.Image] = true
			name := RunnerName(d.Operator.Name, h.Exec.Image)
			why := "runners: scales the runner Deployment of " + d.Operator.Name + " and " + h.Exec.Image + " by its queue, within its annotations' bounds"
			n.add("apps", "deployments", engineNamespace, name, why, "get")
			n.add("apps", "deployments/scale", engineNamespace, name, why, "get", "update")
		}
	}
}

// engine is what the engine needs whatever it runs.
func (n *needs) engine(opts Options) {
	n.add("apiextensions.k8s.io", "customresourcedefinitions", anyNamespace, "",
		"engine: watches the metadata of every CRD, to install a running operator's CRD again if it is deleted", "list", "watch")
	n.add("events.k8s.io", "events", anyNamespace, "",
		"engine: posts Events on custom resources, watched objects and Operators", "create", "patch")
	if opts.Operators == FromCluster {
		crd := v1alpha1.CustomResourceDefinition().Name
		n.add("apiextensions.k8s.io", "customresourcedefinitions", anyNamespace, crd,
			"engine: installs the Operator CRD (server-side apply: create and patch by name) and waits until it is established", "get", "create", "patch")
		n.add(v1alpha1.Group, "operators", anyNamespace, "", "engine: runs the Operators of the cluster", "get", "list", "watch")
		n.add(v1alpha1.Group, "operators/status", anyNamespace, "", "engine: says in each Operator's status whether it runs", "patch")
	}
	if opts.LeaderElection {
		why := "leader election: the Lease " + LeaseName + " that the acting replica holds"
		n.add("coordination.k8s.io", "leases", engineNamespace, LeaseName, why, "get", "update")
		// A create is a POST without the object's name: it cannot be
		// limited to one.
		n.add("coordination.k8s.io", "leases", engineNamespace, "", why+" (created once; a create cannot be limited by name)", "create")
		n.add("", "events", engineNamespace, "", "leader election: Events on the Lease when a replica takes it", "create", "patch")
	}
	if opts.Hooks {
		n.add("discovery.k8s.io", "endpointslices", engineNamespace, HooksName,
			"hooks: the EndpointSlice of the hooks Service, which the acting replica writes with its own address so that no webhook delivery reaches a standby", "get", "update", "patch")

		crd := v1alpha1.RedeliveryCRD().Name
		n.add("apiextensions.k8s.io", "customresourcedefinitions", anyNamespace, crd,
			"hooks: installs the Redelivery CRD (server-side apply: create and patch by name) and waits until it is established", "get", "create", "patch")
		n.add(v1alpha1.Group, v1alpha1.RedeliveryResource, anyNamespace, "", "hooks: reads the Redeliveries (opkit events redeliver) it answers", "get", "list", "watch")
		n.add(v1alpha1.Group, v1alpha1.RedeliveryResource+"/status", anyNamespace, "", "hooks: answers each Redelivery in its status", "patch")
	}
	if opts.Webhook {
		n.add("discovery.k8s.io", "endpointslices", engineNamespace, WebhookName,
			"webhook: the EndpointSlice of the webhook Service, which the acting replica writes with its own address so that no admission call reaches a standby", "get", "update", "patch")
		n.add("", "secrets", engineNamespace, WebhookSecret,
			"webhook: keeps the CA and serving certificate there, shared by every replica and restart, and rotates them", "get", "update")
	}
	if opts.RunsAPI {
		// Patch, not create nor delete: the manifests make the APIService
		// and an uninstall removes it, which an engine still stopping must
		// not undo (an APIService left without its server fails discovery
		// of its group for every client).
		n.add("apiregistration.k8s.io", "apiservices", anyNamespace, RunsAPIName,
			"runs API: keeps the caBundle of its APIService current with the CA of its certificates (server-side apply), and reads whether it is Available", "get", "patch")
		n.add("", "secrets", engineNamespace, RunsAPISecret(opts.Name),
			"runs API: keeps its CA and serving certificate there, shared by every replica and restart, and rotates them", "get", "update")
	}
	if opts.Console.served() {
		n.add(v1alpha1.Group, "operators", anyNamespace, "", "console: lists the Operators it shows", "get", "list")
		n.add("", "events", anyNamespace, "", "console: lists each object's Events for its timeline", "list")
		if opts.Hooks {
			n.add(v1alpha1.Group, v1alpha1.RedeliveryResource, engineNamespace, "",
				"console: its Redeliver button creates a Redelivery in the engine's namespace and reads the engine's answer", "create", "get")
		}
	}
	if opts.Console.Auth == ConsoleAuthKubernetes {
		n.add("authentication.k8s.io", "tokenreviews", anyNamespace, "", "console (auth kubernetes): checks each caller's bearer token", "create")
		n.add("authorization.k8s.io", "subjectaccessreviews", anyNamespace, "", "console (auth kubernetes): checks each caller's access to what a page shows or an action changes", "create")
	}
}

// definition is what one definition needs.
func (n *needs) definition(d *definition.Definition, opts Options) {
	op := "operator " + d.Operator.Name
	if d.Owns() {
		n.owned(d, op, opts)
	}
	if w := d.Watch; w != nil {
		what := fmt.Sprintf("%s: watches %s", op, kindName(w.GVK))
		verbs := []string{"get", "list", "watch"}
		if w.Finalizer {
			verbs = append(verbs, "patch")
			what += " and holds its finalizer on them (patch)"
		}
		for _, ns := range namespacesOr(w.Namespaces) {
			n.kind(w.GVK, ns, what, verbs...)
		}
		n.add("", "namespaces", anyNamespace, "kube-system", op+": reads the uid of kube-system, the cluster's id in its watched objects' records", "get")
		n.add("authorization.k8s.io", "selfsubjectaccessreviews", anyNamespace, "", op+": checks that the engine may watch "+kindName(w.GVK)+" before it starts", "create")
	}
	if opts.Operators == FromCluster {
		// Only an Operator in the cluster carries the requests the engine
		// consumes: a resume of the whole operator and, for a schedule, a
		// run now.
		why := op + ": removes from its Operator the record of its resume (opkit resume --operator " + d.Operator.Name + " --all) once read"
		if d.Calendar() {
			why += ", and each request to run a schedule now (opkit schedule run) once it is answered"
		}
		n.add(v1alpha1.Group, "operators", anyNamespace, d.Operator.Name, why, "patch")
	}
	for _, h := range d.Handlers {
		n.handler(d, h, op)
	}
	for _, h := range d.Admission {
		n.handler(d, h, op)
	}
	for _, s := range d.Sources {
		for _, u := range s.SecretRefs() {
			why := fmt.Sprintf("%s: source %s reads %s (key %s)", op, s.Name, u.For, u.Ref.Key)
			n.add("", "secrets", namespaceOr(u.Ref.Namespace), u.Ref.Name, why, "get")
		}
		if s.Object != nil {
			n.add(d.GVK.Group, d.Plural, anyNamespace, "", fmt.Sprintf("%s: source %s creates or patches a %s per delivery (server-side apply)", op, s.Name, d.GVK.Kind), "create", "patch")
		}
	}
}

// owned is what an operator that owns a custom resource needs.
func (n *needs) owned(d *definition.Definition, op string, opts Options) {
	crd := d.CRD().Name
	n.add("apiextensions.k8s.io", "customresourcedefinitions", anyNamespace, crd,
		op+": installs its CRD (server-side apply: create and patch by name) and waits until it is established", "get", "create", "patch")
	kind := d.GVK.Kind + "s (" + d.Plural + ")"
	n.add(d.GVK.Group, d.Plural, anyNamespace, "", op+": watches its "+kind, "list", "watch")
	n.add(d.GVK.Group, d.Plural+"/status", anyNamespace, "", op+": writes their status", "patch")
	if hasTrigger(d, v1alpha1.OnDelete) {
		n.add(d.GVK.Group, d.Plural, anyNamespace, "", op+": holds its finalizer on them while delete handlers run (JSON patch)", "patch")
	}
	if len(d.Handlers) > 0 {
		n.add(d.GVK.Group, d.Plural, anyNamespace, "", op+": clears the retry annotation once it has retried (patch)", "patch")
	}
	if opts.Console.served() {
		n.add(d.GVK.Group, d.Plural, anyNamespace, "", "console: shows each "+d.GVK.Kind+" and sets its retry and pause annotations", "get", "patch")
	}
	if len(d.Children) > 0 {
		// Children carry a controller ownerReference with
		// blockOwnerDeletion, which the OwnerReferencesPermissionEnforcement
		// admission plugin (on in some distributions) allows only to who
		// may update the owner's finalizers.
		n.add(d.GVK.Group, d.Plural+"/finalizers", anyNamespace, "", op+": sets blockOwnerDeletion in its children's ownerReferences (checked by the OwnerReferencesPermissionEnforcement admission plugin, where it is on)", "update")
	}
	if d.Rollout != nil {
		crd := v1alpha1.RolloutCRD().Name
		n.add("apiextensions.k8s.io", "customresourcedefinitions", anyNamespace, crd,
			op+": installs the Rollout CRD (server-side apply: create and patch by name) and waits until it is established", "get", "create", "patch")
		n.add(v1alpha1.Group, v1alpha1.RolloutResource, anyNamespace, d.Operator.Name,
			op+": keeps where a change of its definition has reached its objects in its Rollout, and answers the requests written there (opkit rollout)", "get", "update")
		n.add(v1alpha1.Group, v1alpha1.RolloutResource, anyNamespace, "",
			op+": makes its Rollout (created once; a create cannot be limited by name)", "create")
		if opts.Console.served() {
			n.add(v1alpha1.Group, v1alpha1.RolloutResource, anyNamespace, d.Operator.Name,
				"console: shows the rollout of "+d.Operator.Name+" on its page, and its Continue and Undo buttons write their request to it", "get", "patch")
		}
	}
	seen := map[schema.GroupVersionKind]bool{}
	for _, c := range d.Children {
		if seen[c.GVK] {
			continue
		}
		seen[c.GVK] = true
		n.kind(c.GVK, anyNamespace, fmt.Sprintf("%s: keeps its children %s converged (watch; server-side apply; delete to prune or re-create)", op, kindName(c.GVK)),
			"get", "list", "watch", "create", "patch", "delete")
	}
	for _, k := range d.RelatedKinds() {
		where := "watched in every namespace"
		if len(k.Namespaces) > 0 {
			where = "watched in the namespaces its references list"
		}
		for _, ns := range namespacesOr(k.Namespaces) {
			n.kind(k.GVK, ns, fmt.Sprintf("%s: reads its related objects %s (%s, never written)", op, kindName(k.GVK), where), "list", "watch")
		}
		n.add("authorization.k8s.io", "selfsubjectaccessreviews", anyNamespace, "", op+": checks that the engine may watch "+kindName(k.GVK)+" before it starts", "create")
	}
	if opts.MigrateStorage {
		n.add(d.GVK.Group, d.Plural, anyNamespace, "", op+": --migrate-storage rewrites its "+kind+" at the storage version (a no-op update of each)", "list", "update")
		n.add("apiextensions.k8s.io", "customresourcedefinitions/status", anyNamespace, d.CRD().Name,
			op+": --migrate-storage sets its CRD's status.storedVersions once every object is migrated", "update")
	}
	if opts.Webhook {
		name := "opkit.dev." + d.Operator.Name
		for _, res := range []string{"validatingwebhookconfigurations", "mutatingwebhookconfigurations"} {
			if len(d.Admission) > 0 {
				n.add("admissionregistration.k8s.io", res, anyNamespace, name, op+": the webhooks of its admission handlers, with the engine's caBundle (server-side apply; deleted with the operator)", "create", "patch", "delete")
			} else {
				n.add("admissionregistration.k8s.io", res, anyNamespace, name, op+": deletes the webhooks an earlier version with admission handlers had", "delete")
			}
		}
	}
	if opts.AdmissionFinalizers {
		name := "opkit-finalizer." + d.Operator.Name
		for _, res := range []string{"mutatingadmissionpolicies", "mutatingadmissionpolicybindings"} {
			if hasTrigger(d, v1alpha1.OnDelete) {
				n.add("admissionregistration.k8s.io", res, anyNamespace, name, op+": the admission policy that gives its new objects its finalizer (server-side apply; deleted with the operator)", "create", "patch", "delete")
			} else {
				n.add("admissionregistration.k8s.io", res, anyNamespace, name, op+": deletes the admission policy an earlier version with delete handlers had", "delete")
			}
		}
	}
}

// handler is what one handler's action needs.
func (n *needs) handler(d *definition.Definition, h *definition.Handler, op string) {
	who := fmt.Sprintf("%s: handler %s", op, h.Name)
	switch {
	case h.Exec != nil:
		for _, e := range h.Exec.Env {
			if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				continue
			}
			ref := e.ValueFrom.SecretKeyRef
			for _, ns := range handlerNamespaces(d, h, ref.Namespace) {
				n.add("", "secrets", ns, ref.Name, fmt.Sprintf("%s reads $%s from the Secret (key %s)", who, e.Name, ref.Key), "get")
			}
		}
		if sa := h.Exec.ServiceAccount; sa != nil {
			for _, ns := range handlerNamespaces(d, h, sa.Namespace) {
				n.add("", "serviceaccounts/token", ns, sa.Name, fmt.Sprintf("%s runs with a token of the ServiceAccount %s (TokenRequest)", who, sa.Name), "create")
			}
		}
	case h.HTTP != nil:
		if s := h.HTTP.TokenSecret; s != nil {
			n.add("", "secrets", namespaceOr(s.Namespace), s.Name, fmt.Sprintf("%s sends the bearer token of the Secret (key %s)", who, s.Key), "get")
		}
	case h.Job != nil:
		why := who + " runs a Job per run"
		for _, ns := range handlerNamespaces(d, h, h.Job.Namespace) {
			n.add("batch", "jobs", ns, "", why+" (created, watched by name, read, deleted on timeout)", "get", "watch", "create", "delete")
			n.add("", "configmaps", ns, "", why+" with its binding context in a ConfigMap", "create", "delete")
			n.add("", "pods", ns, "", why+": finds its Pod for the result", "list")
			n.add("", "pods/log", ns, "", why+": copies its Pod's log to the run's", "get")
		}
	}
}

// handlerNamespaces is where a handler's object lives, for what it names
// in it: the given namespace, else the object's, which is one of the
// watched namespaces, or any (anyNamespace) when it cannot be known.
func handlerNamespaces(d *definition.Definition, h *definition.Handler, given string) []string {
	if given != "" {
		return []string{given}
	}
	if d.Watch != nil && !h.Fires(v1alpha1.OnEvent) {
		return namespacesOr(d.Watch.Namespaces)
	}
	// A custom resource in any namespace. (Where there is no object — a
	// cluster-scoped resource, a schedule, an event — the definition must
	// name the namespace, and Compile refuses it otherwise.)
	return []string{anyNamespace}
}

func namespacesOr(nss []string) []string {
	if len(nss) == 0 {
		return []string{anyNamespace}
	}
	return nss
}

func namespaceOr(ns string) string { return cmp.Or(ns, anyNamespace) }

func hasTrigger(d *definition.Definition, trigger string) bool {
	return slices.ContainsFunc(d.Handlers, func(h *definition.Handler) bool { return h.Fires(trigger) })
}

func kindName(gvk schema.GroupVersionKind) string {
	return gvk.GroupVersion().String() + " " + gvk.Kind
}

// grant is what the needs of one resource in one place come to.
type grant struct {
	group, resource, namespace string
	any                        map[string][]string            // verb -> why, for any name
	named                      map[string]map[string][]string // name -> verb -> why
}

// rules merges the needs into rules: per place and resource, one rule of
// the verbs needed on any object, and rules by name for the verbs needed
// only on some; a namespace's need that the ClusterRole grants already is
// left out.
func (n *needs) rules() *Rules {
	grants := map[[3]string]*grant{}
	var order [][3]string
	for _, x := range n.list {
		key := [3]string{x.namespace, x.group, x.resource}
		g := grants[key]
		if g == nil {
			g = &grant{group: x.group, resource: x.resource, namespace: x.namespace, any: map[string][]string{}, named: map[string]map[string][]string{}}
			grants[key] = g
			order = append(order, key)
		}
		if x.name == "" {
			g.any[x.verb] = appendNew(g.any[x.verb], x.why)
			continue
		}
		if g.named[x.name] == nil {
			g.named[x.name] = map[string][]string{}
		}
		g.named[x.name][x.verb] = appendNew(g.named[x.name][x.verb], x.why)
	}
	clusterGrants := func(group, resource string) *grant { return grants[[3]string{anyNamespace, group, resource}] }
	out := &Rules{Namespaces: map[string][]Rule{}}
	for _, key := range order {
		g := grants[key]
		cluster := clusterGrants(g.group, g.resource)
		covered := func(name, verb string) bool {
			if g.namespace == anyNamespace || cluster == nil {
				return false
			}
			_, ok := cluster.any[verb]
			_, okNamed := cluster.named[name][verb]
			return ok || okNamed
		}
		var rules []Rule
		if verbs := sortedVerbs(g.any); len(verbs) > 0 {
			r := Rule{PolicyRule: rbacv1.PolicyRule{APIGroups: []string{g.group}, Resources: []string{g.resource}}}
			for _, v := range verbs {
				if covered("", v) {
					continue
				}
				r.Verbs = append(r.Verbs, v)
				r.Why = appendNew(r.Why, g.any[v]...)
			}
			if len(r.Verbs) > 0 {
				rules = append(rules, r)
			}
		}
		// Names needing the same verbs share a rule.
		byVerbs := map[string]*Rule{}
		var verbKeys []string
		for _, name := range slices.Sorted(maps.Keys(g.named)) {
			var verbs []string
			var why []string
			for _, v := range sortedVerbs(g.named[name]) {
				if _, ok := g.any[v]; ok || covered(name, v) {
					continue
				}
				verbs = append(verbs, v)
				why = appendNew(why, g.named[name][v]...)
			}
			if len(verbs) == 0 {
				continue
			}
			k := strings.Join(verbs, ",")
			r := byVerbs[k]
			if r == nil {
				r = &Rule{PolicyRule: rbacv1.PolicyRule{APIGroups: []string{g.group}, Resources: []string{g.resource}, Verbs: verbs}}
				byVerbs[k] = r
				verbKeys = append(verbKeys, k)
			}
			r.ResourceNames = append(r.ResourceNames, name)
			r.Why = appendNew(r.Why, why...)
		}
		for _, k := range verbKeys {
			rules = append(rules, *byVerbs[k])
		}
		switch g.namespace {
		case anyNamespace:
			out.Cluster = append(out.Cluster, rules...)
		case engineNamespace:
			out.Engine = append(out.Engine, rules...)
		default:
			if len(rules) > 0 {
				out.Namespaces[g.namespace] = append(out.Namespaces[g.namespace], rules...)
			}
		}
	}
	sortRules(out.Cluster)
	sortRules(out.Engine)
	for _, rs := range out.Namespaces {
		sortRules(rs)
	}
	return out
}

func sortRules(rs []Rule) {
	slices.SortStableFunc(rs, func(a, b Rule) int {
		return cmp.Or(
			cmp.Compare(a.APIGroups[0], b.APIGroups[0]),
			cmp.Compare(a.Resources[0], b.Resources[0]),
			cmp.Compare(len(a.ResourceNames), len(b.ResourceNames)),
			cmp.Compare(strings.Join(a.ResourceNames, ","), strings.Join(b.ResourceNames, ",")),
		)
	})
}

func sortedVerbs(m map[string][]string) []string {
	var out []string
	for _, v := range verbOrder {
		if _, ok := m[v]; ok {
			out = append(out, v)
		}
	}
	return out
}

func appendNew(list []string, items ...string) []string {
	for _, s := range items {
		if !slices.Contains(list, s) {
			list = append(list, s)
		}
	}
	return list
}

// PolicyRules returns the rules without their reasons.
func PolicyRules(rules []Rule) []rbacv1.PolicyRule {
	out := make([]rbacv1.PolicyRule, len(rules))
	for i, r := range rules {
		out[i] = r.PolicyRule
	}
	return out
}
