package manifests_test

import (
	"fmt"
	"strings"

	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/manifests"
)

// The rules of an operator that keeps a ConfigMap per custom resource and
// reads a token from a Secret in its handler, run from files.
func ExampleComputeRules() {
	srcs, err := definition.Load("notes.yaml", []byte(`
apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: notes}
spec:
  resource:
    group: notes.example.com
    kind: Note
    versions: [{name: v1, schema: {type: object}}]
  children:
  - id: page
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${self.metadata.name}"}
  handlers:
  - name: publish
    on: [create, update]
    exec:
      command: [/usr/bin/publish]
      env:
      - {name: TOKEN, valueFrom: {secretKeyRef: {namespace: notes, name: publisher, key: token}}}
`))
	if err != nil {
		panic(err)
	}
	d, err := definition.Compile(srcs[0])
	if err != nil {
		panic(err)
	}
	rules, _ := manifests.ComputeRules([]*definition.Definition{d}, manifests.Options{Operators: manifests.FromFiles})
	show := func(where string, rs []manifests.Rule) {
		for _, r := range rs {
			group := r.APIGroups[0]
			if group == "" {
				group = "core"
			}
			line := fmt.Sprintf("%-11s %-21s %-25s %-35s %s", where, group, r.Resources[0], strings.Join(r.Verbs, ","), strings.Join(r.ResourceNames, ","))
			fmt.Println(strings.TrimRight(line, " "))
		}
	}
	show("cluster", rules.Cluster)
	for ns, rs := range rules.Namespaces {
		show("in "+ns, rs)
	}
	// Output:
	// cluster     core                  configmaps                get,list,watch,create,patch,delete
	// cluster     apiextensions.k8s.io  customresourcedefinitions list,watch
	// cluster     apiextensions.k8s.io  customresourcedefinitions get,create,patch                    notes.notes.example.com
	// cluster     events.k8s.io         events                    create,patch
	// cluster     notes.example.com     notes                     list,watch,patch
	// cluster     notes.example.com     notes/finalizers          update
	// cluster     notes.example.com     notes/status              patch
	// in notes    core                  secrets                   get                                 publisher
}
