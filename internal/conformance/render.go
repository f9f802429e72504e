package conformance

import (
	"fmt"
	"strconv"
	"strings"
)

// The names the rendered definitions and objects use.
const (
	// OperatorName is every rendered Operator's name. Operators of one
	// kind render the same CRD, which engines of different namespaces
	// share (as the scenarios of one operator do).
	OperatorName = "conformance"
	// Group and ResourceKind are the custom resource's; StatesKind is the
	// one of operators with states (their CRD differs: the STATE column).
	Group        = "conformance.example.com"
	ResourceKind = "Item"
	StatesKind   = "Flow"
	// ObjectName is the name of the history's object.
	ObjectName = "obj"
	// WatchLabel marks the ConfigMaps a watch operator watches.
	WatchLabel = "conformance.example.com/watched"
	// TouchAnnotation is what OpTouch changes.
	TouchAnnotation = "conformance.example.com/touched"
)

// The annotations of opkit pause and opkit resume (v1alpha1's
// PauseAnnotation and ResumedAnnotation: the model imports nothing of
// opkit's).
const (
	PauseAnnotation   = "opkit.dev/paused"
	ResumedAnnotation = "opkit.dev/resumed"
)

// PauseAnnotations are the annotations OpPause or OpResume sets, as opkit
// pause and opkit resume do (nil removes one): a pause says who and why;
// a resume removes it and says who resumed.
func PauseAnnotations(op Op) map[string]any {
	by := fmt.Sprintf(`{"by":"conformance","reason":"the conformance check %ss","at":"2026-01-01T00:00:00Z"}`, op)
	if op == OpPause {
		return map[string]any{PauseAnnotation: by}
	}
	return map[string]any{PauseAnnotation: nil, ResumedAnnotation: by}
}

// ObjectKind is the kind of d's object: its custom resource's, or
// ConfigMap for a watch.
func (d *Def) ObjectKind() string {
	switch {
	case d.Kind == Watch:
		return "ConfigMap"
	case d.States != nil:
		return StatesKind
	}
	return ResourceKind
}

// APIVersion is the apiVersion of d's object.
func (d *Def) APIVersion() string {
	if d.Kind == Watch {
		return "v1"
	}
	return d.Group() + "/v1"
}

// Group is the API group of d's custom resource: Group, or in slot n
// cn.Group.
func (d *Def) Group() string {
	if d.Slot > 0 {
		return "c" + strconv.Itoa(d.Slot) + "." + Group
	}
	return Group
}

// OperatorName is the name of d's rendered Operator: OperatorName, with
// -states for an operator with states, and -n in slot n.
func (d *Def) OperatorName() string {
	name := OperatorName
	if d.States != nil {
		name += "-states"
	}
	if d.Slot > 0 {
		name += "-" + strconv.Itoa(d.Slot)
	}
	return name
}

// Operator renders d as an Operator manifest whose handlers run command
// (the recorder: argv, never a shell) with two more arguments, the
// handler's behaviour (Behaviour.Arg) and the kind ("resource" or
// "watch"), and the environment variables env (NAME=value).
//
// A webhook or CloudEvents source is rendered with its bearer token the
// Secret HookSecret of namespace ns; a NATS source as the stream
// NATSStream of the server at brokerURL, read from its first message
// (deliverPolicy All), by the default consumer opkit-<operator>-<source>;
// a Kafka source as the topic KafkaTopic of the broker at brokerURL
// (host:port), from its earliest offset, by the default group
// opkit-<operator>-<source>. A source's
// object is the history's, in ns.
func Operator(d *Def, ns, brokerURL string, command []string, env []string) string {
	var b strings.Builder
	name := d.OperatorName()
	fmt.Fprintf(&b, "apiVersion: opkit.dev/v1alpha1\nkind: Operator\nmetadata: {name: %s}\nspec:\n", name)
	switch d.Kind {
	case Watch:
		fmt.Fprintf(&b, "  watch:\n    apiVersion: v1\n    kind: ConfigMap\n    selector: {matchLabels: {%s: \"true\"}}\n", WatchLabel)
	default:
		fmt.Fprintf(&b, `  resource:
    group: %s
    kind: %s
    versions:
    - name: v1
      schema:
        type: object
        properties:
          a: {type: string}
          b: {type: string}
      statusSchema:
        properties:
          count: {type: integer}
`, d.Group(), d.ObjectKind())
	}
	if d.States != nil {
		b.WriteString(`  states:
  - name: Start
    initial: true
    transitions:
    - {to: Ask, reason: Asked}
  - name: Ask
    needsPerson: {question: "Done, or once more?"}
    transitions:
    - {to: Done, reason: Finished, description: done}
    - {to: Start, reason: Again, description: once more}
  - name: Done
    final: true
`)
	}
	if d.Source != nil {
		fmt.Fprintf(&b, "  sources:\n  - name: %s\n", SourceName)
		switch d.Source.Kind {
		case NATS:
			fmt.Fprintf(&b, "    nats:\n      url: %s\n      stream: %s\n      deliverPolicy: All\n", brokerURL, NATSStream)
		case Kafka:
			fmt.Fprintf(&b, "    kafka:\n      brokers: [%q]\n      topics: [%s]\n      startOffset: Earliest\n", brokerURL, KafkaTopic)
		case CloudEvents:
			fmt.Fprintf(&b, "    cloudEvents:\n      bearer:\n        secretRef: {namespace: %s, name: %s, key: token}\n", ns, HookSecret)
		default:
			fmt.Fprintf(&b, "    webhook:\n      bearer:\n        secretRef: {namespace: %s, name: %s, key: token}\n      deliveryHeader: %s\n", ns, HookSecret, DeliveryHeader)
		}
	}
	if d.Source != nil && d.Source.Object {
		fmt.Fprintf(&b, `    object:
      metadata: {name: %s, namespace: %s}
      spec:
        a: "${payload.a}"
`, ObjectName, ns)
	}
	b.WriteString("  handlers:\n")
	for _, h := range d.Handlers {
		writeHandler(&b, d, h, command, env)
	}
	return b.String()
}

