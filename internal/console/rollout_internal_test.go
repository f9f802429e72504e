package console

import (
	"reflect"
	"strings"
	"testing"

	"github.com/opkit-dev/opkit/internal/archive"
)

func TestDefinitionDiffNamesListItemsByIDOrNameAndLeavesOutSpecRollout(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to string
		want     []archive.Change
	}{{
		name: "a child's template, by the child's id",
		from: `{"metadata":{"name":"web"},"spec":{"children":[{"id":"deploy","template":{"kind":"Deployment"}},{"id":"content","template":{"data":{"definition":"one"}}}]}}`,
		to:   `{"metadata":{"name":"web"},"spec":{"children":[{"id":"deploy","template":{"kind":"Deployment"}},{"id":"content","template":{"data":{"definition":"two"}}}]}}`,
		want: []archive.Change{{Op: "change", Path: "spec.children[content].template.data.definition", Old: "one", New: "two"}},
	}, {
		name: "handlers added and removed, by name, whatever their order",
		from: `{"spec":{"handlers":[{"name":"a","on":["create"]},{"name":"b"}]}}`,
		to:   `{"spec":{"handlers":[{"name":"c"},{"name":"a","on":["create","update"]}]}}`,
		want: []archive.Change{
			{Op: "change", Path: "spec.handlers[a].on", Old: []any{"create"}, New: []any{"create", "update"}},
			{Op: "remove", Path: "spec.handlers[b]", Old: map[string]any{"name": "b"}},
			{Op: "add", Path: "spec.handlers[c]", New: map[string]any{"name": "c"}},
		},
	}, {
		name: "a first handler",
		from: `{"spec":{"handlers":[]}}`,
		to:   `{"spec":{"handlers":[{"name":"a"}]}}`,
		want: []archive.Change{{Op: "add", Path: "spec.handlers[a]", New: map[string]any{"name": "a"}}},
	}, {
		name: "spec.rollout alone is no change; numbers by value",
		from: `{"spec":{"rollout":{"steps":[{"count":1}]},"resync":1}}`,
		to:   `{"spec":{"rollout":{"steps":[{"percent":50}]},"resync":1.0}}`,
	}, {
		name: "a list of another length without keys, as a whole",
		from: `{"spec":{"fields":["a"]}}`,
		to:   `{"spec":{"fields":["a","b"],"new":true}}`,
		want: []archive.Change{
			{Op: "change", Path: "spec.fields", Old: []any{"a"}, New: []any{"a", "b"}},
			{Op: "add", Path: "spec.new", New: true},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := definitionDiff(tc.from, tc.to)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("definitionDiff:\n got %#v\nwant %#v", got, tc.want)
			}
		})
	}
}

func TestDefinitionDiffSaysWhichDefinitionIsNotAnOperator(t *testing.T) {
	_, err := definitionDiff(`{"spec":{}}`, `not json`)
	if err == nil || !strings.Contains(err.Error(), "the new definition is not an Operator") {
		t.Errorf("definitionDiff of a broken new definition: %v", err)
	}
}
