package v1alpha1

import (
	"maps"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/utils/ptr"
)

// The schemas of spec.handlers and spec.states in the Operator CRD.

// durationRE is a Go duration of whole or decimal units, e.g. 30s, 1.5h or
// 1h30m, or 0.
const durationRE = `0|(([0-9]+(\.[0-9]+)?)(ns|us|µs|ms|s|m|h))+`

// DurationPattern matches a Go duration (durationRE).
const DurationPattern = `^(` + durationRE + `)$`

// EveryPattern matches schedule.every: a Go duration or a ${...} template.
const EveryPattern = `^(` + durationRE + `|.*\$\{.*\}.*)$`

func duration(desc string) apiextensionsv1.JSONSchemaProps {
	d := str(desc + " A Go duration, e.g. 30s or 5m.")
	d.MaxLength = ptr.To(int64(32))
	d.Pattern = DurationPattern
	return d
}

func handlerSchema() apiextensionsv1.JSONSchemaProps {
	name := str("Names the handler in runs and idempotency keys; a DNS label.")
	name.Pattern, name.MaxLength = HandlerNamePattern, ptr.To(int64(63))
	triggers := []string{OnCreate, OnUpdate, OnDelete, OnResume, OnSchedule, OnWhen, OnEvent, OnEnter, OnExit, OnValidate, OnMutate}
	on := apiextensionsv1.JSONSchemaProps{
		Type: "array", MinItems: ptr.To(int64(1)), MaxItems: ptr.To(int64(5)),
		Description: "Triggers: create, update, delete, resume, schedule, when, event, enter, exit; or validate or mutate alone (admission).",
		Items:       &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{Type: "string", Enum: enum(triggers...)}},
		XListType:   ptr.To("set"),
	}
	env := apiextensionsv1.JSONSchemaProps{
		Type: "array", MaxItems: ptr.To(int64(64)),
		Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
			Type: "object", Required: []string{"name"},
			Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"name": str("Variable name."), "value": str("Literal value."),
				"valueFrom": {
					Type: "object", Required: []string{"secretKeyRef"},
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"secretKeyRef": {
							Type: "object", Required: []string{"name", "key"},
							Properties: map[string]apiextensionsv1.JSONSchemaProps{
								"namespace": str("Namespace of the Secret; defaults to the object's."),
								"name":      str("Name of the Secret."),
								"key":       str("Key in the Secret."),
							},
						},
					},
				},
			},
		}},
	}
	return apiextensionsv1.JSONSchemaProps{
		Type: "object",
		// on is required by a rule, not here: a missing required field
		// stops the API server before it evaluates any rule, and a bare on
		// (true) would then be answered "on: Required value" alone.
		Required: []string{"name"},
		Properties: with(handlerActions(env), map[string]apiextensionsv1.JSONSchemaProps{
			"name":    name,
			"on":      on,
			"fields":  strList("Update fires only when one of these dotted paths changed, e.g. spec.replicas.", 32),
			"sources": strList("For the event trigger: the sources whose deliveries run the handler; defaults to all.", 16),
			"states":  strList("For the enter and exit triggers: the states whose entering or leaving runs the handler.", 64),
			"when": {
				Type: "string", MaxLength: ptr.To(int64(4096)),
				Description: "For the when trigger: a CEL condition over self, children and related; the handler runs once each time it becomes true.",
			},
			"schedule": {
				Type: "object",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"every": {
						Type:        "string",
						Description: "Interval between runs: a Go duration, e.g. 30s or 5m, or a ${...} template over the object that gives one.",
						MaxLength:   ptr.To(int64(1024)),
						Pattern:     EveryPattern,
					},
					"cron":     str("Cron expression, five fields, in timeZone."),
					"timeZone": str("IANA time zone of cron, e.g. Europe/Prague; defaults to UTC."),
					"catchUp": {
						Type: "string", Enum: enum(CatchUpSkip, CatchUpOnce),
						Description: "Operator-wide schedules: after downtime, skip the missed slots or run once for the latest. Defaults to Once.",
					},
				},
			},
			"timeout": duration("Bound of one run; defaults to 5m."),
			// A list, as on is: a rule reads only a typed field, and a value
			// of another type stops the API server before any rule.
			bareOnKey: {
				Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{Type: "string"}},
				Description: "Never valid: the on of a YAML 1.1 tool (kubectl, Helm, Argo CD, Flux), which reads a bare on key as true. Declared so that a rule can say how to write it, where an unknown field is only named.",
			},
		}),
		XValidations: apiextensionsv1.ValidationRules{{
			Rule:    "[has(self.exec), has(self.job), has(self.http)].filter(x, x).size() == 1",
			Message: "a handler has exactly one of exec, job and http",
		}, {
			Rule:      "has(self.on) || has(self.__true__)",
			Message:   "the triggers that run the handler: one or more of " + strings.Join(triggers, ", "),
			FieldPath: ".on",
			Reason:    ptr.To(apiextensionsv1.FieldValueRequired),
		}, {
			// CEL escapes a property named like a keyword: true is __true__.
			Rule:      "!has(self.__true__)",
			Message:   BareOnMessage,
			FieldPath: "." + bareOnKey,
			Reason:    ptr.To(apiextensionsv1.FieldValueForbidden),
		}},
	}
}

