package helm

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
)

// Templates renders the chart's templates as helm install does for a
// release name in namespace, with values: the manifests by file name,
// NOTES.txt and partials left out.
func Templates(c *chart.Chart, values map[string]any, name, namespace string) (map[string]string, error) {
	top, err := chartutil.ToRenderValues(c, values, common.ReleaseOptions{Name: name, Namespace: namespace, IsInstall: true}, nil)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(c, top)
	if err != nil {
		return nil, err
	}
	for file := range files {
		if !strings.HasSuffix(file, ".yaml") {
			delete(files, file)
		}
	}
	return files, nil
}

// Render is what helm install --create-namespace applies of the chart in
// dir, with a values file's content: the chart's crds/ first, then its
// templates' manifests sorted by file name, as one multi-document YAML
// (helm template --include-crds). The namespace is not among them: helm
// install creates it.
func Render(dir string, valuesFile []byte, name, namespace string) ([]byte, error) {
	c, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("loading the chart %s: %w", dir, err)
	}
	values, err := common.ReadValues(valuesFile)
	if err != nil {
		return nil, fmt.Errorf("reading the values: %w", err)
	}
	files, err := Templates(c, values, name, namespace)
	if err != nil {
		return nil, fmt.Errorf("rendering the chart: %w", err)
	}
	var out bytes.Buffer
	doc := func(source string, data []byte) {
		if len(bytes.TrimSpace(data)) == 0 {
			return
		}
		fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", source, bytes.TrimRight(data, "\n"))
	}
	for _, crd := range c.CRDObjects() {
		doc(crd.Filename, crd.File.Data)
	}
	for _, file := range slices.Sorted(func(yield func(string) bool) {
		for f := range files {
			if !yield(f) {
				return
			}
		}
	}) {
		doc(file, []byte(files[file]))
	}
	return out.Bytes(), nil
}