// writeHandler writes handler h of d into an Operator's spec.handlers:
// its exec runs command with the handler's behaviour and d's kind, with
// env (KEY=VALUE each).
func writeHandler(b *strings.Builder, d *Def, h Handler, command, env []string) {
	on := make([]string, len(h.On))
	for i, t := range h.On {
		on[i] = string(t)
	}
	fmt.Fprintf(b, "  - name: %s\n    \"on\": [%s]\n", h.Name, strings.Join(on, ", "))
	if len(h.Fields) > 0 {
		root := "spec."
		if d.Kind == Watch {
			root = "data."
		}
		fields := make([]string, len(h.Fields))
		for i, f := range h.Fields {
			fields[i] = root + f
		}
		fmt.Fprintf(b, "    fields: [%s]\n", strings.Join(fields, ", "))
	}
	if len(h.States) > 0 {
		fmt.Fprintf(b, "    states: [%s]\n", strings.Join(h.States, ", "))
	}
	if h.Fires(When) {
		// WhenHolds, in CEL.
		if d.Kind == Watch {
			b.WriteString("    when: \"has(self.data) && 'a' in self.data && int(self.data['a']) % 2 == 1\"\n")
		} else {
			b.WriteString("    when: \"has(self.spec.a) && int(self.spec.a) % 2 == 1\"\n")
		}
	}
	fmt.Fprintf(b, "    timeout: 60s\n    retry: {maxAttempts: %d, initialDelay: 100ms, maxDelay: 1s, factor: 2, jitter: 0}\n", h.MaxAttempts)
	args := append(append([]string{}, command...), h.Behaviour.Arg(), string(d.Kind))
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = strconv.Quote(a)
	}
	fmt.Fprintf(b, "    exec:\n      command: [%s]\n", strings.Join(quoted, ", "))
	if h.Serve {
		b.WriteString("      mode: Serve\n")
	}
	if len(env) > 0 {
		vars := make([]string, len(env))
		for i, kv := range env {
			k, v, _ := strings.Cut(kv, "=")
			vars[i] = fmt.Sprintf("{name: %s, value: %s}", k, strconv.Quote(v))
		}
		fmt.Fprintf(b, "      env: [%s]\n", strings.Join(vars, ", "))
	}
}

// Arg writes b as the recorder's argument: "fail=N,permanent,write".
func (b Behaviour) Arg() string {
	parts := []string{"fail=" + strconv.Itoa(b.Fail)}
	if b.Permanent {
		parts = append(parts, "permanent")
	}
	if b.Write {
		parts = append(parts, "write")
	}
	return strings.Join(parts, ",")
}

// ParseBehaviour reads Arg's form.
func ParseBehaviour(s string) (Behaviour, error) {
	var b Behaviour
	for part := range strings.SplitSeq(s, ",") {
		switch {
		case part == "permanent":
			b.Permanent = true
		case part == "write":
			b.Write = true
		case strings.HasPrefix(part, "fail="):
			n, err := strconv.Atoi(strings.TrimPrefix(part, "fail="))
			if err != nil || n < 0 {
				return b, fmt.Errorf("behaviour %q: fail=%s is not a count", s, strings.TrimPrefix(part, "fail="))
			}
			b.Fail = n
		default:
			return b, fmt.Errorf("behaviour %q: unknown part %q: expected fail=N, permanent or write", s, part)
		}
	}
	return b, nil
}

// Object is the history's object as first created, a manifest without
// namespace.
func (d *Def) Object() map[string]any {
	meta := map[string]any{"name": ObjectName}
	obj := map[string]any{"apiVersion": d.APIVersion(), "kind": d.ObjectKind(), "metadata": meta}
	content := map[string]any{"a": "0", "b": "0"}
	if d.Kind == Watch {
		meta["labels"] = map[string]any{WatchLabel: "true"}
		obj["data"] = content
	} else {
		obj["spec"] = content
	}
	return obj
}

// ChangePatch is the JSON merge patch of an OpChange of field to value.
func (d *Def) ChangePatch(field, value string) map[string]any {
	root := "spec"
	if d.Kind == Watch {
		root = "data"
	}
	return map[string]any{root: map[string]any{field: value}}
}
