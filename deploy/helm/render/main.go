// Command render prints what helm install --create-namespace applies of
// opkit's chart, with a values file (as opkit generate values writes
// it): the chart's CRDs, then its templates' manifests, as one
// multi-document YAML, without a helm binary. The rehearsal on the local
// plane (internal/manifests/rehearsal) installs what it prints, as it
// installs what opkit generate manifests prints:
//
//	go run -mod=mod ./render -values values.yaml -name opkit -namespace opkit
//
// It runs from deploy/helm, whose module holds Helm's library (doc.go
// says why it is a module of its own).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/opkit-dev/opkit/deploy/helm"
)

func main() {
	chartDir := flag.String("chart", "opkit", "the chart's directory")
	values := flag.String("values", "", "the values file (required)")
	name := flag.String("name", "opkit", "the release's name")
	namespace := flag.String("namespace", "opkit", "the release's namespace")
	flag.Parse()
	if err := run(*chartDir, *values, *name, *namespace); err != nil {
		fmt.Fprintf(os.Stderr, "render: %v\n", err)
		os.Exit(1)
	}
}

func run(chartDir, values, name, namespace string) error {
	if values == "" {
		return fmt.Errorf("-values FILE is required")
	}
	data, err := os.ReadFile(values)
	if err != nil {
		return err
	}
	out, err := helm.Render(chartDir, data, name, namespace)
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(out)
	return err
}