// handlerActions are a handler's admission, retry and actions (exec,
// job, http), env the schema of an action's environment variables.
func handlerActions(env apiextensionsv1.JSONSchemaProps) map[string]apiextensionsv1.JSONSchemaProps {
	return map[string]apiextensionsv1.JSONSchemaProps{
		"admission": {
			Type:        "object",
			Description: "How the API server calls a handler on validate or mutate.",
			Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"operations": {
					Type: "array", MaxItems: ptr.To(int64(3)), XListType: ptr.To("set"),
					Description: "CREATE, UPDATE, DELETE; defaults to CREATE and UPDATE.",
					Items:       &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{Type: "string", Enum: enum(OperationCreate, OperationUpdate, OperationDelete)}},
				},
				"failurePolicy": {
					Type: "string", Enum: enum(FailurePolicyFail, FailurePolicyIgnore),
					Description: "The answer when the handler gives none in time: Fail denies, Ignore allows. Defaults to Fail.",
				},
				"timeout": duration("How long the API server waits, 1s to 30s; defaults to 10s."),
				"matchConditions": {
					Type: "array", MaxItems: ptr.To(int64(63)),
					Description: "CEL conditions the API server checks before calling the handler; at most 63 (opkit adds one).",
					Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
						Type: "object", Required: []string{"name", "expression"},
						Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"name":       {Type: "string", MaxLength: ptr.To(int64(63))},
							"expression": {Type: "string", MaxLength: ptr.To(int64(4096))},
						},
					}},
				},
			},
		},
		"retry": {
			Type: "object",
			Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"maxAttempts":  {Type: "integer", Format: "int32", Minimum: ptr.To(1.0), Maximum: ptr.To(1000.0)},
				"initialDelay": duration("Delay after the first failure; defaults to 1s."),
				"maxDelay":     duration("Largest delay; defaults to 5m."),
				"factor":       {Type: "number", Minimum: ptr.To(1.0), Maximum: ptr.To(10.0)},
				"jitter":       {Type: "number", Minimum: ptr.To(0.0), Maximum: ptr.To(1.0)},
			},
		},
		"exec": {
			Type: "object", Required: []string{"command"},
			Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"command":    strList("The argv; never run through a shell.", 256),
				"image":      str("Container image the command runs in, in a warm runner Pod (in a cluster); without runners the engine's host runs it."),
				"env":        env,
				"workingDir": str("Working directory."),
				"serviceAccount": {
					Type: "object", Required: []string{"name"},
					Description: "Access to the cluster as this ServiceAccount: a token per run, in a kubeconfig named by $KUBECONFIG.",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"namespace": str("Defaults to the object's; required for a cluster-scoped resource."),
						"name":      str("The ServiceAccount."),
					},
				},
				"mode": {
					Type: "string", Enum: enum("Run", "Serve"),
					Description: "Run (the default): a process per run. Serve: processes that outlive runs, a binding context per line on stdin, a result per line on stdout.",
				},
				"processes": {
					Type: "integer", Format: "int32", Minimum: ptr.To(1.0), Maximum: ptr.To(64.0),
					Description: "How many processes of a Serve handler may run at once; defaults to 4.",
				},
			},
		},
		"job": {
			Type: "object", Required: []string{"image"},
			Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"namespace":                    str("Namespace of the Job; defaults to the object's."),
				"image":                        str("Container image."),
				"command":                      strList("Entrypoint.", 256),
				"args":                         strList("Arguments.", 256),
				"env":                          env,
				"serviceAccountName":           str("Service account of the pod."),
				"automountServiceAccountToken": {Type: "boolean"},
				"ttlSecondsAfterFinished":      {Type: "integer", Format: "int32", Minimum: ptr.To(0.0)},
			},
		},
		"http": {
			Type: "object", Required: []string{"url"},
			Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"url":      str("URL the binding context is posted to."),
				"caBundle": str("PEM certificates to trust."),
				"tokenSecret": {
					Type: "object", Required: []string{"namespace", "name", "key"},
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"namespace": str("Namespace of the Secret."), "name": str("Name of the Secret."), "key": str("Key of the token."),
					},
				},
			},
		},
	}
}

