package statemachine

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/opkit-dev/opkit/internal/definition"
)

func compileFile(t *testing.T, file string) *definition.Definition {
	t.Helper()
	defs, err := definition.CompileFiles(file)
	if err != nil {
		t.Fatal(err)
	}
	return defs[0]
}

func compileYAML(t *testing.T, yaml string) *definition.Definition {
	t.Helper()
	srcs, err := definition.Load("job.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	d, err := definition.Compile(srcs[0])
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// quoting has a guard, a question and a description with quotes,
// backslashes and line breaks, a final state, and handlers on enter and
// exit.
const quoting = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: job}
spec:
  resource:
    group: demo.example.com
    kind: Job
    versions:
    - name: v1
      schema:
        type: object
        properties:
          path: {type: string}
  states:
  - name: Waiting
    initial: true
    transitions:
    - to: Done
      reason: Found
      when: |
        self.spec.path == "C:\\temp"
        || self.spec.path == '"'
    timeout: {after: 1h30m, to: Asking}
  - name: Asking
    needsPerson:
      question: "Is \"C:\\temp\" right?\nAnswer."
    transitions:
    - to: Done
      description: 'says "yes"'
    - to: Waiting
  - name: Done
    final: true
  handlers:
  - name: tell
    on: [enter, exit]
    states: [Asking]
    exec: {command: [/bin/true]}
`

func TestTextSaysEveryStateWithItsMarksTransitionsAndHandlers(t *testing.T) {
	d := compileYAML(t, quoting)
	want := `Waiting [initial]
  -> Done (Found) when self.spec.path == "C:\\temp" || self.spec.path == '"'
  -> Asking (Timeout) after 1h30m

Asking [needs a person]
  asks: Is "C:\temp" right? Answer.
  on enter: tell
  on exit: tell
  -> Done (Decided) if a person chooses it: says "yes"
  -> Waiting (Decided) if a person chooses it

Done [final]
  (no way out)
`
	if diff := cmp.Diff(want, Text(d.States)); diff != "" {
		t.Errorf("Text (-want +got):\n%s", diff)
	}
}

func TestTheDatabaseExampleReadsAsText(t *testing.T) {
	d := compileFile(t, "../../examples/database/operator.yaml")
	want := `Provisioning [initial]
  -> Ready (Provisioned) when has(children.server.status.readyReplicas) && children.server.status.readyReplicas == 1; sets status.version = ${self.spec.version}
  -> NeedsAttention (ProvisioningTooSlow) after 10m

Ready
  on enter: announce
  -> Upgrading (VersionChanged) when self.spec.version != self.status.version && (!has(self.status.rejected) || self.spec.version != self.status.rejected)

Upgrading
  refuses: spec.version
  -> Verifying (Upgraded) when children.server.spec.template.metadata.labels['demo.example.com/version'] == self.spec.version && children.server.status.observedGeneration == children.server.metadata.generation && children.server.status.updatedReplicas == 1 && children.server.status.readyReplicas == 1
  -> NeedsAttention (UpgradeTooSlow) after 10m

Verifying
  refuses: spec.version
  -> Ready (Verified) when has(children.verify.status.succeeded) && children.verify.status.succeeded > 0; sets status.version = ${self.spec.version}
  -> NeedsAttention (VerificationFailed) when has(children.verify.status.failed) && children.verify.status.failed > 0
  -> NeedsAttention (VerificationTooSlow) after 10m

NeedsAttention [needs a person]
  asks: The new version failed its checks. Roll back to the last good version, or accept the new one?
  refuses: spec.version
  on enter: announce
  -> RollingBack (RollBack) if a person chooses it: run the last good version again; this one is not tried again until the spec names another; sets status.rejected = ${self.spec.version}
  -> Ready (Accepted) if a person chooses it: keep the new version as it is; sets status.version = ${self.spec.version}

RollingBack
  refuses: spec.version
  -> Ready (RolledBack) when children.server.spec.template.metadata.labels['demo.example.com/version'] == self.status.version && children.server.status.observedGeneration == children.server.metadata.generation && children.server.status.updatedReplicas == 1 && children.server.status.readyReplicas == 1
`
	if diff := cmp.Diff(want, Text(d.States)); diff != "" {
		t.Errorf("Text (-want +got):\n%s", diff)
	}
}

func TestDotDrawsStatesAndEdgesQuotedAndEscaped(t *testing.T) {
	d := compileYAML(t, quoting)
	want := `digraph "a \"job\"" {
  rankdir=LR;
  node [shape=box, style=rounded, fontname="Helvetica"];
  edge [fontname="Helvetica", fontsize=10];
  "_start" [shape=point, label=""];
  "_start" -> "Waiting";
  "Waiting";
  "Asking" [label="Asking\n(needs a person)", shape=octagon, style=filled, fillcolor="#fff2b3", tooltip="Is \"C:\\temp\" right?\nAnswer."];
  "Done" [shape=doublecircle, style=""];
  "Waiting" -> "Done" [label="Found\nwhen self.spec.path == \"C:\\\\temp\" || self.spec.path == '\"'"];
  "Waiting" -> "Asking" [label="Timeout\nafter 1h30m", style=dashed];
  "Asking" -> "Done" [label="Decided\na person's choice", style=bold];
  "Asking" -> "Waiting" [label="Decided\na person's choice", style=bold];
}
`
	if diff := cmp.Diff(want, Dot(d.States, `a "job"`)); diff != "" {
		t.Errorf("Dot (-want +got):\n%s", diff)
	}
}

func TestDotShortensLongGuardsAndMarksRefusedFields(t *testing.T) {
	got := Dot(compileFile(t, "../../examples/database/operator.yaml").States, "database")
	for _, line := range []string{
		`  "NeedsAttention" [label="NeedsAttention\n(needs a person)\nrefuses spec.version", shape=octagon, style=filled, fillcolor="#fff2b3", tooltip="The new version failed its checks. Roll back to the last good version, or accept the new one?"];`,
		`  "Upgrading" -> "Verifying" [label="Upgraded\nwhen children.server.spec.template.metadata.labels['demo.examp..."];`,
		`  "Verifying" -> "NeedsAttention" [label="VerificationTooSlow\nafter 10m", style=dashed];`,
	} {
		if !containsLine(got, line) {
			t.Errorf("no line\n%s\nin\n%s", line, got)
		}
	}
}

func containsLine(s, line string) bool {
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != '\n' {
			i++
		}
		if s[:i] == line {
			return true
		}
		if i == len(s) {
			break
		}
		s = s[i+1:]
	}
	return false
}
