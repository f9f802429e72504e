package definition

import (
	"reflect"
	"testing"
)

// A field read gives what the expression's program gives, value or
// error, and is taken only where it can.
func TestAFieldReadGivesWhatTheProgramGives(t *testing.T) {
	d, err := compileFile(t, "reads.yaml", `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: reads}
spec:
  resource:
    group: example.com
    kind: Reader
    versions:
    - name: v1
      schema:
        type: object
        properties:
          text: {type: string}
          copies: {type: integer}
          ratio: {type: number}
          on: {type: boolean}
          when: {type: string, format: date-time}
          absent: {type: string}
          obj: {type: object, properties: {a: {type: string}}}
  status:
    text: "${self.spec.text}"
    copies: "${self.spec.copies}"
    ratio: "${self.spec.ratio}"
    on: "${self.spec.on}"
    when: "${self.spec.when}"
    absent: "${self.spec.absent}"
    name: "${self.metadata.name}-x"
    objA: "${self.spec.obj.a}"
    sum: "${self.spec.copies + 1}"
    has: "${has(self.spec.text)}"
`)
	if err != nil {
		t.Fatal(err)
	}
	self := map[string]any{
		"apiVersion": "example.com/v1", "kind": "Reader", "metadata": map[string]any{"name": "r", "namespace": "ns"},
		"spec": map[string]any{"text": "hi", "copies": int64(3), "ratio": 1.5, "on": true, "when": "2026-11-25T10:00:00Z", "obj": map[string]any{"a": "b"}},
	}
	read := map[string]bool{"text": true, "copies": true, "ratio": true, "on": true, "name": true, "objA": true}
	for _, f := range d.Status {
		act := Vars{Self: self}.activation(f.schemas)
		for _, p := range f.Slot.parts {
			e := p.expr
			if e == nil {
				continue
			}
			_, took := e.readField(act)
			if took != read[f.Name] {
				t.Errorf("%s: ${%s} read as a field: %v, want %v", f.Name, e.Source, took, read[f.Name])
			}
			got, gotErr := e.Eval(act)
			program := *e
			program.path = nil
			want, wantErr := program.Eval(act)
			if !reflect.DeepEqual(got, want) || (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
				t.Errorf("%s: ${%s} = %#v, %v; the program gives %#v, %v", f.Name, e.Source, got, gotErr, want, wantErr)
			}
		}
	}
}