// with adds more's properties to props, and returns props.
func with(props, more map[string]apiextensionsv1.JSONSchemaProps) map[string]apiextensionsv1.JSONSchemaProps {
	maps.Copy(props, more)
	return props
}

// bareOnKey is the key a handler's on: becomes in a YAML 1.1 parser
// (kubectl's, Helm's, Argo CD's, Flux's), which reads a bare on as the
// boolean true; YAML 1.2 parsers, opkit's among them, read it as "on".
const bareOnKey = "true"

// BareOnMessage is what the Operator CRD and opkit lint say of a bare on:
// key: how to write it so that every YAML parser reads it as "on".
const BareOnMessage = `write "on": quoted: YAML 1.1 tools (kubectl) read a bare on as true`

// stateSchema is the schema of one of spec.states.
func stateSchema() apiextensionsv1.JSONSchemaProps {
	name := func(desc string) apiextensionsv1.JSONSchemaProps {
		s := str(desc)
		s.Pattern, s.MaxLength = StateNamePattern, ptr.To(int64(63))
		return s
	}
	// A target is checked by opkit against the states declared, with a
	// message that names them.
	target := func(desc string) apiextensionsv1.JSONSchemaProps {
		s := str(desc)
		s.MaxLength = ptr.To(int64(256))
		return s
	}
	reason := func(desc string) apiextensionsv1.JSONSchemaProps {
		s := str(desc)
		s.MaxLength = ptr.To(int64(63))
		return s
	}
	long := func(desc string, n int64) apiextensionsv1.JSONSchemaProps {
		s := str(desc)
		s.MaxLength = ptr.To(n)
		return s
	}
	transition := apiextensionsv1.JSONSchemaProps{
		Type: "object", Required: []string{"to"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"to":          target("The state it leads to."),
			"when":        long("The guard: a CEL condition over self, children, related and run; defaults to always. Not allowed from a state that needsPerson.", 4096),
			"reason":      reason("Recorded with the transition, a CamelCase word. Defaults to GuardHeld for a guarded transition, Unconditional for one without a guard, Decided for a person's choice."),
			"description": long("What this choice does, shown to the person deciding.", 1024),
			"set": {
				Type: "object", Description: "Status fields written with the transition, each a CEL template over self, children, related and run.",
				MaxProperties:        ptr.To(int64(16)),
				AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Schema: &apiextensionsv1.JSONSchemaProps{Type: "string", MaxLength: ptr.To(int64(4096))}},
			},
		},
	}
	return apiextensionsv1.JSONSchemaProps{
		Type: "object", Required: []string{"name"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"name":    name("The state's name, an identifier starting with an upper-case letter (e.g. Ready)."),
			"initial": {Type: "boolean", Description: "The state a new object starts in; exactly one state has it."},
			"final":   {Type: "boolean", Description: "A state with no way out."},
			"needsPerson": {
				Type: "object", Required: []string{"question"},
				Description: "The state waits for a person's decision (opkit decide); its transitions are the choices.",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"question": long("What the person is asked.", 1024),
				},
			},
			"transitions": {
				Type: "array", MaxItems: ptr.To(int64(32)),
				Description: "Ways out of the state, tried in order: the first whose guard holds is taken.",
				Items:       &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &transition},
			},
			"timeout": {
				Type: "object", Required: []string{"after", "to"},
				Description: "Leaves the state for another when the object has been in it this long.",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"after":  duration("At least 1s."),
					"to":     target("The state it leads to."),
					"reason": reason("Recorded with the transition; defaults to Timeout."),
				},
			},
			"refuses": strList("Dotted paths (spec, spec.version) that cannot change while an object is in the state.", 32),
		},
	}
}
